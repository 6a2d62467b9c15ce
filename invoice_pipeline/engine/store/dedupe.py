"""Duplicate decisions: original, duplicate or suspected, decided under the blocking keys'
advisory locks, so two invoices the matcher could pair decide one after the other.

Queries: sql/queries/dedupe.sql.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal, cast
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import decision_lock_ids, search_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.domain.normalize import seller_vendor_keys
from invoice_pipeline.engine.records import (
    ChunkWrite,
    DuplicateCandidateRow,
    DuplicateDecision,
    Lease,
    MatchOutcome,
)
from invoice_pipeline.engine.store.database import Database, as_uuid

DEDUPE = QueryFile("dedupe")

# Given an invoice and its org's candidate originals as (invoice id, org id, fields), which one
# the invoice copies, if any. Pure domain code (invoice_pipeline.domain.matching) behind it.
MatchFunction = Callable[[MatchCandidate, list[tuple[UUID, str, InvoiceFields]]], MatchOutcome | None]


@dataclass(frozen=True)
class ChunkInvoiceRow:
    """An invoice of the chunk being decided, as its row is after the fence: where it sorts among
    originals (`seq`), the org and fields a candidate search reads of it, and its decision if a
    previous attempt made one (`status` None: undecided)."""

    invoice_id: UUID
    org_id: str
    seq: int
    fields: dict[str, Any] | None
    status: Literal["original", "duplicate", "suspected"] | None
    group_id: UUID | None
    original_id: UUID | None
    business_key: str | None
    how: str | None
    score: Decimal | None
    reasons: list[str]

    def decision(self) -> DuplicateDecision | None:
        if self.status is None:
            return None
        return DuplicateDecision(
            self.invoice_id,
            self.status,
            self.group_id,
            self.original_id,
            cast(str, self.business_key),  # every mark sets it
            self.how,
            self.score,
            self.reasons,
        )


@dataclass(frozen=True)
class PooledOriginal:
    """An original some invoice of the chunk may copy, with the keys its search filters on."""

    id: UUID
    org_id: str
    fields: dict[str, Any]
    seq: int
    block_key: int | None
    number_key: int | None


class OriginalsPool:
    """The originals a chunk's invoices are matched against, by the keys the per-invoice search
    (sql/0007 locked_duplicate_candidates) filters on: each invoice gets exactly what that
    search would return, in its order (seq), with the originals decided earlier in the chunk."""

    def __init__(self, originals: Sequence[PooledOriginal]) -> None:
        self._by_id: dict[UUID, PooledOriginal] = {}
        self._by_block: dict[tuple[str, int], list[PooledOriginal]] = {}
        self._by_number: dict[tuple[str, int], list[PooledOriginal]] = {}
        self._fields: dict[UUID, InvoiceFields] = {}
        for original in originals:
            self.add(original)

    def add(self, original: PooledOriginal) -> None:
        """Once per invoice: one read from the database already is not added again."""
        if original.id in self._by_id:
            return
        self._by_id[original.id] = original
        if original.block_key is not None:
            self._by_block.setdefault((original.org_id, original.block_key), []).append(original)
        if original.number_key is not None:
            self._by_number.setdefault((original.org_id, original.number_key), []).append(original)

    def candidates_of(self, candidate: MatchCandidate) -> list[tuple[UUID, str, InvoiceFields]]:
        """The same org's originals whose block key is the candidate's (keys.search_ids) or whose
        number key is its own, itself left out, by seq: the match function's argument."""
        org = candidate.org_id
        found: dict[UUID, PooledOriginal] = {}
        for block_key in search_ids(candidate.block):
            found |= {o.id: o for o in self._by_block.get((org, block_key), ())}
        found |= {o.id: o for o in self._by_number.get((org, candidate.number.id), ())}
        found.pop(UUID(candidate.invoice_id), None)
        return [(o.id, o.org_id, self._fields_of(o)) for o in sorted(found.values(), key=lambda o: o.seq)]

    def _fields_of(self, original: PooledOriginal) -> InvoiceFields:
        if original.id not in self._fields:
            self._fields[original.id] = InvoiceFields.from_json(original.fields)
        return self._fields[original.id]


# The marks, in the order they are written: every new original before the duplicates that may
# name it (and create its group), suspected copies last. Each touches only undecided invoices.
MARKS = ("mark_original", "mark_duplicate", "mark_suspected")


class Dedupe:
    """Duplicate decisions over the store's database (queries: dedupe.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def decide_duplicates(
        self, items: Sequence[tuple[Lease, MatchCandidate]], match: MatchFunction, *, step: str | None = None
    ) -> ChunkWrite[DuplicateDecision]:
        """Original, duplicate or suspected for each invoice, decided under the blocking keys' advisory locks.

        The locks come from the match rule (`domain/keys.py`): any two invoices the matcher
        could pair share one, so they decide one after the other, and the second sees the
        first. A chunk takes every lock of all its invoices first, in one sorted call, so two
        chunks never wait on each other in a cycle. The advisory locks are taken before the
        fence (the lock order, sql/0009): a chunk that waits for another decision holds no row
        meanwhile, so no claim, heartbeat or sweep queues behind the wait.

        Then the whole chunk is decided at once, after the fence (`_decide_chunk`), in a few
        statements whatever its size: with every lock held and the chunk's rows fenced, nobody
        else can decide these invoices or add an original any of them could copy, so one read of
        the candidates serves every invoice, and invoices of one chunk still see each other's
        decisions (an original decided earlier in the chunk is a candidate of the later ones).
        """
        for lease, candidate in items:
            if candidate.key.org_id != candidate.org_id or candidate.invoice_id != str(lease.invoice_id):
                raise ValueError("the candidate is not the leased invoice of its org")
        by_invoice = {lease.invoice_id: candidate for lease, candidate in items}
        # The decisions of the live invoices of the transaction being written (a chunk, or one
        # invoice when the chunk is isolated), made after its fence and read by `decided`.
        decisions: dict[UUID, DuplicateDecision] = {}

        def take_locks(conn: psycopg.Connection[Any], leases: list[Lease]) -> None:
            self.take_locks(conn, [by_invoice[lease.invoice_id] for lease in leases])

        # The chunk write's `prepare`: after the fence, with the live leases, and before the
        # step's breadcrumb, which is harmless here: no mark finishes a job.
        def decide(conn: psycopg.Connection[Any], live: list[Lease]) -> None:
            decisions.clear()
            decisions.update(
                self._decide_chunk(conn, [(lease, by_invoice[lease.invoice_id]) for lease in live], match)
            )

        def decided(
            conn: psycopg.Connection[Any], lease: Lease, candidate: MatchCandidate
        ) -> DuplicateDecision:
            return decisions[lease.invoice_id]

        return self.db.write_chunk(items, decided, decide, step=step, before_fence=take_locks)

    def _decide_chunk(
        self,
        conn: psycopg.Connection[Any],
        items: Sequence[tuple[Lease, MatchCandidate]],
        match: MatchFunction,
    ) -> dict[UUID, DuplicateDecision]:
        """Every live invoice's decision, in the chunk's order, each exactly as deciding it alone
        at that point of the transaction would: two reads, the matcher in Python, then one
        `executemany` per kind of mark, each returning its decision.

        An invoice decided already (a re-executed step) keeps its decision, and is a candidate
        only as the database has it (the read finds it if it is an original in reach).
        """
        rows = {
            r.invoice_id: r
            for r in self.db.fetch_all(
                conn,
                ChunkInvoiceRow,
                DEDUPE["chunk_invoices_to_decide"],
                {"invoice_ids": [lease.invoice_id for lease, _ in items]},
            )
        }
        pool = self._originals_in_reach(conn, [candidate for _, candidate in items])
        marks = self._marks(items, rows, pool, match)
        marked: dict[UUID, DuplicateDecision | None] = {}
        for name in MARKS:
            marked |= self._mark_all(conn, name, marks[name])
        return self._decisions(conn, items, rows, marked)

    def _originals_in_reach(
        self, conn: psycopg.Connection[Any], candidates: Sequence[MatchCandidate]
    ) -> OriginalsPool:
        """One read of every original any of the candidates' searches could return."""
        return OriginalsPool(
            self.db.fetch_all(
                conn,
                PooledOriginal,
                DEDUPE["chunk_duplicate_candidates"],
                {
                    "org_ids": sorted({c.org_id for c in candidates}),
                    "block_keys": sorted({k for c in candidates for k in search_ids(c.block)}),
                    "number_keys": sorted({c.number.id for c in candidates}),
                },
            )
        )

    @staticmethod
    def _marks(
        items: Sequence[tuple[Lease, MatchCandidate]],
        rows: dict[UUID, ChunkInvoiceRow],
        pool: OriginalsPool,
        match: MatchFunction,
    ) -> dict[str, list[dict[str, Any]]]:
        """The matcher's outcome for each undecided invoice, in the chunk's order, as the
        parameters of its mark; a new original joins the pool for the invoices after it."""
        marks: dict[str, list[dict[str, Any]]] = {name: [] for name in MARKS}
        for lease, candidate in items:
            row = rows[lease.invoice_id]
            if row.status is not None:
                continue  # decided already: that decision stands
            outcome = match(candidate, pool.candidates_of(candidate))
            params: dict[str, Any] = {
                "invoice_id": lease.invoice_id,
                "org_id": candidate.org_id,
                **candidate.stored_keys,
            }
            if outcome is None:
                marks["mark_original"].append(params)
                # A candidate of the chunk's later invoices from now on, as its row will read
                # (the per-invoice search skips an invoice without fields).
                if row.fields is not None:
                    keys = candidate.stored_keys
                    pool.add(
                        PooledOriginal(
                            row.invoice_id,
                            row.org_id,
                            row.fields,
                            row.seq,
                            cast(int | None, keys["block_key"]),
                            cast(int, keys["number_key"]),
                        )
                    )
            else:
                marks["mark_duplicate" if outcome.exact else "mark_suspected"].append(
                    params | outcome.params()
                )
        return marks

    def _decisions(
        self,
        conn: psycopg.Connection[Any],
        items: Sequence[tuple[Lease, MatchCandidate]],
        rows: dict[UUID, ChunkInvoiceRow],
        marked: dict[UUID, DuplicateDecision | None],
    ) -> dict[UUID, DuplicateDecision]:
        """Each invoice's decision as deciding it alone at its turn would report it: the one its
        mark returned, or the one a previous attempt stored."""
        decisions: dict[UUID, DuplicateDecision] = {}
        # The groups this chunk's duplicates put their originals in, as far as the chunk has
        # got: an original decided by a previous attempt reports its row as deciding it alone at
        # its turn would read it, in the group a duplicate decided before it in the chunk made.
        groups_made: dict[UUID, UUID] = {}
        for lease, _ in items:
            if lease.invoice_id in marked:
                # None: decided meanwhile after all (the fence and the locks should rule it
                # out); the decision in its row stands.
                found = marked[lease.invoice_id] or self.db.fetch_one(
                    conn,
                    DuplicateDecision,
                    DEDUPE["load_duplicate_decision"],
                    {"invoice_id": lease.invoice_id},
                )
                assert found is not None
                if (
                    found.status == "duplicate"
                    and found.original_id is not None
                    and found.group_id is not None
                ):
                    groups_made[found.original_id] = found.group_id
            else:
                stored = rows[lease.invoice_id].decision()
                assert stored is not None
                found = stored
                if stored.status == "original" and stored.invoice_id in groups_made:
                    found = replace(stored, group_id=groups_made[stored.invoice_id])
            decisions[lease.invoice_id] = found
        return decisions

    def _mark_all(
        self, conn: psycopg.Connection[Any], name: str, params_seq: list[dict[str, Any]]
    ) -> dict[UUID, DuplicateDecision | None]:
        """One mark for many invoices in one `executemany`, with each invoice's returned decision
        (None: the mark found it decided already)."""
        if not params_seq:
            return {}
        with conn.cursor(row_factory=class_row(DuplicateDecision)) as cur:
            cur.executemany(DEDUPE[name], params_seq, returning=True)
            returned = [result.fetchone() for result in cur.results()]
        return {params["invoice_id"]: decision for params, decision in zip(params_seq, returned, strict=True)}

    @staticmethod
    def take_locks(conn: psycopg.Connection[Any], candidates: Sequence[MatchCandidate]) -> None:
        """Every advisory lock the candidates' decisions need, in one sorted call: two callers
        never wait on each other in a cycle."""
        ids = sorted({i for c in candidates for i in decision_lock_ids(c.block, c.number)})
        conn.execute(DEDUPE["take_dedupe_locks"], {"lock_ids": ids})

    @staticmethod
    def decision_keys_of(conn: psycopg.Connection[Any], invoice_id: UUID) -> tuple[str, InvoiceFields] | None:
        """The org and the fields the invoice's decision keys come from, as they are now; None
        before its fields are read."""
        row = conn.execute(DEDUPE["decision_keys_of"], {"invoice_id": invoice_id}).fetchone()
        if row is None or row[1] is None:
            return None
        return str(row[0]), InvoiceFields.from_json(row[1])

    def take_locks_of(self, conn: psycopg.Connection[Any], invoice_id: UUID) -> None:
        """The advisory locks of the invoice's decision, from its fields as they are now; none
        before its fields are read."""
        keys = self.decision_keys_of(conn, invoice_id)
        if keys is not None:
            org_id, fields = keys
            self.take_locks(conn, [MatchCandidate.from_fields(str(invoice_id), org_id, fields)])

    def locked_candidates(
        self, conn: psycopg.Connection[Any], candidate: MatchCandidate
    ) -> list[DuplicateCandidateRow]:
        """Takes the candidate's advisory locks, then reads every original of its org with its
        blocking key or its number key (sql/0007): the read a duplicate decision is made on."""
        return self.db.fetch_all(
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
        return self.db.only(self.decide_duplicates([(lease, candidate)], match), lease)

    def load_duplicate_decisions(self, invoice_ids: Sequence[UUID]) -> dict[UUID, DuplicateDecision]:
        with self.db.pool.connection() as conn:
            found = self.db.fetch_all(
                conn,
                DuplicateDecision,
                DEDUPE["load_duplicate_decisions"],
                {"invoice_ids": list(invoice_ids)},
            )
        return {d.invoice_id: d for d in found}

    def originals_like_an_unread_number(
        self, org_id: str, invoice_id: UUID, fields: InvoiceFields
    ) -> list[UUID]:
        """Originals the invoice may copy although its number was not read: the same seller, type
        and currency, the amount within 0.01, a close issue date (issue 52). None without a
        seller or an amount to compare."""
        keys = seller_vendor_keys(fields)
        if not keys or fields.payable_total is None:
            return []
        params = {
            "org_id": org_id,
            "invoice_id": invoice_id,
            "vendor_keys": keys,
            "document_type": fields.document_type,
            "currency": fields.currency,
            "payable_total": fields.payable_total,
            "issue_date": fields.issue_date,
        }
        with self.db.pool.connection() as conn:
            return [row[0] for row in conn.execute(DEDUPE["originals_like_an_unread_number"], params)]

    def load_duplicate_decision(self, invoice_id: UUID | str) -> DuplicateDecision | None:
        return self.load_duplicate_decisions([as_uuid(invoice_id)]).get(as_uuid(invoice_id))
