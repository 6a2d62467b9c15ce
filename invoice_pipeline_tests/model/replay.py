"""Replaying a Spin counterexample (model/trails/<MUTANT>.schedule) against the real SQL.

The schedule is the model's steps in trail order (see model/run.py). Each model worker is a
thread with its own work connection; a step is handed to its worker, and the driver moves on
once the step is done or once PostgreSQL says the worker's backend waits for a lock
(pg_stat_activity.wait_event_type = 'Lock'): a step the real system makes wait stays queued,
and that worker's later steps queue behind it, in order, until the lock is granted. The real
transactions are the product's, with every mechanism in place: whatever the broken model
skipped (the fence, the advisory lock, the index, the sweep's re-check, the heartbeat's own
connection) the real statements do. The clock is the database's: a tick back-dates the running
jobs' heartbeats by TICK (rows held by a write in flight are skipped, as in the model), then
each live worker's keeper beats with heartbeat_locks on its own connection.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile

CLAIMS = QueryFile("claims")
FENCE = QueryFile("fence")
DEDUPE = QueryFile("dedupe")
DOCUMENTS = QueryFile("documents")
MAINTENANCE = QueryFile("maintenance")

TRAILS = Path(__file__).resolve().parents[2] / "model" / "trails"
ORG = "model-org"
TICK = timedelta(seconds=10)
# The model's TTL is 2 ticks: stale after 2 ticks, not after 1, whatever the test's own pace.
STALE_AFTER = timedelta(seconds=15)
MAX_ATTEMPTS = 2
NUMBER_KEY = 4242  # the copies share their number key: one advisory lock (sql/0003)
STEP_WAIT_S = 20.0


@dataclass(frozen=True)
class Step:
    name: str
    args: dict[str, int]


@dataclass(frozen=True)
class Schedule:
    mutant: str
    steps: list[Step]
    violated: str


def load_schedule(mutant: str) -> Schedule:
    steps: list[Step] = []
    violated = ""
    for line in (TRAILS / f"{mutant}.schedule").read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("violated "):
            violated = line[len("violated ") :]
            continue
        name, *pairs = line.split()
        steps.append(Step(name, {k: int(v) for k, v in (p.split("=", 1) for p in pairs)}))
    return Schedule(mutant, steps, violated)


@dataclass
class Outcome:
    """What the real system did at one step of the schedule."""

    step: Step
    did: str = "queued"


class RealWorker:
    """One model worker: a thread running its steps, in order, on its own work connection."""

    def __init__(self, url: str, w: int, invoices: list[UUID], jobs: dict[int, UUID]) -> None:
        self.url = url
        self.w = w
        self.invoices = invoices
        self.jobs = jobs
        self.conn: psycopg.Connection[Any] | None = None
        self.pid: int | None = None
        self.lease: UUID | None = None
        self.phase = "decide"
        self.fenced = False
        self.has_advisory = False
        self.seen_original: UUID | None = None
        self.crashed = False
        self.away = False
        self.late = False
        self.errors: list[BaseException] = []
        self._tasks: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._thread = threading.Thread(target=self._run, name=f"model-w{w}", daemon=True)
        self._thread.start()

    # -- the thread ---------------------------------------------------------------------------
    def submit(self, task: Callable[[], None]) -> None:
        with self._lock:
            self._pending += 1
        self._tasks.put(task)

    def idle(self) -> bool:
        with self._lock:
            return self._pending == 0

    def wait_idle(self, timeout: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self) -> None:
        self._tasks.put(None)
        self._thread.join(timeout=STEP_WAIT_S)

    def _run(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                task()
            except psycopg.OperationalError:
                # Its session was ended (crash, restart, idle timeout): the transaction is gone.
                self._forget_connection()
            except BaseException as exc:  # surfaced by the test
                self.errors.append(exc)
                self._forget_connection()
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
        self._forget_connection()

    def _forget_connection(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None
        self.pid = None
        self.fenced = False
        self.has_advisory = False

    def _c(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            self.conn = psycopg.connect(self.url, application_name=f"model-w{self.w}")
            self.pid = self.conn.info.backend_pid
        return self.conn

    # -- the product's transactions, statement by statement ------------------------------------
    def claim(self, i: int, j: int, out: Outcome) -> None:
        conn = self._c()
        rows = conn.execute(
            CLAIMS["acquire_locks"],
            {"invoice_ids": [self.invoices[i]], "attempts": [None], "owner": f"w{self.w}"},
        ).fetchall()
        decided = conn.execute(DEDUPE["load_duplicate_decision"], {"invoice_id": self.invoices[i]}).fetchone()
        conn.commit()
        self.fenced = self.has_advisory = False
        self.lease = rows[0][2] if rows else None
        self.phase = "post" if decided else "decide"
        if self.lease is not None:
            self.jobs[j] = self.lease
        out.did = "claimed" if rows else "bounced"

    def take_dedupe_locks(self, out: Outcome) -> None:
        if self.lease is None:
            out.did = "no lease"
            return
        self._c().execute(DEDUPE["take_dedupe_locks"], {"lock_ids": [NUMBER_KEY]})
        self.has_advisory = True
        out.did = "locked"

    def fence(self, i: int, out: Outcome) -> None:
        if self.lease is None:
            out.did = "no lease"
            return
        conn = self._c()
        if self.phase == "decide" and not self.has_advisory:
            # The real decision always takes its advisory locks first (dedupe.decide_duplicates).
            conn.execute(DEDUPE["take_dedupe_locks"], {"lock_ids": [NUMBER_KEY]})
            self.has_advisory = True
        row = conn.execute(FENCE["fence"], {"job_id": self.lease, "invoice_id": self.invoices[i]}).fetchone()
        if row is None:
            conn.rollback()
            self.lease = None
            self.has_advisory = False
            out.did = "refused"
            return
        self.fenced = True
        out.did = "fenced"

    def read_candidates(self, i: int, out: Outcome) -> None:
        if self.lease is None or not self.fenced:
            out.did = "no lease"
            return
        rows = (
            self._c()
            .execute(
                DEDUPE["chunk_duplicate_candidates"],
                {"org_ids": [ORG], "block_keys": [], "number_keys": [NUMBER_KEY]},
            )
            .fetchall()
        )
        others = [row[0] for row in rows if row[0] != self.invoices[i]]
        self.seen_original = others[0] if others else None
        out.did = "read"

    def decide(self, i: int, out: Outcome) -> None:
        """mark_original or mark_duplicate, as the real read says, then COMMIT."""
        if self.lease is None or not self.fenced:
            out.did = "not written (no lease)"
            return
        conn = self._c()
        keys = {"business_key": f"key-{i}", "business_key_hash": i, "vendor_key": f"vendor-{i}",
                "block_key": 100 + i, "number_key": NUMBER_KEY}  # fmt: skip
        if self.seen_original is None:
            conn.execute(DEDUPE["mark_original"], {"invoice_id": self.invoices[i], **keys})
            out.did = "original"
        else:
            conn.execute(
                DEDUPE["mark_duplicate"],
                {"invoice_id": self.invoices[i], "org_id": ORG, "original_id": self.seen_original,
                 "how": "number", "score": 1, "reasons": ["model replay"], **keys},
            )  # fmt: skip
            out.did = "duplicate"
        conn.commit()
        self.fenced = self.has_advisory = False
        self.seen_original = None
        self.phase = "post"

    def post(self, i: int, out: Outcome) -> None:
        if self.lease is None or not self.fenced:
            out.did = "not written (no lease)"
            return
        conn = self._c()
        decided = conn.execute(DEDUPE["load_duplicate_decision"], {"invoice_id": self.invoices[i]}).fetchone()
        if decided is not None and decided[1] == "original":
            conn.execute(
                DOCUMENTS["post_to_ledger"],
                {
                    "invoice_id": self.invoices[i],
                    "job_id": self.lease,
                    "org_id": ORG,
                    "amount": 10,
                    "currency": "EUR",
                },
            )
            out.did = "posted"
        else:
            out.did = "nothing to post"
        conn.commit()
        self.fenced = False
        self.phase = "complete"

    def complete(self, i: int, out: Outcome) -> None:
        if self.lease is None or not self.fenced:
            out.did = "not written (no lease)"
            return
        conn = self._c()
        conn.execute(CLAIMS["mark_processed"], {"invoice_id": self.invoices[i]})
        conn.execute(CLAIMS["finish_lock"], {"job_id": self.lease, "status": "succeeded", "error": None})
        conn.commit()
        self.fenced = False
        self.lease = None
        out.did = "completed"

    def drop(self, out: Outcome) -> None:
        if self.conn is not None:
            self.conn.rollback()
        self.lease = None
        self.fenced = self.has_advisory = False
        out.did = "dropped"

    def end(self) -> None:
        if self.conn is not None:
            self.conn.rollback()


@dataclass
class Replay:
    """The real system driven through one schedule."""

    url: str
    schedule: Schedule
    invoices: list[UUID] = field(default_factory=list)
    jobs: dict[int, UUID] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    swept: dict[int, set[UUID]] = field(default_factory=dict)  # step index -> jobs released there

    def run(self) -> Replay:
        with psycopg.connect(self.url, autocommit=True) as admin:
            for n in range(2):
                row = admin.execute(
                    "INSERT INTO invoices (org_id, fields) VALUES (%s, %s) RETURNING id",
                    (ORG, f'{{"copy": {n}}}'),
                ).fetchone()
                assert row is not None
                self.invoices.append(row[0])
            workers = [RealWorker(self.url, w, self.invoices, self.jobs) for w in range(3)]
            keepers = [psycopg.connect(self.url, autocommit=True) for _ in workers]
            try:
                for index, step in enumerate(self.schedule.steps):
                    out = Outcome(step)
                    self.outcomes.append(out)
                    self._step(admin, workers, keepers, index, step, out)
                for worker in workers:
                    worker.submit(worker.end)
                for worker in workers:
                    assert worker.wait_idle(STEP_WAIT_S), f"worker {worker.w} still blocked at the end"
            finally:
                for worker in workers:
                    worker.stop()
                for keeper in keepers:
                    keeper.close()
            for worker in workers:
                if worker.errors:
                    raise worker.errors[0]
        return self

    def _step(
        self,
        admin: psycopg.Connection[Any],
        workers: list[RealWorker],
        keepers: list[psycopg.Connection[Any]],
        index: int,
        step: Step,
        out: Outcome,
    ) -> None:
        a = step.args
        worker = workers[a["w"]] if "w" in a else None
        on_worker: dict[str, Callable[[], None]] = {}
        if worker is not None:
            i, j = a.get("i", 0), a.get("j", 0)
            on_worker = {
                "acquire_processing_locks": lambda: worker.claim(i, j, out),
                "take_dedupe_locks": lambda: worker.take_dedupe_locks(out),
                "fence_jobs": lambda: worker.fence(i, out),
                "fence_refused": lambda: worker.fence(i, out),
                "chunk_duplicate_candidates": lambda: worker.read_candidates(i, out),
                "mark_original": lambda: worker.decide(i, out),
                "mark_duplicate": lambda: worker.decide(i, out),
                "decided_already": lambda: worker.decide(i, out),
                "post_to_ledger": lambda: worker.post(i, out),
                "post_skipped": lambda: worker.post(i, out),
                "finish_processing_lock": lambda: worker.complete(i, out),
                "lease_dropped": lambda: worker.drop(out),
            }
        if worker is not None and step.name in on_worker:
            worker.submit(on_worker[step.name])
            self._settle(admin, worker)
        elif step.name == "tick":
            self._tick(admin, workers, keepers)
            out.did = "ticked"
        elif step.name == "release_stale_locks":
            before = self._running(admin)
            admin.execute(
                MAINTENANCE["release_stale_locks"], {"invoice_id": None, "stale_after": STALE_AFTER}
            )
            self.swept[index] = before - self._running(admin)
            out.did = f"released {len(self.swept[index])}"
        elif step.name == "reschedule_failed":
            with admin.transaction():
                locked = [row[0] for row in admin.execute(MAINTENANCE["lock_orphans"]).fetchall()]
                admin.execute(
                    CLAIMS["reschedule_failed"],
                    {
                        "invoice_ids": locked,
                        "max_attempts": MAX_ATTEMPTS,
                        "retry_base": timedelta(0),
                        "error": None,
                    },
                )
            out.did = "rescheduled"
        elif step.name in ("crash", "idle_timeout") and worker is not None:
            worker.crashed = worker.crashed or step.name == "crash"
            self._terminate(admin, worker)
            out.did = "session ended"
        elif step.name == "db_restart":
            for each in workers:
                self._terminate(admin, each)
            out.did = "every session ended"
        elif step.name in ("freeze", "resume") and worker is not None:
            worker.away = step.name == "freeze"
            out.did = step.name
        elif step.name in ("heartbeats_lost", "heartbeats_back") and worker is not None:
            worker.late = step.name == "heartbeats_lost"
            out.did = step.name
        else:  # acquire_bounced, acquire_snapshot, stale_snapshot: nothing reaches the database
            out.did = "no statement"

    def _settle(self, admin: psycopg.Connection[Any], worker: RealWorker) -> None:
        """Until the worker's steps are done, or the database says it waits for a lock."""
        deadline = time.monotonic() + STEP_WAIT_S
        while time.monotonic() < deadline:
            if worker.wait_idle(0.02):
                return
            if worker.pid is not None:
                row = admin.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (worker.pid,)
                ).fetchone()
                if row is not None and row[0] == "Lock":
                    return
        raise AssertionError(f"worker {worker.w} neither finished nor waited for a lock")

    def _terminate(self, admin: psycopg.Connection[Any], worker: RealWorker) -> None:
        if worker.pid is not None:
            admin.execute("SELECT pg_terminate_backend(%s)", (worker.pid,))

    def _tick(
        self,
        admin: psycopg.Connection[Any],
        workers: list[RealWorker],
        keepers: list[psycopg.Connection[Any]],
    ) -> None:
        admin.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - %s WHERE id IN "
            "(SELECT id FROM processing_jobs WHERE status = 'running' FOR UPDATE SKIP LOCKED)",
            (TICK,),
        )
        for worker, keeper in zip(workers, keepers, strict=True):
            if worker.lease is not None and not (worker.crashed or worker.away or worker.late):
                keeper.execute(CLAIMS["heartbeat_locks"], {"job_ids": [worker.lease]})

    @staticmethod
    def _running(admin: psycopg.Connection[Any]) -> set[UUID]:
        return {row[0] for row in admin.execute("SELECT id FROM processing_jobs WHERE status = 'running'")}
