"""Who is paid, played as a stateful property on the real store (issue 52).

Hypothesis plays random vendor registries and streams of invoices through the real stages on a
real PostgreSQL: e-invoices and page-read PDFs, re-sends, changed IBANs, look-alike names and VAT
ids, the org's own identity, impossible IBANs; each run cuts what is due into random chunks that
two workers process AT ONCE; persons approve, reject and correct IBANs in between. After every
step an oracle reads the ledger and the registry and checks what an accountant would:

* every posting pays an account the vendor had when the posting committed (registered before
  it), or one this very posting registered for a vendor it created, or one a person vouched for
  when approving that invoice;
* no invoice is posted twice, no identifier belongs to two vendors;
* nothing is posted to the org itself: no posting's vendor or account is the org's own.

Each example is its own org: one org's data never meets another's, so examples share the
database. The pure decision has its own, larger property (domain/test_payment_properties.py).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.engine.vendors import read_vendor_csv
from invoice_pipeline.samples.render import Party, render_invoice
from invoice_pipeline_tests.engine.review.helpers import sample
from invoice_pipeline_tests.engine.test_liveness import stage_env
from pipeline_support.factories import json_invoice

ALICE = Actor("os-user:alice", "review:alice@test:1")
NAMES = ("Hafenkran Technik GmbH", "Nordwind Logistik GmbH")
SPELLINGS = (
    "Hafenkran Technik GmbH",
    "HAFENKRAN TECHNIK",
    "Нafenkran Technik GmbH",
    "Nordwind Logistik GmbH",
)
VATS = ("DE136695976", "DE812871812", "DE123456788")
LOOK_ALIKE_VAT = "D\u0415136695976"
IBANS = ("DE89370400440532013000", "GB82WEST12345698765432", "NL91ABNA0417164300")
BAD_IBAN = "DE89370400440532013001"
OWN_VAT = "DE812871812"  # the org's own VAT id, when the example adds it
VENDOR_ROWS = st.tuples(
    st.sampled_from(NAMES), st.sampled_from((*VATS, None)), st.sampled_from((*IBANS, None))
)
# (read from a page?, seller name, VAT id, IBAN): e-invoices may carry look-alikes and an impossible IBAN.
ARRIVALS = st.one_of(
    st.tuples(st.just(False), st.sampled_from(SPELLINGS), st.sampled_from((*VATS, LOOK_ALIKE_VAT, None)),
              st.sampled_from((*IBANS, BAD_IBAN, None))),
    st.tuples(st.just(True), st.sampled_from(NAMES), st.sampled_from((*VATS, None)), st.sampled_from((*IBANS, None))),
)  # fmt: skip

# The oracle, in SQL over one org: postings whose account no rule allows.
UNJUSTIFIED_ACCOUNTS = """
SELECT p.invoice_id, p.iban
FROM ledger_postings p
WHERE p.org_id = %(org)s AND p.iban IS NOT NULL AND NOT EXISTS (
    SELECT 1 FROM vendor_identifiers vi
    WHERE vi.org_id = p.org_id AND vi.vendor_id = p.vendor_id AND vi.kind = 'iban' AND vi.value = p.iban
      AND (
        vi.learnt_from IS DISTINCT FROM p.invoice_id AND vi.added_at <= p.posted_at
        OR vi.learnt_from = p.invoice_id AND EXISTS (
            SELECT 1 FROM vendor_events e
            WHERE e.org_id = p.org_id AND e.vendor_id = p.vendor_id AND e.event = 'registered'
              AND e.invoice_id = p.invoice_id)
        OR vi.learnt_from = p.invoice_id AND EXISTS (
            SELECT 1 FROM approvals a
            WHERE a.invoice_id = p.invoice_id AND a.decision = 'approved'
              AND EXISTS (SELECT 1 FROM unnest(a.vouched) v
                          WHERE v LIKE '%%' || p.iban || '%%' OR v LIKE 'vendor_unconfirmed%%'
                             OR v LIKE 'possible_impersonation%%'))
      )
)
"""
PAID_TO_ITSELF = """
SELECT p.invoice_id FROM ledger_postings p
WHERE p.org_id = %(org)s AND (
    EXISTS (SELECT 1 FROM org_identities o WHERE o.org_id = p.org_id AND o.kind = 'iban' AND o.value = p.iban)
    OR EXISTS (SELECT 1 FROM vendor_identifiers vi JOIN org_identities o
               ON o.org_id = vi.org_id AND o.kind = vi.kind AND o.value = vi.value AND vi.kind <> 'name'
               WHERE vi.org_id = p.org_id AND vi.vendor_id = p.vendor_id))
"""
POSTED_TWICE = (
    "SELECT invoice_id FROM ledger_postings WHERE org_id = %(org)s GROUP BY invoice_id HAVING count(*) > 1"
)


def two_workers_run_what_is_due(
    conn: psycopg.Connection[Any], store: InvoiceStore, org: str, cut: int
) -> int:
    """What is due in `org` (read on the oracle's autocommit connection `conn`), cut in two chunks
    at `cut`, processed by two workers AT ONCE (threads released together by a barrier), each with
    its own leases; returns how many were due."""
    due = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM invoices WHERE org_id = %s AND status = 'pending' ORDER BY seq", (org,)
        )
    ]
    chunks = [due[:cut], due[cut:]]
    claimed = [claim_chunk(store, [(i, None) for i in part], f"worker-{n}") for n, part in enumerate(chunks)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(chunk: Any) -> None:
        start.wait()
        try:
            process_chunk(stage_env(store), chunk)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(c,)) for c in claimed]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return len(due)


def make_machine(conn: psycopg.Connection[Any], store: InvoiceStore) -> type[RuleBasedStateMachine]:
    """`conn`: the oracle's own autocommit connection, one for every example and step (a new
    connection per look cost as much as the step it looked at)."""

    class PaymentMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.org = f"prop-{uuid4().hex[:12]}"
            self.invoices: list[UUID] = []
            self.number = 0

        def _held(self) -> list[UUID]:
            rows = conn.execute(
                "SELECT id FROM invoices WHERE org_id = %s AND status = 'needs_review' ORDER BY seq",
                (self.org,),
            ).fetchall()
            return [r[0] for r in rows]

        @initialize(vendors=st.lists(VENDOR_ROWS, min_size=0, max_size=2), own=st.booleans())
        def the_org_and_its_registry(
            self, vendors: list[tuple[str, str | None, str | None]], own: bool
        ) -> None:
            for name, vat, iban in vendors:
                store.vendors.import_vendors(
                    self.org, read_vendor_csv(f"name,vat_id,iban\n{name},{vat or ''},{iban or ''}\n"), "erp"
                )
            if own:
                try:
                    store.vendors.add_org_identity(self.org, "vat", OWN_VAT, source="test", added_by="test")
                except ValueError:
                    pass  # a vendor owns it: the profile refuses it

        @rule(row=VENDOR_ROWS)
        def the_erp_imports_a_vendor(self, row: tuple[str, str | None, str | None]) -> None:
            name, vat, iban = row
            store.vendors.import_vendors(
                self.org, read_vendor_csv(f"name,vat_id,iban\n{name},{vat or ''},{iban or ''}\n"), "erp"
            )

        @rule(arrivals=st.lists(ARRIVALS, min_size=1, max_size=4), cut=st.integers(0, 4))
        def invoices_arrive_and_two_workers_run_what_is_due(
            self, arrivals: list[tuple[bool, str, str | None, str | None]], cut: int
        ) -> None:
            for page, name, vat, iban in arrivals:
                self.number += 1
                if page:
                    seller = Party(name, vat, "Kai 3", "20457", "Hamburg", "DE")
                    document = replace(sample(f"P-{self.number}", seller=seller), payee_iban=iban)
                    content, suffix = render_invoice(document, "pdf"), "pdf"
                else:
                    content, suffix = (
                        json_invoice(f"E-{self.number}", seller=name, vat_id=vat, payee_iban=iban),
                        "json",
                    )
                invoice = store.documents.store_document(
                    content, self.org, f"i{self.number}.{suffix}"
                ).invoice_id
                self.invoices.append(invoice)
            self.two_workers_run_what_is_due(cut)

        @rule(cut=st.integers(0, 4))
        def two_workers_run_what_is_due(self, cut: int) -> None:
            due = two_workers_run_what_is_due(conn, store, self.org, cut)
            event(f"a run of {min(due, 6)}{'+' if due > 6 else ''} invoices")

        @rule(pick=st.integers(0, 50))
        def a_person_approves(self, pick: int) -> None:
            held = self._held()
            if held:
                act(store, "approve", held[pick % len(held)], ALICE)
                self.two_workers_run_what_is_due(pick % 3)

        @rule(pick=st.integers(0, 50))
        def a_person_rejects(self, pick: int) -> None:
            held = self._held()
            if held:
                act(store, "reject", held[pick % len(held)], ALICE, "not ours")

        @rule(pick=st.integers(0, 50), iban=st.sampled_from(IBANS))
        def a_person_corrects_the_iban(self, pick: int, iban: str) -> None:
            held = self._held()
            if held:
                correct_invoice(store, held[pick % len(held)], {"payee_iban": iban}, ALICE)

        @invariant()
        def the_ledger_pays_only_whom_an_accountant_would(self) -> None:
            unjustified = conn.execute(UNJUSTIFIED_ACCOUNTS, {"org": self.org}).fetchall()
            itself = conn.execute(PAID_TO_ITSELF, {"org": self.org}).fetchall()
            twice = conn.execute(POSTED_TWICE, {"org": self.org}).fetchall()
            assert not unjustified, f"accounts paid that no rule allows: {unjustified}"
            assert not itself, f"the org paid itself: {itself}"
            assert not twice, f"posted twice: {twice}"

    return PaymentMachine


@pytest.mark.hypothesis
@pytest.mark.slow
def test_random_registries_and_invoices_pay_only_whom_an_accountant_would(
    database_url: str, store: InvoiceStore
) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        run_state_machine_as_test(
            make_machine(conn, store),
            settings=settings(
                max_examples=80,
                stateful_step_count=14,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
            ),
        )


def test_the_oracle_sees_a_payment_into_an_unregistered_account(
    database_url: str, store: InvoiceStore
) -> None:
    """The oracle is not vacuous: a posting into an account the vendor does not own, written by
    hand, is reported."""
    org = "oracle-check"
    store.vendors.import_vendors(
        org, read_vendor_csv(f"name,vat_id,iban\nX GmbH,{VATS[0]},{IBANS[0]}\n"), "erp"
    )
    (vendor,) = store.vendors.list_vendors(org)
    invoice = store.documents.store_document(json_invoice("X-1"), org, "x.json").invoice_id
    lease = store.claims.acquire(invoice, 1, "test")
    assert lease is not None
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ledger_postings (invoice_id, job_id, org_id, amount, currency, vendor_id, iban)"
            " VALUES (%s, %s, %s, %s, 'EUR', %s, %s)",
            (invoice, lease.job_id, org, Decimal("1"), vendor.vendor_id, IBANS[1]),
        )
        assert conn.execute(UNJUSTIFIED_ACCOUNTS, {"org": org}).fetchall() == [(invoice, IBANS[1])]
