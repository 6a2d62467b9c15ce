/*
 * Who is paid (issue 52): the payment decision as the SQL takes it, in the posting's fenced
 * transaction under the advisory lock of the invoice's identity key, against the vendor
 * registration that structured e-invoices make. See docs/vendors.md ("How the payment is
 * decided") and docs/reliability.md ("The model").
 *
 * Two workers each post one e-invoice of the same vendor, which nobody has registered yet: the
 * same VAT id (one identity key, one advisory lock), and each its own IBAN (A for worker 0, B for
 * worker 1). A structured e-invoice whose vendor nobody owns registers the vendor with its IBAN
 * as it is posted; one whose vendor is registered without its IBAN is held
 * (bank_details_changed). The approval stage reads the registry earlier, without a lock, to
 * hold sooner; only the posting decides.
 *
 * Property (assert at every posting's commit): the account paid is one the vendor had when the
 * posting committed, registered by an earlier transaction, or the vendor did not exist and this
 * posting registered it with that account. In SQL: no posting's IBAN was added to an existing
 * vendor by that same posting.
 *
 * Mutant (-DAPPROVAL_ONLY): the decision is the approval stage's, read before the lock; the
 * posting registers what the invoice names and adds its IBAN to the vendor. Spin finds the
 * race of issue 52 ("a registry read once per chunk"): both read "no vendor", the first
 * registers it with A, the second adds B to it and pays B. make model keeps the counterexample
 * in model/trails/APPROVAL_ONLY.schedule; invoice_pipeline_tests/model/test_payment_trail.py
 * drives the real stages in that order, and the second invoice is held.
 *
 * One atomic step = one statement or one commit, each printing "@@ step=...".
 */

#define W 2
#define NONE 255

bool vendor_exists;       /* vendors + the VAT id's vendor_identifiers row */
bool vendor_iban[W];      /* vendor_identifiers: IBAN w (A = 0, B = 1) is the vendor's */
byte adv;                 /* pg_advisory_xact_lock on the VAT id's identity key: 0 or worker + 1 */
bool posted[W];
bool held[W];
bool saw_vendor[W];       /* what the worker's decision read of the registry */
bool saw_iban[W];

proctype Worker(byte w)
{
    /* The approval stage: reads the registry, no lock (stages.approve -> payment_facts). */
    atomic {
        saw_vendor[w] = vendor_exists;
        saw_iban[w] = vendor_iban[w];
        printf("@@ step=approve_reads w=%d\n", w)
    };
    if
    :: saw_vendor[w] && !saw_iban[w] ->
        atomic { held[w] = true; printf("@@ step=held_at_approval w=%d\n", w) };
        goto done
    :: else -> skip
    fi;
#ifndef APPROVAL_ONLY
    /* The posting: take_identity_locks before the fence (store/payments.post_many), then the
     * registry as it is now, under the lock. */
    atomic { adv == 0 -> adv = w + 1; printf("@@ step=identity_lock w=%d\n", w) };
    atomic {
        saw_vendor[w] = vendor_exists;
        saw_iban[w] = vendor_iban[w];
        printf("@@ step=posting_reads w=%d\n", w)
    };
#endif
    /* The decision, then the writes and the commit (one step: the transaction's end). */
    atomic {
        if
        :: saw_vendor[w] && !saw_iban[w] ->
            held[w] = true;
            printf("@@ step=held_at_posting w=%d\n", w)
        :: else ->
            /* property: paid into an account the vendor had before this posting, or the vendor
             * did not exist and this posting registers it with that account */
            assert(!vendor_exists || vendor_iban[w]);
            vendor_exists = true; vendor_iban[w] = true; posted[w] = true;
            printf("@@ step=post w=%d\n", w)
        fi;
        if :: adv == w + 1 -> adv = 0 :: else -> skip fi
    };
done:
    skip
}

init {
    atomic { run Worker(0); run Worker(1) }
}
