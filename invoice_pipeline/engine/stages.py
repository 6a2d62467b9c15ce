"""The pipeline's stages, defined once, with no Dagster import.

Each `Stage` has a name, an "already done?" query over a chunk of invoices, and its work over
the chunk's remaining invoices, which returns one `Outcome` per invoice. `run_stage` is the
shape they all share: breadcrumbs, fast-forward, work, then the settling of every outcome. The
chunk loop (`chunk_loop.py`: claim, the stages under the leases, release) runs them, for the
Dagster ops, the celery task and the bare loop alike.

Data moves between stages through the database, which is what lets a retry skip finished work.
One bad invoice never fails its chunk: it is quarantined (the document is unusable), held for a
person (`Held` is still a survivor: it goes on and is never posted), failed (retried later with
backoff), or lost (its lease was swept; someone else has it now). Only a systemic error (the
database is unreachable) escapes a stage.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, TypeVar
from uuid import UUID

from invoice_pipeline.config import DEFAULT_SAVE_AFTER_MS
from invoice_pipeline.documents import BadDocument, ExtractedText
from invoice_pipeline.documents.reading.layouts import PAGE_FORMATS, apply_layouts
from invoice_pipeline.documents.reading.page_values import shared_currency_signs
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.identity import without_own_identity
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.domain.registered_vendor import contradiction, with_registered_vendor
from invoice_pipeline.domain.review import (
    amount_due_unformed_reasons,
    einvoice_currency_reasons,
    einvoice_reasons,
    unread_number_copies,
    unread_reasons,
    with_default_currency,
)
from invoice_pipeline.domain.validation import posting_gaps, validate_fields
from invoice_pipeline.engine.deadlines import within_deadline
from invoice_pipeline.engine.dedupe import match_outcome
from invoice_pipeline.engine.page_invoice import may_read_the_page, read_invoice
from invoice_pipeline.engine.records import (
    ChunkWrite,
    Lease,
    Quarantine,
    Verdict,
    describe_error,
)
from invoice_pipeline.engine.store import InvoiceStore, PaymentRequest, is_systemic
from invoice_pipeline.engine.vendors import vendors_of_pages
from invoice_pipeline.engine.verdicts import payment_facts, verdict_for, who_is_paid

T = TypeVar("T")


# -- what a stage works on and returns -------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    """An invoice whose lock this worker holds: the lease's ids, small enough to pickle between ops."""

    invoice_id: UUID
    org_id: str
    job_id: UUID
    attempt: int
    owner: str

    @property
    def lease(self) -> Lease:
        return Lease(self.job_id, self.invoice_id, self.attempt, self.owner)


@dataclass(frozen=True)
class Done:
    detail: str = ""


@dataclass(frozen=True)
class Held:
    """Processed, but a person must decide before it is paid (needs_review)."""

    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Quarantined:
    """The document is unusable: kept, never retried, with a reason a person can act on."""

    code: str
    reason: str


@dataclass(frozen=True)
class Failed:
    """A technical failure of this invoice's attempt: retried later with backoff, or dead-lettered."""

    error: str


@dataclass(frozen=True)
class Lost:
    """The lease was swept or finished elsewhere: nothing was written, someone else owns the invoice."""

    detail: str


Outcome = Done | Held | Quarantined | Failed | Lost
SURVIVING = (Done, Held)


class DocumentParser(Protocol):
    """Turns stored bytes into text, and text into fields (the DocumentReader resource, sandboxed)."""

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText: ...

    def read_fields(self, extracted: ExtractedText) -> InvoiceFields: ...


# Finished results wait at most this much work before they are saved, unless the settings say
# otherwise (StageEnv.save_after_seconds): what a crash can lose.
FLUSH_AFTER_SECONDS = DEFAULT_SAVE_AFTER_MS / 1000


@dataclass(frozen=True)
class StageEnv:
    store: InvoiceStore
    parser: DocumentParser
    max_document_bytes: int
    # A parse that runs longer fails its attempt; see within_deadline.
    max_stage_seconds: float
    max_attempts: int
    retry_base: timedelta
    # Self-fencing: False for a lease (job id) this process may have lost (LeaseKeeper.may_hold):
    # its invoice gets no more work and no more writes, it is Lost. None: no such check.
    may_hold: Callable[[UUID], bool] | None = None
    # Finished results wait at most this much work before they are saved: what a crash can lose
    # (saved_as_they_finish; INVOICE_PIPELINE_SAVE_AFTER_MS).
    save_after_seconds: float = FLUSH_AFTER_SECONDS


# What a self-fenced invoice's Lost outcome says.
SELF_FENCED = "self-fenced: the lease was not renewed for most of its TTL (or was found lost)"


def self_fenced(env: StageEnv, items: Sequence[Claimed]) -> dict[UUID, Outcome]:
    """The items whose lease this process may have lost, as Lost outcomes (see StageEnv.may_hold)."""
    if env.may_hold is None:
        return {}
    return {c.invoice_id: Lost(SELF_FENCED) for c in items if not env.may_hold(c.job_id)}


@dataclass(frozen=True)
class Stage:
    name: str
    description: str
    done: Callable[[InvoiceStore, list[UUID]], set[UUID]]
    # (env, the chunk's invoices still to do, the stage's name for its 'executed' breadcrumbs)
    work: Callable[[StageEnv, list[Claimed], str], dict[UUID, Outcome]]


@dataclass(frozen=True)
class StageReport:
    stage: str
    outcomes: dict[UUID, Outcome]  # the invoices the stage worked on, or dropped
    skipped: frozenset[UUID]  # fast-forwarded: their work was done before
    survivors: tuple[Claimed, ...]  # go on to the next stage, in chunk order

    def count(self, kind: type) -> int:
        return sum(isinstance(o, kind) for o in self.outcomes.values())


# -- the shape every stage shares --------------------------------------------------------------


def run_stage(stage: Stage, env: StageEnv, chunk: Sequence[Claimed]) -> StageReport:
    """Breadcrumbs, fast-forward what is done, work on the rest, settle every outcome."""
    if not chunk:
        return StageReport(stage.name, {}, frozenset(), ())
    store = env.store
    done = stage.done(store, [c.invoice_id for c in chunk])
    # 'started' now; 'executed' is written with each saved result (sql/0008).
    crumbs = store.documents.record_steps(
        stage.name, [c.lease for c in chunk], {c.invoice_id for c in chunk} - done
    )
    outcomes = unwritten(crumbs)
    # Fast-forwarded: done before, and the breadcrumb saying so was written under a live lease.
    skipped = frozenset(done & crumbs.written.keys())
    todo = [c for c in chunk if c.invoice_id in crumbs.written and c.invoice_id not in done]
    fenced = self_fenced(env, todo)
    outcomes |= fenced
    todo = [c for c in todo if c.invoice_id not in fenced]
    if todo:
        outcomes |= stage.work(env, todo, stage.name)
    outcomes |= settle(env, chunk, outcomes, stage.name)
    fail_attempts(env, chunk, outcomes)
    survivors = tuple(
        c for c in chunk if c.invoice_id in skipped or isinstance(outcomes.get(c.invoice_id), SURVIVING)
    )
    return StageReport(stage.name, outcomes, skipped, survivors)


def unwritten(write: ChunkWrite[Any]) -> dict[UUID, Outcome]:
    """The invoices a chunk write left out: lost (the lease is gone) or failed (their data)."""
    outcomes: dict[UUID, Outcome] = {invoice_id: Lost(why) for invoice_id, why in write.lost.items()}
    outcomes |= {invoice_id: Failed(describe_error(exc)) for invoice_id, exc in write.failed.items()}
    return outcomes


def written_outcomes(write: ChunkWrite[Any], done: Outcome) -> dict[UUID, Outcome]:
    """A chunk write's result as outcomes: `done` for each written invoice, lost or failed otherwise."""
    return {invoice_id: done for invoice_id in write.written} | unwritten(write)


def settle(
    env: StageEnv, chunk: Sequence[Claimed], outcomes: dict[UUID, Outcome], step: str
) -> dict[UUID, Outcome]:
    """Quarantine the unusable documents (one fenced write); returns the outcomes that changed."""
    quarantined = [
        (c.lease, Quarantine(o.code, o.reason))
        for c in chunk
        if isinstance(o := outcomes.get(c.invoice_id), Quarantined)
    ]
    return unwritten(env.store.claims.quarantine_many(quarantined, step=step))


def fail_attempts(env: StageEnv, chunk: Sequence[Claimed], outcomes: dict[UUID, Outcome]) -> None:
    """Release each failed invoice's lock at once and schedule its retry (or dead-letter it).

    A lost lease is finished already; its invoice is rescheduled too unless someone else holds
    it now (`fail` changes nothing then), instead of waiting for the sweep to notice.
    """
    for c in chunk:
        outcome = outcomes.get(c.invoice_id)
        if isinstance(outcome, Failed | Lost):
            error = outcome.error if isinstance(outcome, Failed) else f"lease lost: {outcome.detail}"
            env.store.claims.fail(c.job_id, error, max_attempts=env.max_attempts, retry_base=env.retry_base)


def each(
    items: Sequence[Claimed], work: Callable[[Claimed], T], seconds: float | None = None, step: str = ""
) -> tuple[dict[UUID, T], dict[UUID, Outcome]]:
    """`work` for every invoice; one invoice's bad document or error is its own outcome.

    A systemic error (the database is gone) is raised: it is not this invoice's fault, and the
    whole chunk is better retried than each invoice failed.
    """
    results: dict[UUID, T] = {}
    problems: dict[UUID, Outcome] = {}
    for c in items:
        try:
            if seconds is None:
                results[c.invoice_id] = work(c)
            else:
                results[c.invoice_id] = within_deadline(lambda c=c: work(c), seconds, step)  # type: ignore[misc]
        except BadDocument as exc:
            problems[c.invoice_id] = Quarantined(exc.code, exc.reason)
        except Exception as exc:
            if is_systemic(exc):
                raise
            problems[c.invoice_id] = Failed(f"{step or 'stage'} failed: {describe_error(exc)}")
    return results, problems


def saved_as_they_finish(
    items: Sequence[Claimed],
    work: Callable[[Claimed], T],
    save: Callable[[list[tuple[Claimed, T]]], ChunkWrite[Any]],
    seconds: float | None,
    step: str,
    env: StageEnv | None = None,
) -> dict[UUID, Outcome]:
    """`each`, saving finished results whenever about a second of work has piled up.

    A crash then loses at most the work since the last save (and the document in flight),
    not the chunk: cheap documents still share one save per chunk (or per second), and an
    expensive one (OCR, seconds per page) is saved as soon as it is read. With `env`, a
    document whose lease this process may have lost is neither started nor saved (self_fenced).
    """
    outcomes: dict[UUID, Outcome] = {}
    pending: list[tuple[Claimed, T]] = []
    worked = 0.0
    save_after = env.save_after_seconds if env is not None else FLUSH_AFTER_SECONDS
    for index, c in enumerate(items):
        fenced = self_fenced(env, [c]) if env is not None else {}
        outcomes |= fenced
        if not fenced:
            began = time.perf_counter()
            results, problems = each([c], work, seconds, step)
            outcomes |= problems
            pending.extend((c, result) for result in results.values())
            worked += time.perf_counter() - began
        if pending and (worked >= save_after or index == len(items) - 1):
            fenced = self_fenced(env, [p for p, _ in pending]) if env is not None else {}
            outcomes |= fenced
            live = [(p, r) for p, r in pending if p.invoice_id not in fenced]
            if live:
                outcomes |= written_outcomes(save(live), Done())
            pending, worked = [], 0.0
    return outcomes


def _done_query(step: str) -> Callable[[InvoiceStore, list[UUID]], set[UUID]]:
    return lambda store, ids: store.documents.done_ids(step, ids)


def _missing(what: str) -> Failed:
    # A stage found its input missing although the stage before reported done: a bug, not data.
    return Failed(f"{what} missing; the previous stage did not leave it")


# -- the stages --------------------------------------------------------------------------------


def extract_text(env: StageEnv, items: list[Claimed], step: str) -> dict[UUID, Outcome]:
    documents = env.store.documents.load_documents([c.invoice_id for c in items])

    def read(c: Claimed) -> ExtractedText:
        document = documents.get(c.invoice_id)
        if document is None:
            raise BadDocument("no_document", "the invoice has no stored document; ingest the file again")
        return env.parser.read_text(document.content, document.filename, env.max_document_bytes)

    return saved_as_they_finish(
        items,
        read,
        lambda done: env.store.documents.save_extracted_texts(
            [(c.lease, text) for c, text in done], step=step
        ),
        env.max_stage_seconds,
        step,
        env,
    )


def extract_fields(env: StageEnv, items: list[Claimed], step: str) -> dict[UUID, Outcome]:
    texts = env.store.documents.load_extracted_texts([c.invoice_id for c in items])
    have = [c for c in items if c.invoice_id in texts]
    outcomes: dict[UUID, Outcome] = {c.invoice_id: _missing("extracted text") for c in items if c not in have}
    policies = env.store.review.review_policies(sorted({c.org_id for c in have})) if have else {}
    # The orgs' vendor layouts (issue 23), one query for the chunk: a page-read invoice is read
    # with its vendor's layout first, template-free where the layout cannot (apply_layouts).
    layouts = env.store.layouts.enabled_layouts(sorted({c.org_id for c in have})) if have else {}
    # The orgs' own identities (issue 37): what the org is known by is the buyer's, never the seller's.
    profiles = env.store.vendors.org_profiles(sorted({c.org_id for c in have})) if have else {}
    # The vendor the registry confirms for each page (issue 54): only its layouts read the page.
    pages = {
        c.invoice_id: (c.org_id, texts[c.invoice_id].text)
        for c in have
        if texts[c.invoice_id].format in PAGE_FORMATS
        or may_read_the_page(texts[c.invoice_id], policies[c.org_id])
    }
    vendors = vendors_of_pages(env.store, pages, profiles) if pages else {}
    # What a shared currency sign ("$", "kr") means for those vendors: the currencies of their
    # invoices a person approved (issue 54).
    approved = env.store.vendors.currencies_a_person_approved(
        sorted({(pages[i][0], v.vendor_id) for i, v in vendors.items() if v is not None})
    )

    def read(c: Claimed) -> InvoiceFields:
        # A hybrid PDF whose page is the invoice is read from its page (issue 55, page_invoice).
        text, fields = read_invoice(env.parser, texts[c.invoice_id], policies[c.org_id])
        fields = without_own_identity(fields, profiles[c.org_id], text.text)
        vendor = vendors.get(c.invoice_id) if text.format in PAGE_FORMATS else None
        if vendor is not None and contradiction(fields, vendor) is not None:
            # The page names another seller than the vendor its identifiers confirm: read as an
            # unknown vendor's page (no layout, nothing filled); the payment decision holds it.
            vendor = None
        fields = apply_layouts(text, fields, layouts.get(c.org_id, ()), c.org_id, vendor)
        shared = shared_currency_signs(text.text) if text.format in PAGE_FORMATS else {}
        fields = with_registered_vendor(
            fields,
            vendor,
            approved_currencies=approved.get((c.org_id, vendor.vendor_id), ()) if vendor else (),
            shared_signs=shared,
        )
        policy = policies[c.org_id]
        if (
            fields.currency is None
            and shared
            and policy.default_currency not in frozenset().union(*shared.values())
        ):
            # A "$" or "kr" page is not in the org's default currency when that sign cannot mean
            # it: the currency stays unread, for a person.
            return fields
        return with_default_currency(fields, policy)

    return outcomes | saved_as_they_finish(
        have,
        read,
        lambda done: env.store.documents.save_fields_of([(c.lease, fields) for c, fields in done], step=step),
        env.max_stage_seconds,
        step,
        env,
    )


def validate(env: StageEnv, items: list[Claimed], step: str) -> dict[UUID, Outcome]:
    """Quarantine what no person can fix (a structured document's own data is wrong); hold for a
    person what the page reader could not read, with a reason per field (issue 37)."""
    fields = env.store.documents.load_fields_of([c.invoice_id for c in items])
    outcomes: dict[UUID, Outcome] = {}
    unread: list[tuple[Lease, Verdict]] = []
    for c in items:
        found = fields.get(c.invoice_id)
        if found is None:
            outcomes[c.invoice_id] = _missing("fields")
            continue
        problems = validate_fields(found)
        if problems and found.read_from_page:
            reasons = unread_reasons(problems)
            if any(p.field == "invoice_number" for p in problems):
                near = env.store.dedupe.originals_like_an_unread_number(c.org_id, c.invoice_id, found)
                reasons += unread_number_copies(near, found)
            unread.append((c.lease, Verdict("held", "; ".join(reasons), tuple(reasons))))
        elif problems and (unformed := amount_due_unformed_reasons(found, problems)) is not None:
            unread.append((c.lease, Verdict("held", "; ".join(unformed), tuple(unformed))))
        elif problems and (bad_code := einvoice_currency_reasons(found, problems)) is not None:
            unread.append((c.lease, Verdict("held", "; ".join(bad_code), tuple(bad_code))))
        elif problems:
            # Unusable as it is (no number, no total, an unknown currency): quarantined, the file
            # kept; an e-invoice's reason also names the rules of its own that it breaks (issue 55).
            reasons = [p.reason for p in problems] + einvoice_reasons(found)
            outcomes[c.invoice_id] = Quarantined(problems[0].code, "; ".join(reasons))
    # Held here, the invoice fast-forwards past dedupe and approval (their done queries count a
    # hold): without its number or seller there is nothing to compare, and a person decides.
    held = env.store.documents.record_verdicts(unread, step=step)
    outcomes |= unwritten(held)
    outcomes |= {
        invoice_id: Held(verdict.reasons)
        for lease, verdict in unread
        if (invoice_id := lease.invoice_id) in held.written
    }
    # Passing validation stores nothing but the breadcrumb (a quarantine is saved by `settle`).
    passed = [c.lease for c in items if c.invoice_id in fields and c.invoice_id not in outcomes]
    return outcomes | written_outcomes(env.store.documents.record_executed(step, passed), Done())


def detect_duplicates(env: StageEnv, items: list[Claimed], step: str) -> dict[UUID, Outcome]:
    fields = env.store.documents.load_fields_of([c.invoice_id for c in items])
    outcomes: dict[UUID, Outcome] = {
        c.invoice_id: _missing("fields") for c in items if c.invoice_id not in fields
    }
    have = [c for c in items if c.invoice_id in fields]
    candidates, problems = each(
        have, lambda c: MatchCandidate.from_fields(str(c.invoice_id), c.org_id, fields[c.invoice_id])
    )
    write = env.store.dedupe.decide_duplicates(
        [(c.lease, candidates[c.invoice_id]) for c in have if c.invoice_id in candidates],
        match_outcome,
        step=step,
    )
    outcomes |= problems | written_outcomes(write, Done())
    for invoice_id, decision in write.written.items():
        outcomes[invoice_id] = Done(
            decision.status
            if decision.original_id is None
            else f"{decision.status} of {decision.original_id}"
        )
    return outcomes


def approve(env: StageEnv, items: list[Claimed], step: str) -> dict[UUID, Outcome]:
    ids = [c.invoice_id for c in items]
    decisions = env.store.dedupe.load_duplicate_decisions(ids)
    fields = env.store.documents.load_fields_of(ids)
    policies = env.store.review.review_policies(sorted({c.org_id for c in items}))
    facts = payment_facts(
        env.store,
        {c.invoice_id: (c.org_id, fields[c.invoice_id]) for c in items if c.invoice_id in fields},
        policies,
        decisions,
    )
    outcomes: dict[UUID, Outcome] = {}
    verdicts: dict[UUID, Verdict] = {}
    for c in items:
        decision, found = decisions.get(c.invoice_id), fields.get(c.invoice_id)
        if decision is None or found is None:
            outcomes[c.invoice_id] = _missing("duplicate decision")
            continue
        paid = who_is_paid(facts[c.invoice_id])
        verdicts[c.invoice_id] = verdict_for(
            found, decision.status, decision.original_id, decision.reasons, policies[c.org_id], paid
        )
    write = env.store.documents.record_verdicts(
        [(c.lease, verdicts[c.invoice_id]) for c in items if c.invoice_id in verdicts], step=step
    )
    outcomes |= written_outcomes(write, Done())
    for invoice_id in write.written:
        verdict = verdicts[invoice_id]
        outcomes[invoice_id] = Held(verdict.reasons) if verdict.decision == "held" else Done(verdict.decision)
    return outcomes


def post_to_ledger(env: StageEnv, items: list[Claimed], step: str) -> dict[UUID, Outcome]:
    """Decide who is paid and post, in one fenced transaction under the identity locks
    (store/payments.py): anything that changed since approval holds the invoice, with the
    reasons of now."""
    ids = [c.invoice_id for c in items]
    fields = env.store.documents.load_fields_of(ids)
    approvals = env.store.documents.load_approvals(ids)
    decisions = env.store.dedupe.load_duplicate_decisions(ids)
    policies = env.store.review.review_policies(sorted({c.org_id for c in items}))
    requests: list[tuple[Lease, PaymentRequest]] = []
    outcomes: dict[UUID, Outcome] = {}
    for c in items:
        found, decision = fields.get(c.invoice_id), decisions.get(c.invoice_id)
        if found is None or posting_gaps(found):
            outcomes[c.invoice_id] = _missing("payable total and currency")
            continue
        requests.append(
            (
                c.lease,
                PaymentRequest(
                    c.org_id,
                    found,
                    policies[c.org_id],
                    decision.status if decision else None,
                    decision.original_id if decision else None,
                    approvals.get(c.invoice_id),
                ),
            )
        )
    write = env.store.payments.post_many(requests, step=step)
    outcomes |= unwritten(write)
    for invoice_id, paid in write.written.items():
        outcomes[invoice_id] = Done("posted") if paid.posts else Held(tuple(r.text for r in paid.held))
    return outcomes


STAGES: tuple[Stage, ...] = (
    Stage(
        "extract_text",
        "Read the stored document's text (OCR for scans): the expensive step.",
        _done_query("extract_text"),
        extract_text,
    ),
    Stage(
        "extract_fields",
        "Invoice number, dates, totals, parties — with a source per field.",
        _done_query("extract_fields"),
        extract_fields,
    ),
    Stage(
        "validate",
        "Quarantine what cannot be paid: missing number or total, bad amounts, dates, currency.",
        # Validation leaves no row of its own: a recorded duplicate decision proves it passed.
        _done_query("detect_duplicates"),
        validate,
    ),
    Stage(
        "detect_duplicates",
        "Original, duplicate or suspected, under the blocking keys' advisory locks.",
        _done_query("detect_duplicates"),
        detect_duplicates,
    ),
    Stage(
        "approve",
        "Approve valid originals; reject exact duplicates; hold business exceptions for a person.",
        _done_query("approve"),
        approve,
    ),
    Stage(
        "post_to_ledger",
        "Post approved invoices to the ledger, exactly once.",
        _done_query("post_to_ledger"),
        post_to_ledger,
    ),
)
