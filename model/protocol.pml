/*
 * The lease protocol of invoice-pipeline as the SQL implements it: claims, heartbeats and the
 * sweep on the database clock, fenced writes, self-fencing, the advisory locks around the
 * duplicate decision, retries and the dead letter. See docs/reliability.md ("The model").
 *
 * One atomic step = one SQL statement (or one commit), named after the function or query of
 * sql/ it models; each prints an "@@ step=..." line, which `make model` turns into the
 * schedule files the replay tests drive the real SQL with (model/trails/*.schedule).
 *
 * Mutants (-D...): each removes one mechanism, and Spin must find a counterexample.
 *   NO_FENCE         fence_jobs does not check that the job is still running
 *   NO_ADVISORY      decide_duplicates without take_dedupe_locks
 *   SWEEP_NO_RECHECK release_stale_locks updates the ids a snapshot found stale, without
 *                    re-checking the row (status, heartbeat) under its row lock
 *   HB_QUEUED        heartbeats sent where the work waits, so they queue behind a blocked write
 *   NO_INDEX         acquire_processing_locks without the partial unique index (the snapshot's
 *                    NOT EXISTS is all that is left)
 *   NO_RESCHEDULE    the sweep without lock_orphans + reschedule_failed (liveness must fail)
 */

#ifndef W
#define W 3            /* workers */
#endif
#ifndef FAULTS
#define FAULTS 2       /* faults injected in a run (then they stop) */
#endif
#ifndef M
#define M 2            /* invoice rows: 0 and 1 are copies of one invoice; with 3, row 2 is another */
#endif
#define K 2            /* advisory lock keys: one per business invoice */
#define KEY(i) ((i) == 2 -> 1 : 0)
#define MAXATT 2       /* attempts before the dead letter (needs_attention) */
#define J (M * MAXATT) /* job rows: one per (invoice, attempt), slot i * MAXATT + attempt - 1 */
#ifndef TTL
#define TTL 2          /* the lease TTL, in clock ticks (sweep: heartbeat older than the TTL) */
#endif
#define SELF_FENCE 1   /* LeaseKeeper.SELF_FENCE_SHARE (2/3) of the TTL, in whole ticks: a beat missed */
#define NONE 255

/* invoices.status */
#define PENDING 0
#define PROCESSING 1
#define FAILED 2
#define PROCESSED 3
#define HELD 4         /* needs_review: held for a person, never posted */
#define DEAD 5         /* needs_attention: the dead letter */
/* invoices.duplicate_status */
#define UNDECIDED 0
#define ORIGINAL 1
#define COPY 2
/* processing_jobs.status */
#define FREE 0
#define RUN 1
#define SUCCEEDED 2
#define SWEPT 3        /* failed */

byte inv_status[M];
byte inv_att[M];
byte inv_row[M];       /* FOR NO KEY UPDATE holder: 0, or worker + 1 */
byte inv_dup[M];
bool posted[M];        /* ledger_postings (UNIQUE invoice_id) */
byte job_status[J];
byte job_age[J];       /* ticks since heartbeat_at, on the database clock (saturates at TTL) */
byte job_row[J];       /* FOR UPDATE holder: 0, or worker + 1 */
byte job_w[J];
byte adv[K];           /* pg_advisory_xact_lock holder: 0, or worker + 1 */

byte wjob[W];          /* the lease the worker holds (LeaseKeeper.held), or NONE */
byte renew[W];         /* ticks since the keeper's last confirmed beat (LeaseKeeper._renewed) */
bool lost[W];          /* the keeper found the job no longer running */
bool crashed[W];       /* SIGKILL */
bool away[W];          /* frozen (SIGSTOP) or cut off: nothing it sends arrives */
bool late[W];          /* its heartbeats are lost or late */
bool hbfault[W];       /* a fault touched the current lease: the sweep may take it */
bool intx[W];          /* a write transaction is open */
bool aborted[W];       /* the server aborted it (restart, idle_in_transaction timeout) */
bool waitlock[W];      /* the work connection waits for an advisory lock */
byte faults = FAULTS;
byte ncrash;
byte r;                /* scratch of the loops inside atomic steps: always 0 between steps */
byte fw;               /* the worker a fault picks: scratch, likewise */

#define TERMINAL(i) (inv_status[i] == PROCESSED || inv_status[i] == HELD || inv_status[i] == DEAD)
#define RUNNING_OF(i) (job_status[(i) * MAXATT] == RUN || job_status[(i) * MAXATT + 1] == RUN)
#if M == 3
#define ALL_DONE (TERMINAL(0) && TERMINAL(1) && TERMINAL(2))
#define NO_LEASE (!RUNNING_OF(0) && !RUNNING_OF(1) && !RUNNING_OF(2))
#define ROWS_OF(s) ((((s) & 1) == 0 || job_row[0] == 0) && (((s) & 2) == 0 || job_row[1] == 0) && \
                    (((s) & 4) == 0 || job_row[2] == 0) && (((s) & 8) == 0 || job_row[3] == 0) && \
                    (((s) & 16) == 0 || job_row[4] == 0) && (((s) & 32) == 0 || job_row[5] == 0))
#else
#define ALL_DONE (TERMINAL(0) && TERMINAL(1))
#define NO_LEASE (!RUNNING_OF(0) && !RUNNING_OF(1))
#define ROWS_OF(s) ((((s) & 1) == 0 || job_row[0] == 0) && (((s) & 2) == 0 || job_row[1] == 0) && \
                    (((s) & 4) == 0 || job_row[2] == 0) && (((s) & 8) == 0 || job_row[3] == 0))
#endif
#define OTHER_ORIGINAL(i) ((i) != 2 && inv_dup[1 - (i)] == ORIGINAL)
#define OTHER_POSTED(i) ((i) != 2 && posted[1 - (i)])
/* claim_due_invoices (the sensor's due query; no lock): what a worker is asked to claim. */
#define DUE(i) ((inv_status[i] == PENDING || inv_status[i] == FAILED) && inv_att[i] < MAXATT)
#define ROWS_FREE(w, i, j) ((inv_row[i] == 0 || inv_row[i] == (w) + 1) && \
                            (job_row[j] == 0 || job_row[j] == (w) + 1))

/* A connection's end (commit, rollback, death): its row and advisory locks go. */
inline release_locks(x) {
    r = 0;
    do
    :: r < M -> if :: inv_row[r] == x + 1 -> inv_row[r] = 0 :: else fi; r++
    :: r >= M -> break
    od;
    r = 0;
    do
    :: r < J -> if :: job_row[r] == x + 1 -> job_row[r] = 0 :: else fi; r++
    :: r >= J -> break
    od;
    r = 0;
    do
    :: r < K -> if :: adv[r] == x + 1 -> adv[r] = 0 :: else fi; r++
    :: r >= K -> break
    od;
    r = 0
}

/* The server aborts x's open transaction (it reconnects and retries it: StoreBase._retrying). */
inline abort_tx(x) {
    release_locks(x);
    if :: intx[x] -> intx[x] = false; waitlock[x] = false; aborted[x] = true :: else fi
}

/* stages: a lease lost or possibly lost (LeaseKeeper.may_hold) is not worked on. */
#define MAY_NOT_HOLD (lost[w] || renew[w] >= SELF_FENCE)

/* fence / fence_chunk -> fence_jobs (sql/0009, 0013): the invoice row, then the job row; the job
 * must still be running. Refused: rollback, LeaseLost, the lease is dropped. */
#ifndef NO_FENCE
#define FENCE \
    atomic { \
        if \
        :: job_status[j] != RUN -> \
            printf("@@ step=fence_refused w=%d i=%d j=%d\n", w, i, j); \
            release_locks(w); intx[w] = false; goto drop \
        :: job_status[j] == RUN && ROWS_FREE(w, i, j) -> \
            inv_row[i] = w + 1; job_row[j] = w + 1; job_age[j] = 0; \
            printf("@@ step=fence_jobs w=%d i=%d j=%d\n", w, i, j) \
        fi \
    }
#else
#define FENCE \
    atomic { \
        ROWS_FREE(w, i, j) -> inv_row[i] = w + 1; job_row[j] = w + 1; \
        printf("@@ step=fence_jobs w=%d i=%d j=%d\n", w, i, j) \
    }
#endif

/* Every commit of a fenced write: property "a write by a job that is not the running one is
 * never applied". */
#define ASSERT_FENCED assert(job_status[j] == RUN)

proctype Worker(byte w) provided (!away[w])
{
    byte i, j;
    bool seen;
    {
end_idle:
    do
    :: atomic {
           /* claim_due_invoices: the sensor's due query picks an invoice (no lock); then
            * acquire_locks -> acquire_processing_locks (sql/0009), one statement: the invoice
            * row locked and its status re-read, INSERT ... ON CONFLICT (invoice_id) WHERE
            * status = 'running' DO NOTHING, the invoice marked processing. */
           if
           :: DUE(0) -> i = 0
           :: DUE(1) -> i = 1
#if M == 3
           :: DUE(2) -> i = 2
#endif
           fi;
#ifdef NO_INDEX
           /* Without the index: the NOT EXISTS reads a snapshot taken before the row lock is
            * granted, and the INSERT has nothing to conflict with. */
           seen = RUNNING_OF(i);
           printf("@@ step=acquire_snapshot w=%d i=%d\n", w, i)
       };
       atomic {
#endif
           inv_row[i] == 0 ->
           if
#ifndef NO_INDEX
           :: ((inv_status[i] == PENDING || inv_status[i] == FAILED || inv_status[i] == PROCESSING)
               && inv_att[i] < MAXATT && !RUNNING_OF(i)) ->
#else
           :: ((inv_status[i] == PENDING || inv_status[i] == FAILED || inv_status[i] == PROCESSING)
               && inv_att[i] < MAXATT && !seen) ->
#endif
               j = i * MAXATT + inv_att[i];
               printf("@@ step=acquire_processing_locks w=%d i=%d j=%d\n", w, i, j);
               /* property: at most one running job per invoice */
               assert(!RUNNING_OF(i));
               job_status[j] = RUN; job_age[j] = 0; job_w[j] = w;
               inv_status[i] = PROCESSING; inv_att[i]++;
               wjob[w] = j; renew[w] = 0; lost[w] = false; hbfault[w] = late[w]
           :: else ->
               printf("@@ step=acquire_bounced w=%d i=%d\n", w, i);
               i = 0; seen = false; goto next
           fi;
           seen = false
       };

       /* decide_duplicates (engine/store/dedupe.py): advisory locks, fence, read, mark. */
decide:
       {
           atomic {
               if :: MAY_NOT_HOLD -> goto drop :: else fi;
               if :: inv_dup[i] != UNDECIDED -> goto post :: else fi;   /* decided: kept */
               intx[w] = true;
#ifndef NO_ADVISORY
               waitlock[w] = true;
               /* take_dedupe_locks (sql/0003): pg_advisory_xact_lock on the copies' key; sent
                * now, granted when the key is free */
               printf("@@ step=take_dedupe_locks w=%d i=%d k=%d\n", w, i, KEY(i));
               adv[KEY(i)] == 0 -> adv[KEY(i)] = w + 1; waitlock[w] = false;
               printf("@@ step=dedupe_locks_granted w=%d i=%d k=%d\n", w, i, KEY(i))
#endif
           };
           FENCE;
           /* chunk_duplicate_candidates: the originals in reach, read after the locks */
           atomic { seen = OTHER_ORIGINAL(i); printf("@@ step=chunk_duplicate_candidates w=%d i=%d\n", w, i) };
           /* mark_original / mark_duplicate (only while undecided), then COMMIT */
           atomic {
               if
               :: inv_dup[i] == UNDECIDED && seen ->
                   printf("@@ step=mark_duplicate w=%d i=%d j=%d\n", w, i, j);
                   ASSERT_FENCED;
                   inv_dup[i] = COPY
               :: inv_dup[i] == UNDECIDED && !seen ->
                   printf("@@ step=mark_original w=%d i=%d j=%d\n", w, i, j);
                   ASSERT_FENCED;
                   /* property: two copies are never both originals */
                   assert(!OTHER_ORIGINAL(i));
                   inv_dup[i] = ORIGINAL
               :: else -> printf("@@ step=decided_already w=%d i=%d j=%d\n", w, i, j); ASSERT_FENCED
               fi;
               seen = false;
               release_locks(w); intx[w] = false
           }
       } unless { atomic { aborted[w] -> aborted[w] = false; seen = false }; goto decide };

       /* post_many (engine/store/documents.py): fence, post_to_ledger (ON CONFLICT DO NOTHING). */
post:
       {
           atomic {
               if :: MAY_NOT_HOLD -> goto drop :: else fi;
               intx[w] = true
           };
           FENCE;
           atomic {
               if
               :: inv_dup[i] == ORIGINAL && !posted[i] ->
                   printf("@@ step=post_to_ledger w=%d i=%d j=%d\n", w, i, j);
                   ASSERT_FENCED;
                   /* property: an invoice is posted at most once (its copies included) */
                   assert(!OTHER_POSTED(i));
                   posted[i] = true
               :: else -> printf("@@ step=post_skipped w=%d i=%d j=%d\n", w, i, j); ASSERT_FENCED
               fi;
               release_locks(w); intx[w] = false
           }
       } unless { atomic { aborted[w] -> aborted[w] = false }; goto post };

       /* complete_many (engine/store/claims.py): fence, mark_processed, finish_lock. */
complete:
       {
           atomic {
               if :: MAY_NOT_HOLD -> goto drop :: else fi;
               intx[w] = true
           };
           FENCE;
           atomic {
               printf("@@ step=finish_processing_lock w=%d i=%d j=%d\n", w, i, j);
               ASSERT_FENCED;
               if
               :: inv_dup[i] == COPY -> inv_status[i] = HELD
               :: else -> inv_status[i] = PROCESSED
               fi;
               job_status[j] = SUCCEEDED;
               release_locks(w); intx[w] = false;
               wjob[w] = NONE; j = NONE; i = 0;
               goto next
           }
       } unless { atomic { aborted[w] -> aborted[w] = false }; goto complete };

drop:  /* LeaseLost or self-fenced: the keeper drops the lease; the sweep will release it. */
       atomic { wjob[w] = NONE; printf("@@ step=lease_dropped w=%d i=%d j=%d\n", w, i, j); j = NONE; i = 0 };
next:
       skip
    od
    } unless { crashed[w] }
}

/* The sweep schedule (engine/maintenance.py): release_stale_locks, then lock_orphans +
 * reschedule_failed. Property: the sweep takes only an abandoned lease: its heartbeat is older
 * than the TTL when it is released, and its holder is dead, frozen, cut off, late, or has
 * dropped it (nobody takes live work away). */
#define ASSERT_ABANDONED(r) \
    assert(job_age[r] >= TTL && \
           (crashed[job_w[r]] || away[job_w[r]] || hbfault[job_w[r]] || wjob[job_w[r]] != (r)))

proctype Sweeper()
{
#ifdef SWEEP_NO_RECHECK
    byte s;
#endif
end_sweep:
    do
    :: true ->
#ifndef SWEEP_NO_RECHECK
       /* release_stale_locks (sql/0009): FOR UPDATE SKIP LOCKED, the WHERE re-checked on the
        * row's newest version. */
       atomic {
           r = 0;
           do
           :: r < J ->
               if
               :: job_status[r] == RUN && job_age[r] >= TTL && job_row[r] == 0 ->
                   printf("@@ step=release_stale_locks j=%d\n", r);
                   ASSERT_ABANDONED(r);
                   job_status[r] = SWEPT
               :: else
               fi;
               r++
           :: r >= J -> break
           od;
           r = 0
       };
#else
       /* The ids a snapshot found stale, then an UPDATE of those ids that waits for their row
        * locks and does not re-check them. */
       atomic {
           r = 0; s = 0;
           do
           :: r < J ->
               if :: job_status[r] == RUN && job_age[r] >= TTL -> s = s | (1 << r) :: else fi; r++
           :: r >= J -> break
           od;
           r = 0;
           printf("@@ step=stale_snapshot s=%d\n", s)
       };
       atomic {
           ROWS_OF(s) ->
           do
           :: r < J ->
               if
               :: (s & (1 << r)) != 0 && job_status[r] == RUN ->
                   printf("@@ step=release_stale_locks j=%d\n", r);
                   ASSERT_ABANDONED(r);
                   job_status[r] = SWEPT
               :: else
               fi;
               r++
           :: r >= J -> break
           od;
           r = 0; s = 0
       };
#endif
       /* lock_orphans (SKIP LOCKED) + reschedule_failed: an invoice left processing with no
        * running job is retried, or dead-lettered once its attempts are spent. */
#ifndef NO_RESCHEDULE
       atomic {
           r = 0;
           do
           :: r < M ->
               if
               :: inv_status[r] == PROCESSING && !RUNNING_OF(r) && inv_row[r] == 0 ->
                   if
                   :: inv_att[r] >= MAXATT -> inv_status[r] = DEAD
                   :: else -> inv_status[r] = FAILED
                   fi;
                   printf("@@ step=reschedule_failed i=%d status=%d\n", r, inv_status[r])
               :: else
               fi;
               r++
           :: r >= M -> break
           od;
           r = 0
       }
#else
       skip
#endif
    od
}

/* A process's LeaseKeeper beats its lease this tick: it is alive, connected and on time. */
#ifndef HB_QUEUED
#define BEATS(x) (wjob[x] != NONE && !crashed[x] && !away[x] && !late[x])
#else
/* ... and its beat is not stuck behind the write its work connection is waiting in. */
#define BEATS(x) (wjob[x] != NONE && !crashed[x] && !away[x] && !late[x] && !waitlock[x])
#endif

/* The database clock, and each process's LeaseKeeper beating its leases (heartbeat_locks) once
 * per tick: the heartbeat interval is well below the TTL. */
proctype Clock()
{
end_clock:
    do
    :: atomic {
           r = 0;
           do
           /* A job row held by its live holder's fenced write does not age: the fence beat it,
            * and the write is short next to the TTL. Held by a frozen or cut holder, it ages
            * (and idle_in_transaction_session_timeout, below the TTL, ends that write). */
           :: r < J ->
               if
               :: job_status[r] == RUN && job_age[r] < TTL &&
                  (job_row[r] == 0 || away[job_row[r] - 1]) -> job_age[r]++
               :: else
               fi;
               r++
           :: r >= J -> break
           od;
           r = 0;
           do
           :: r < W ->
               if
               :: wjob[r] != NONE && renew[r] < SELF_FENCE -> renew[r]++
               :: else
               fi;
               /* heartbeat_locks: its own connection, FOR UPDATE SKIP LOCKED (a row being
                * written is alive: the fence beats it) */
               if
               :: BEATS(r) ->
                   if
                   :: job_status[wjob[r]] == RUN ->
                       if :: job_row[wjob[r]] == 0 -> job_age[wjob[r]] = 0 :: else fi;
                       renew[r] = 0
                   :: else -> lost[r] = true
                   fi
               :: else
               fi;
               r++
           :: r >= W -> break
           od;
           r = 0;
           printf("@@ step=tick\n")
       }
    od
}

/* Faults, at any step, until the budget is spent: crash (SIGKILL), freeze or cut (and resume or
 * heal), lost or late heartbeats, a database restart aborting every open transaction; and the
 * server's idle_in_transaction_session_timeout ending a frozen worker's transaction. */
proctype Faults()
{
end_faults:
    do
    :: faults > 0 && ncrash < W - 1 ->
       atomic {
           select(fw : 0 .. W - 1);
           if
           :: !crashed[fw] -> crashed[fw] = true; away[fw] = false; hbfault[fw] = true;
               release_locks(fw); intx[fw] = false; waitlock[fw] = false;
               faults--; ncrash++;
               printf("@@ step=crash w=%d\n", fw)
           :: else
           fi;
           fw = 0
       }
    :: faults > 0 ->
       atomic {
           select(fw : 0 .. W - 1);
           if
           :: !crashed[fw] && !away[fw] -> away[fw] = true; hbfault[fw] = true; faults--;
               printf("@@ step=freeze w=%d\n", fw)
           :: else
           fi;
           fw = 0
       }
    :: faults > 0 ->
       atomic {
           select(fw : 0 .. W - 1);
           if
           :: !crashed[fw] && !late[fw] -> late[fw] = true; hbfault[fw] = true; faults--;
               printf("@@ step=heartbeats_lost w=%d\n", fw)
           :: else
           fi;
           fw = 0
       }
    :: faults > 0 ->
       atomic {
           fw = 0;
           do
           :: fw < W -> abort_tx(fw); fw++
           :: fw >= W -> break
           od;
           fw = 0; faults--;
           printf("@@ step=db_restart\n")
       }
    :: atomic {
           select(fw : 0 .. W - 1);
           if
           :: away[fw] -> away[fw] = false; printf("@@ step=resume w=%d\n", fw)
           :: away[fw] && intx[fw] -> abort_tx(fw); printf("@@ step=idle_timeout w=%d\n", fw)
           :: late[fw] -> late[fw] = false; printf("@@ step=heartbeats_back w=%d\n", fw)
           :: else
           fi;
           fw = 0
       }
    od
}

/* Liveness (with -a -f: weak fairness; the fault budget makes faults stop): every invoice ends
 * processed, held or dead-lettered, and no lease is left running. */
ltl terminates { <> (ALL_DONE && NO_LEASE) }

init {
    atomic {
        r = 0;
        do
        :: r < W -> wjob[r] = NONE; run Worker(r); r++
        :: r >= W -> break
        od;
        run Sweeper();
        run Clock();
        run Faults()
    }
}
