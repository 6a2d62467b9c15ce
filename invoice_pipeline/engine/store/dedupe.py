"""Duplicate decisions: original, duplicate or suspected, decided under the blocking keys'
advisory locks, so two invoices the matcher could pair decide one after the other.

Queries: sql/queries/dedupe.sql.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import decision_lock_ids, search_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.engine.records import (
    ChunkWrite,
    DuplicateCandidateRow,
    DuplicateDecision,
    Lease,
    MatchOutcome,
)
from invoice_pipeline.engine.store.base import StoreBase, as_uuid

DEDUPE = QueryFile("dedupe")

# Given an invoice and its org's candidate originals as (invoice id, org id, fields), which one
# the invoice copies, if any. Pure domain code (invoice_pipeline.domain.matching) behind it.
MatchFunction = Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None]


class DedupeStore(StoreBase):
    def decide_duplicates(
        self, items: Sequence[tuple[Lease, MatchCandidate]], match: MatchFunction, *, step: str | None = None
    ) -> ChunkWrite[DuplicateDecision]:
        """Original, duplicate or suspected for each invoice, decided under the blocking keys' advisory locks.

        The locks come from the match rule (`domain/keys.py`): any two invoices the matcher
        could pair share one, so they decide one after the other, and the second sees the
        first. A chunk takes every lock of all its invoices first, in one sorted call, so two
        chunks never wait on each other in a cycle; each invoice then reads every original in
        its blocking key's neighbourhood (an index, no LIMIT) and its decision returns itself.
        Invoices of one chunk see each other's decisions: they share the transaction. The
        advisory locks are taken before the fence (the lock order, sql/0009): a chunk that waits
        for another decision holds no row meanwhile, so no claim, heartbeat or sweep queues
        behind the wait.
        """
        for lease, candidate in items:
            if candidate.key.org_id != candidate.org_id or candidate.invoice_id != str(lease.invoice_id):
                raise ValueError("the candidate is not the leased invoice of its org")
        by_invoice = {lease.invoice_id: candidate for lease, candidate in items}

        def take_locks(conn: psycopg.Connection[Any], leases: list[Lease]) -> None:
            self._take_dedupe_locks(conn, [by_invoice[lease.invoice_id] for lease in leases])

        def decide(
            conn: psycopg.Connection[Any], lease: Lease, candidate: MatchCandidate
        ) -> DuplicateDecision:
            rows = self._locked_candidates(conn, candidate)
            outcome = match(
                candidate,
                [
                    (r.id, r.org_id, InvoiceFields.from_json(r.fields))
                    for r in rows
                    if r.org_id == candidate.org_id
                ],
            )
            params: dict[str, Any] = {
                "invoice_id": lease.invoice_id,
                "org_id": candidate.org_id,
                **candidate.stored_keys,
            }
            if outcome is None:
                name = "mark_original"
            else:
                name = "mark_duplicate" if outcome.exact else "mark_suspected"
                params |= outcome.params()
            # None: decided already (a re-executed step); that decision stands.
            decided = self._one(conn, DuplicateDecision, DEDUPE[name], params) or self._one(
                conn, DuplicateDecision, DEDUPE["load_duplicate_decision"], {"invoice_id": lease.invoice_id}
            )
            assert decided is not None
            return decided

        return self._write_chunk(items, decide, step=step, before_fence=take_locks)

    @staticmethod
    def _take_dedupe_locks(conn: psycopg.Connection[Any], candidates: Sequence[MatchCandidate]) -> None:
        """Every advisory lock the candidates' decisions need, in one sorted call: two callers
        never wait on each other in a cycle."""
        ids = sorted({i for c in candidates for i in decision_lock_ids(c.block, c.number)})
        conn.execute(DEDUPE["take_dedupe_locks"], {"lock_ids": ids})

    def _take_dedupe_locks_of(self, conn: psycopg.Connection[Any], invoice_id: UUID) -> None:
        """The advisory locks of the invoice's decision, from its fields as they are now; none
        before its fields are read."""
        row = conn.execute(DEDUPE["decision_keys_of"], {"invoice_id": invoice_id}).fetchone()
        if row is not None:
            self._take_dedupe_locks(
                conn, [MatchCandidate.from_fields(str(invoice_id), row[0], InvoiceFields.from_json(row[1]))]
            )

    def _locked_candidates(
        self, conn: psycopg.Connection[Any], candidate: MatchCandidate
    ) -> list[DuplicateCandidateRow]:
        """Takes the candidate's advisory locks, then reads every original of its org in its
        blocking key's neighbourhood (sql/0003): the read a duplicate decision is made on."""
        return self._all(
            conn,
            DuplicateCandidateRow,
            DEDUPE["locked_duplicate_candidates"],
            {
                "lock_ids": list(decision_lock_ids(candidate.block, candidate.number)),
                "org_id": candidate.org_id,
                "invoice_id": UUID(candidate.invoice_id),
                "block_keys": list(search_ids(candidate.block)),
                "number_key": candidate.number.id,
            },
        )

    def decide_duplicate(
        self, lease: Lease, candidate: MatchCandidate, match: MatchFunction
    ) -> DuplicateDecision:
        return self._only(self.decide_duplicates([(lease, candidate)], match), lease)

    def load_duplicate_decisions(self, invoice_ids: Sequence[UUID]) -> dict[UUID, DuplicateDecision]:
        with self.pool.connection() as conn:
            found = self._all(
                conn,
                DuplicateDecision,
                DEDUPE["load_duplicate_decisions"],
                {"invoice_ids": list(invoice_ids)},
            )
        return {d.invoice_id: d for d in found}

    def load_duplicate_decision(self, invoice_id: UUID | str) -> DuplicateDecision | None:
        return self.load_duplicate_decisions([as_uuid(invoice_id)]).get(as_uuid(invoice_id))
