"""The payment decision, taken where the money moves (issue 52; docs/vendors.md).

The posting stage writes each chunk in one fenced transaction that first takes the advisory
locks of every identity key its invoices depend on (each VAT id and IBAN, the seller's name),
in one sorted call, before any row is locked (the lock order, sql/0009). Under those locks and
the fence it reads the registry and the org's own identity as they are now, decides each
invoice (domain/payment.decide_payment), and either posts it (registering what a structured
e-invoice or a person vouched for, in the same transaction) or holds it with the reasons of
now. Everything else that reads or changes who owns an identity key takes the same locks: a
person's approval (store/review.py), vendor registration and import, the org profile
(store/vendors.py). So two invoices racing for a vendor's first registration decide one after
the other, and the second sees the first's vendor.

Queries: sql/queries/payments.sql; the posting row itself is written by store.documents.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.corrected_invoices import (
    CorrectionBooking,
    CorrectionChoice,
    OriginalBooking,
    booking_for_correction,
    original_lock_id,
)
from invoice_pipeline.domain.doctypes import is_correction, payment_means_kind
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.identity import OrgProfile
from invoice_pipeline.domain.keys import NumberKey
from invoice_pipeline.domain.normalize import normalize_invoice_number, seller_vendor_keys
from invoice_pipeline.domain.payment import (
    PaymentDecision,
    PaymentFacts,
    Reason,
    decide_payment,
    identity_keys,
    identity_lock_id,
)
from invoice_pipeline.domain.review import CORRECTION, ReviewPolicy
from invoice_pipeline.engine.records import Approval, ChunkWrite, Lease, Posting
from invoice_pipeline.engine.store.database import Database
from invoice_pipeline.engine.store.documents import Documents
from invoice_pipeline.engine.store.vendors import Vendors

PAYMENTS = QueryFile("payments")


@dataclass(frozen=True)
class PaymentRequest:
    """An approved invoice the posting stage asks to pay: its own facts, which only its lease's
    holder changes (so they may be read before the transaction); the shared facts, the registry
    and the org's identity, are read inside it."""

    org_id: str
    fields: InvoiceFields
    policy: ReviewPolicy
    duplicate_status: str | None
    duplicate_of: UUID | None
    approval: Approval | None

    @property
    def corrects(self) -> UUID | None:
        """The original a corrected invoice's approval books it against."""
        return self.approval.corrects_invoice_id if self.approval is not None else None


class Payments:
    """Who is paid, decided in the posting's transaction (queries: payments.sql)."""

    def __init__(self, db: Database, vendors: Vendors, documents: Documents) -> None:
        self.db = db
        self.vendors = vendors
        self.documents = documents

    def take_identity_locks(
        self,
        conn: psycopg.Connection[Any],
        keys: Iterable[tuple[str, InvoiceFields]],
        originals: Iterable[tuple[str, UUID]] = (),
    ) -> None:
        """The advisory locks of the (org, fields) pairs' identity keys, and of the (org, invoice)
        originals corrected invoices are booked against, in one sorted call (an org's keys are
        its own: the lock ids hash the org in)."""
        self.vendors.lock_ids(
            conn,
            [
                *(identity_lock_id(org_id, i) for org_id, fields in keys for i in identity_keys(fields)),
                *(original_lock_id(org_id, invoice_id) for org_id, invoice_id in originals),
            ],
        )

    @staticmethod
    def originals_a_correction_names(
        conn: psycopg.Connection[Any], org_id: str, invoice_id: UUID, fields: InvoiceFields
    ) -> list[UUID]:
        """The org's original invoices of the correction's seller whose number is its BT-25 (at most
        two: more than one is ambiguous)."""
        number = normalize_invoice_number(fields.preceding_invoice or "")
        keys = seller_vendor_keys(fields)
        if not number or not keys:
            return []
        params = {
            "org_id": org_id,
            "invoice_id": invoice_id,
            "number_key": NumberKey(org_id, "invoice", number).id,
            "vendor_keys": keys,
        }
        return [row[0] for row in conn.execute(PAYMENTS["originals_a_correction_names"], params)]

    def booking_of_original(
        self, conn: psycopg.Connection[Any], org_id: str, original_id: UUID
    ) -> OriginalBooking | None:
        """What the ledger holds for an original now (under its advisory lock, for a posting)."""
        return self.db.fetch_one(
            conn,
            OriginalBooking,
            PAYMENTS["booking_of_original"],
            {"org_id": org_id, "invoice_id": original_id},
        )

    def correction_booking(
        self,
        conn: psycopg.Connection[Any],
        org_id: str,
        fields: InvoiceFields,
        choice: CorrectionChoice,
        original_id: UUID,
    ) -> CorrectionBooking | str:
        """The posting an approved correction makes against its original, or why it cannot."""
        original = self.booking_of_original(conn, org_id, original_id)
        if original is None:
            return f"the invoice it corrects ({original_id}) is not one of the org's"
        if fields.payable_total is None or fields.currency is None:
            return "it states no amount due or currency to replace the original's with"
        return booking_for_correction(choice, fields.payable_total, fields.currency, original)

    def facts_in(
        self,
        conn: psycopg.Connection[Any],
        org_id: str,
        fields: InvoiceFields,
        policy: ReviewPolicy,
        duplicate_status: str | None,
        duplicate_of: UUID | None,
        approval: Approval | None = None,
        profile: OrgProfile | None = None,
    ) -> PaymentFacts:
        """The facts of this moment, read in `conn` (under the identity locks for a decision)."""
        registry = self.vendors.vendors_named_in(conn, [(org_id, i) for i in identity_keys(fields)])
        return PaymentFacts(
            org_id,
            fields,
            tuple(registry.get(org_id, ())),
            profile if profile is not None else self.vendors.org_profile_in(conn, org_id),
            policy,
            duplicate_status,
            duplicate_of,
            approval.approver if approval else None,
            frozenset(approval.vouched) if approval else frozenset(),
            approval.correction_choice if approval else None,
        )

    def original_to_correct(
        self,
        conn: psycopg.Connection[Any],
        org_id: str,
        invoice_id: UUID,
        fields: InvoiceFields,
        correction: CorrectionChoice | None,
    ) -> UUID | None | str:
        """The original a corrected invoice's approval books it against (None: not a corrected
        invoice), or why the approval is refused: it must name one original of the same seller,
        decided already, that the choice can be booked against (domain/corrected_invoices.py)."""
        if not is_correction(fields):
            if correction is not None:
                return "it is not a corrected invoice: approve it without choosing replace or reverse"
            return None
        names = fields.preceding_invoice or "an invoice it does not name (no BT-25)"
        if correction is None:
            return (
                f"it is a corrected invoice of {names}: approve it as replacing the invoice it corrects "
                "(the difference is booked) or as reversing it (what was booked for it is taken back); "
                "it is never paid on top of it"
            )
        found = self.originals_a_correction_names(conn, org_id, invoice_id, fields)
        if not found:
            return (
                f"it corrects {names}, which is no invoice of this seller the pipeline knows: ingest "
                "the original first, or reject the correction"
            )
        if len(found) > 1:
            return f"it corrects {names}, and more than one invoice of this seller has that number: reject it"
        booking = self.correction_booking(conn, org_id, fields, correction, found[0])
        return booking if isinstance(booking, str) else booking.original_id

    def post_many(
        self, items: Sequence[tuple[Lease, PaymentRequest]], *, step: str | None = None
    ) -> ChunkWrite[PaymentDecision]:
        """Decide and post (or hold) each approved invoice, in one fenced transaction per chunk."""
        by_invoice = {lease.invoice_id: request for lease, request in items}
        profiles: dict[str, OrgProfile] = {}

        def locks(conn: psycopg.Connection[Any], leases: list[Lease]) -> None:
            requests = [by_invoice[lease.invoice_id] for lease in leases]
            self.take_identity_locks(
                conn,
                [(r.org_id, r.fields) for r in requests],
                [(r.org_id, r.corrects) for r in requests if r.corrects is not None],
            )

        def profiles_now(conn: psycopg.Connection[Any], live: list[Lease]) -> None:
            profiles.clear()
            for org_id in sorted({by_invoice[lease.invoice_id].org_id for lease in live}):
                profiles[org_id] = self.vendors.org_profile_in(conn, org_id)

        def write(conn: psycopg.Connection[Any], lease: Lease, request: PaymentRequest) -> PaymentDecision:
            facts = self.facts_in(
                conn,
                request.org_id,
                request.fields,
                request.policy,
                request.duplicate_status,
                request.duplicate_of,
                request.approval,
                profiles[request.org_id],
            )
            decision = decide_payment(facts)
            correction = None
            if decision.posts and request.approval is not None and request.corrects is not None:
                assert request.approval.correction_choice is not None
                booked = self.correction_booking(
                    conn, request.org_id, request.fields, request.approval.correction_choice, request.corrects
                )
                if isinstance(booked, str):
                    # What is booked for the original changed since the approval: fail closed.
                    decision = PaymentDecision((Reason(CORRECTION, "", f"{CORRECTION}: {booked}"),))
                else:
                    correction = booked
            if not decision.posts:
                self.db.writer(PAYMENTS["hold_at_posting"])(
                    conn, lease, {"reasons": [r.text for r in decision.held]}
                )
                return decision
            self.documents.post_in(
                conn, lease, self._posting(conn, lease.invoice_id, facts, decision, correction)
            )
            return decision

        return self.db.write_chunk(items, write, profiles_now, step=step, before_fence=locks)

    def _posting(
        self,
        conn: psycopg.Connection[Any],
        invoice_id: UUID,
        facts: PaymentFacts,
        decision: PaymentDecision,
        correction: CorrectionBooking | None,
    ) -> Posting:
        """The ledger's record: the vendor (registered now when the decision says so), the registry's
        name and VAT id for it at this moment beside what the document printed, and the account;
        for a corrected invoice, the difference it books against its original."""
        fields = facts.fields
        vendor_id = decision.vendor.vendor_id if decision.vendor is not None else None
        if decision.registration is not None:
            vendor_id = self.vendors.register_for_posting(
                conn, facts.org_id, invoice_id, decision.registration, vendor_id, fields.currency
            )
        registered = (
            conn.execute(
                PAYMENTS["vendor_of_posting"], {"org_id": facts.org_id, "vendor_id": vendor_id}
            ).fetchone()
            if vendor_id is not None
            else None
        )
        assert fields.currency is not None and fields.payable_total is not None
        amount = fields.payable_total
        if correction is not None:
            amount = correction.amount
        elif fields.document_type == "credit_note":
            amount = -abs(amount)
        return Posting(
            facts.org_id,
            amount,
            fields.currency,
            invoice_number=fields.invoice_number,
            issue_date=fields.issue_date,
            due_date=fields.due_date,
            iban=decision.iban,
            vendor_id=vendor_id,
            registered_name=registered[0] if registered else None,
            registered_vat_id=registered[1] if registered else None,
            printed_seller_name=fields.seller_name,
            printed_seller_vat_id=fields.seller_vat_id,
            payment_means=payment_means_kind(fields),
            correction_choice=correction.choice if correction else None,
            corrects_invoice_id=correction.original_id if correction else None,
        )
