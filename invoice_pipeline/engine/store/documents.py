"""Documents and what the stages make of them: the original bytes, breadcrumbs, extracted text,
fields, approval verdicts and ledger postings.

Each write is a chunk's fenced write (Database.write_chunk); the single-invoice methods are
chunks of one that raise instead of reporting. Queries: sql/queries/documents.sql.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.documents.extracted import ExtractedText
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.engine.records import (
    Approval,
    ChunkWrite,
    IngestResult,
    InvoiceState,
    Lease,
    LedgerPosting,
    Posting,
    StoredDocument,
    Verdict,
)
from invoice_pipeline.engine.store.database import Database, as_uuid

DOCUMENTS = QueryFile("documents")
EINVOICE = QueryFile("einvoice")


class Documents:
    """Documents and the stages' results (queries: documents.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def store_document(self, content: bytes, org_id: str, filename: str | None = None) -> IngestResult:
        """Keep the original bytes and create its invoice; the same bytes again are the same invoice."""
        with self.db.transaction() as conn:
            return self.store_document_in(conn, content, org_id, filename)

    def store_document_in(
        self, conn: psycopg.Connection[Any], content: bytes, org_id: str, filename: str | None = None
    ) -> IngestResult:
        """store_document in the caller's transaction (mail intake commits a message's checkpoint
        with the invoices of its attachments: store/mail.py)."""
        if not org_id or not org_id.strip():
            raise ValueError("org_id must be a non-empty string")
        sha256 = hashlib.sha256(content).hexdigest()
        params = {
            "sha256": sha256,
            "content": content,
            "size_bytes": len(content),
            "org_id": org_id,
            "filename": filename,
        }
        conn.execute(DOCUMENTS["insert_document"], params)
        row = conn.execute(DOCUMENTS["insert_invoice_for_document"], params).fetchone()
        if row is not None:
            return IngestResult(row[0], sha256, created=True)
        existing = conn.execute(DOCUMENTS["invoice_for_document"], params).fetchone()
        assert existing is not None, "invoice vanished: rows are never deleted"
        return IngestResult(existing[0], sha256, created=False)

    def load_document(self, invoice_id: UUID | str) -> StoredDocument | None:
        return self.load_documents([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def load_documents(self, invoice_ids: Sequence[UUID]) -> dict[UUID, StoredDocument]:
        with self.db.pool.connection() as conn:
            found = self.db.fetch_all(
                conn, StoredDocument, DOCUMENTS["load_documents"], {"invoice_ids": list(invoice_ids)}
            )
        return {d.invoice_id: d for d in found}

    def invoice_state(self, invoice_id: UUID | str) -> InvoiceState | None:
        with self.db.pool.connection() as conn:
            return self.db.fetch_one(
                conn, InvoiceState, DOCUMENTS["invoice_state"], {"invoice_id": as_uuid(invoice_id)}
            )

    def record_steps(self, step: str, leases: Sequence[Lease], started: set[UUID]) -> ChunkWrite[None]:
        """Breadcrumbs as a stage starts a chunk: `started` invoices move processing_stage, the
        rest were fast-forwarded. ('executed' is written with each saved result, see _write_chunk.)"""
        items = [(lease, lease.invoice_id in started) for lease in leases]

        def write(conn: psycopg.Connection[Any], lease: Lease, runs: bool) -> None:
            return None

        def crumbs(conn: psycopg.Connection[Any], live: list[Lease]) -> None:
            conn.execute(
                DOCUMENTS["record_steps"],
                {
                    "step": step,
                    "invoice_ids": [lease.invoice_id for lease in live],
                    "job_ids": [lease.job_id for lease in live],
                    "events": ["started" if lease.invoice_id in started else "skipped" for lease in live],
                },
            )

        return self.db.write_chunk(items, write, crumbs)

    def record_executed(self, step: str, leases: Sequence[Lease]) -> ChunkWrite[None]:
        """'executed' for a stage whose result is nothing to store (validation passed)."""
        return self.db.write_chunk(
            [(lease, None) for lease in leases], lambda conn, lease, _: None, step=step
        )

    def record_step(self, lease: Lease, step: str, *, skipped: bool) -> None:
        """Breadcrumb: the step started (and moves processing_stage), or was fast-forwarded."""
        self.db.only(self.record_steps(step, [lease], set() if skipped else {lease.invoice_id}), lease)

    def count_step_executions(self, invoice_id: UUID | str, step: str) -> int:
        return int(
            self.db.scalar(
                DOCUMENTS["count_step_executions"], {"invoice_id": as_uuid(invoice_id), "step": step}
            )
        )

    def done_ids(self, step: str, invoice_ids: Sequence[UUID]) -> set[UUID]:
        """Which of the invoices `step` has already done (its `done_<step>` query)."""
        with self.db.pool.connection() as conn:
            rows = conn.execute(DOCUMENTS[f"done_{step}"], {"invoice_ids": list(invoice_ids)}).fetchall()
        return {row[0] for row in rows}

    def save_extracted_texts(
        self, items: Sequence[tuple[Lease, ExtractedText]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        save = self.db.writer(DOCUMENTS["save_extracted_text"])
        return self.db.write_chunk(
            items, lambda conn, lease, text: save(conn, lease, asdict(text)), step=step
        )

    def save_extracted_text(self, lease: Lease, extracted: ExtractedText) -> None:
        self.db.only(self.save_extracted_texts([(lease, extracted)]), lease)

    def load_extracted_texts(self, invoice_ids: Sequence[UUID]) -> dict[UUID, ExtractedText]:
        with self.db.pool.connection() as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(
                    DOCUMENTS["load_extracted_texts"], {"invoice_ids": list(invoice_ids)}
                ).fetchall()
        return {row.pop("invoice_id"): ExtractedText(**row) for row in rows}

    def load_extracted_text(self, invoice_id: UUID | str) -> ExtractedText | None:
        return self.load_extracted_texts([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def save_fields_of(
        self, items: Sequence[tuple[Lease, InvoiceFields]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        save = self.db.writer(DOCUMENTS["save_fields"])
        save_check = self.db.writer(EINVOICE["save_einvoice_check"])
        forget_findings = self.db.writer(EINVOICE["forget_einvoice_findings"])
        save_findings = self.db.writer(EINVOICE["save_einvoice_findings"])

        def write(conn: psycopg.Connection[Any], lease: Lease, fields: InvoiceFields) -> None:
            check = fields.einvoice_check
            if check is not None:
                # Recorded with the invoice (sql/0024): the rule set, and each failed assertion.
                save_check(
                    conn,
                    lease,
                    {
                        "rule_set": check.rule_set,
                        "rule_set_version": check.version,
                        "profile": check.profile,
                        "skipped": check.skipped,
                        "fatal_count": len(check.fatal),
                        "warning_count": len(check.warnings),
                    },
                )
                forget_findings(conn, lease, {})
                if check.findings:
                    save_findings(
                        conn,
                        lease,
                        {
                            "rule_ids": [f.rule_id for f in check.findings],
                            "flags": [f.flag for f in check.findings],
                            "texts": [f.text for f in check.findings],
                            "locations": [f.location for f in check.findings],
                        },
                    )
            save(
                conn,
                lease,
                {
                    "fields": Jsonb(fields.to_json()),
                    "invoice_number": fields.invoice_number,
                    "document_type": fields.document_type,
                    "currency": fields.currency,
                    "payable_total": fields.payable_total,
                    "issue_date": fields.issue_date,
                    "seller_name": fields.seller_name,
                    "seller_vat_id": fields.seller_vat_id,
                },
            )

        return self.db.write_chunk(items, write, step=step)

    def save_fields(self, lease: Lease, fields: InvoiceFields) -> None:
        self.db.only(self.save_fields_of([(lease, fields)]), lease)

    def einvoice_findings(self, invoice_id: UUID | str) -> list[dict[str, Any]]:
        """The recorded check of an e-invoice (sql/0024): one row per failed assertion, each with
        the rule set's name and version ([] when it was not checked; one row without a rule id
        when nothing failed)."""
        with self.db.pool.connection() as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                return cur.execute(
                    EINVOICE["einvoice_findings_of"], {"invoice_id": as_uuid(invoice_id)}
                ).fetchall()

    def load_fields_of(self, invoice_ids: Sequence[UUID]) -> dict[UUID, InvoiceFields]:
        with self.db.pool.connection() as conn:
            rows = conn.execute(DOCUMENTS["load_fields_of"], {"invoice_ids": list(invoice_ids)}).fetchall()
        return {row[0]: InvoiceFields.from_json(row[1]) for row in rows}

    def load_fields(self, invoice_id: UUID | str) -> InvoiceFields | None:
        return self.load_fields_of([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def record_verdicts(
        self, items: Sequence[tuple[Lease, Verdict]], *, step: str | None = None
    ) -> ChunkWrite[None]:
        """The approval stage's results: approved, rejected (with the rule), or held for a person."""
        approve = self.db.writer(DOCUMENTS["save_approval"])
        hold = self.db.writer(DOCUMENTS["hold_for_review"])

        def write(conn: psycopg.Connection[Any], lease: Lease, verdict: Verdict) -> None:
            if verdict.decision == "held":
                if not verdict.reasons:
                    raise ValueError("a hold needs at least one reason")
                hold(conn, lease, {"reasons": list(verdict.reasons)})
            else:
                approve(conn, lease, {"decision": verdict.decision, "rule": verdict.rule})

        return self.db.write_chunk(items, write, step=step)

    def record_approval(self, lease: Lease, decision: Literal["approved", "rejected"], rule: str) -> Approval:
        self.db.only(self.record_verdicts([(lease, Verdict(decision, rule))]), lease)
        approval = self.load_approval(lease.invoice_id)
        assert approval is not None
        return approval

    def hold_for_review(self, lease: Lease, reasons: list[str]) -> None:
        """Neither approve nor reject: the invoice ends needs_review, and a person decides."""
        if not reasons:
            raise ValueError("a hold needs at least one reason")
        self.db.only(
            self.record_verdicts([(lease, Verdict("held", "; ".join(reasons), tuple(reasons)))]), lease
        )

    def review_reasons(self, invoice_id: UUID | str) -> list[str] | None:
        """Why the invoice is held for a person; None when it is not held."""
        return self.db.scalar(DOCUMENTS["load_review_reasons"], {"invoice_id": as_uuid(invoice_id)})

    def load_approvals(self, invoice_ids: Sequence[UUID]) -> dict[UUID, Approval]:
        with self.db.pool.connection() as conn:
            with conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(
                    DOCUMENTS["load_approvals_of"], {"invoice_ids": list(invoice_ids)}
                ).fetchall()
        return {row.pop("invoice_id"): Approval(**row) for row in rows}

    def load_approval(self, invoice_id: UUID | str) -> Approval | None:
        return self.load_approvals([as_uuid(invoice_id)]).get(as_uuid(invoice_id))

    def post_in(self, conn: psycopg.Connection[Any], lease: Lease, posting: Posting) -> None:
        """The ledger row, in the caller's fenced transaction (store/payments.py decides it). Once:
        a second post of an invoice changes nothing (UNIQUE invoice_id)."""
        values = {f.name: getattr(posting, f.name) for f in dataclass_fields(posting)}
        self.db.writer(DOCUMENTS["post_to_ledger"])(conn, lease, values)

    def post_to_ledger(self, lease: Lease, org_id: str, amount: Decimal, currency: str) -> LedgerPosting:
        self.db.only(self.db.write_chunk([(lease, Posting(org_id, amount, currency))], self.post_in), lease)
        posted = self.load_ledger_posting(lease.invoice_id)
        assert posted is not None
        return posted

    def load_ledger_posting(self, invoice_id: UUID | str) -> LedgerPosting | None:
        with self.db.pool.connection() as conn:
            return self.db.fetch_one(
                conn, LedgerPosting, DOCUMENTS["load_ledger_posting"], {"invoice_id": as_uuid(invoice_id)}
            )
