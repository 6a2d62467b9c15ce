"""Duplicate detection: the domain's matching rules, run inside the store's advisory-locked transaction."""

from __future__ import annotations

from uuid import UUID

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate, find_match
from invoice_pipeline.engine.records import DuplicateDecision, Lease, MatchOutcome
from invoice_pipeline.engine.store import InvoiceStore


def match_outcome(
    candidate: MatchCandidate, rows: list[tuple[UUID, str, InvoiceFields]]
) -> MatchOutcome | None:
    """Which of the org's originals (id, org, fields) the candidate copies, if any."""
    originals = [MatchCandidate.from_fields(str(rid), org, f) for rid, org, f in rows]
    found = find_match(candidate, originals)
    if found is None:
        return None
    return MatchOutcome(UUID(found.original_id), found.exact, found.how, found.score, found.reasons)


def decide_duplicate(
    store: InvoiceStore, lease: Lease, org_id: str, fields: InvoiceFields
) -> DuplicateDecision:
    """Original, duplicate or suspected for the leased invoice; ValueError when fields cannot form a key."""
    candidate = MatchCandidate.from_fields(str(lease.invoice_id), org_id, fields)
    return store.dedupe.decide_duplicate(lease, candidate, match_outcome)
