"""The pipeline's stages as Dagster ops: thin adapters between the domain code and the store.

Each stage takes the `Claim` (ids only, so it survives pickling and re-execution), resumes the
lease it names, writes its breadcrumb, asks the store whether its work is already done (then
it fast-forwards), and otherwise does the work under a heartbeat. Data moves between stages
through the database, which is what lets a retry skip finished work.
"""

import hashlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from uuid import UUID

from dagster import (
    AssetMaterialization,
    Backoff,
    Config,
    DynamicOut,
    DynamicOutput,
    Failure,
    HookContext,
    Jitter,
    MetadataValue,
    OpExecutionContext,
    Out,
    Output,
    RetryPolicy,
    failure_hook,
    op,
)

from invoice_pipeline.dedupe import decide_duplicate
from invoice_pipeline.documents import BadDocument
from invoice_pipeline.domain.validation import validate_fields
from invoice_pipeline.leases import Lease, LeaseLost
from invoice_pipeline.resources import DocumentReader, InvoiceDatabase
from invoice_pipeline.runs import run_owner
from invoice_pipeline.store import InvoiceStore, as_uuid

T = TypeVar("T")

# Transient errors (a dropped connection, a timeout) are retried with backoff inside the run;
# bad documents and lost leases raise Failure(allow_retries=False) and are not.
TRANSIENT_RETRY = RetryPolicy(max_retries=3, delay=0.5, backoff=Backoff.EXPONENTIAL, jitter=Jitter.PLUS_MINUS)

ASSET_DOCUMENTS = "invoice_documents"
ASSET_TEXT = "extracted_text"
ASSET_FIELDS = "invoice_fields"
ASSET_DUPLICATES = "duplicate_decisions"
ASSET_APPROVALS = "approvals"
ASSET_LEDGER = "ledger_postings"


@dataclass(frozen=True)
class InvoiceRef:
    invoice_id: str
    attempt: int | None = None


@dataclass(frozen=True)
class Claim:
    """What a stage needs to resume the lease: the fencing token and who took it."""

    invoice_id: str
    org_id: str
    job_id: str
    attempt: int
    run_id: str


class ProcessInvoiceConfig(Config):
    invoice_id: str
    attempt: int | None = None


class BatchConfig(Config):
    invoice_ids: list[str]
    attempts: list[int] | None = None


# -- entry points ----------------------------------------------------------------------------


@op(description="Turn the run's config into the invoice to process.")
def start(context: OpExecutionContext, config: ProcessInvoiceConfig) -> InvoiceRef:
    _valid_uuid(config.invoice_id)
    if config.attempt is not None and config.attempt < 1:
        raise Failure(f"attempt must be >= 1, got {config.attempt}", allow_retries=False)
    return InvoiceRef(config.invoice_id, config.attempt)


@op(out=DynamicOut(InvoiceRef), description="Fan a backlog out: one branch, and one lock, per invoice.")
def fan_out(config: BatchConfig) -> Iterator[DynamicOutput[InvoiceRef]]:
    if config.attempts is not None and len(config.attempts) != len(config.invoice_ids):
        raise Failure("attempts must have one entry per invoice id", allow_retries=False)
    for ref in unique_refs(config.invoice_ids, config.attempts):
        _valid_uuid(ref.invoice_id)
        yield DynamicOutput(ref, mapping_key=ref.invoice_id.replace("-", "_"))


def unique_refs(invoice_ids: list[str], attempts: list[int] | None) -> list[InvoiceRef]:
    """One ref per invoice, each with the attempt given beside its first occurrence.

    Dropping repeated ids must drop their attempts with them: numbering the survivors afresh
    gave [A, B, A, C] with [1, 2, 1, 3] to C as attempt 1.
    """
    refs: dict[str, InvoiceRef] = {}
    for i, invoice_id in enumerate(invoice_ids):
        refs.setdefault(invoice_id, InvoiceRef(invoice_id, attempts[i] if attempts else None))
    return list(refs.values())


def _valid_uuid(value: str) -> UUID:
    try:
        return as_uuid(value)
    except ValueError as exc:
        raise Failure(str(exc), allow_retries=False) from None


# -- claim -----------------------------------------------------------------------------------


@op(
    out=Out(Claim, is_required=False),
    retry_policy=TRANSIENT_RETRY,
    description="Sweep this invoice's stale lock, then take the lock; end quietly if someone holds it.",
)
def claim(
    context: OpExecutionContext, ref: InvoiceRef, invoice_db: InvoiceDatabase
) -> Iterator[Output[Claim]]:
    store = invoice_db.store
    state = store.invoice_state(ref.invoice_id)
    if state is None:
        raise Failure(f"no invoice {ref.invoice_id}", allow_retries=False)
    if state.is_terminal:
        context.log.info(f"invoice {ref.invoice_id} is already {state.status}: nothing to do")
        return
    swept = store.release_stale_locks(ref.invoice_id, invoice_db.lock_ttl)
    if swept:
        context.log.warning(f"swept {swept} stale lock(s) on invoice {ref.invoice_id} before acquiring")
    attempt = ref.attempt or state.attempts + 1
    lease = store.acquire(ref.invoice_id, attempt, run_owner(context.run_id))
    if lease is None:
        holder = store.current_holder(ref.invoice_id)
        context.log.warning(
            f"invoice {ref.invoice_id} is held elsewhere: "
            + (holder.describe() if holder else "the holder finished just now")
            + "; this run does nothing"
        )
        return
    if not _is_mapped(context):
        # Runs launched by hand carry no tags; these let a person find every run of an invoice.
        context.instance.add_run_tags(
            context.run_id, {"invoice_id": ref.invoice_id, "org_id": state.org_id, "attempt": str(attempt)}
        )
    # Heartbeated from now until release, also while this branch waits for the others of a batch.
    invoice_db.lease_keeper.hold(lease.job_id)
    context.log.info(f"acquired invoice {ref.invoice_id}: job {lease.job_id}, attempt {attempt}")
    yield Output(Claim(ref.invoice_id, state.org_id, str(lease.job_id), attempt, context.run_id))


def _is_mapped(context: OpExecutionContext) -> bool:
    return context.get_mapping_key() is not None


# -- the shape every stage shares -------------------------------------------------------------


def _resume_lease(store: InvoiceStore, claim: Claim, run_id: str) -> Lease:
    """The lease this run holds on the claimed invoice.

    In the run that claimed it, that is the claim's own job. A run re-executed from failure
    gets its parent's claim, whose job is finished by then: its first stage takes a fresh lock
    (next attempt) and later stages find it by this run's owner. A parent job still running
    belongs to another, maybe live, process and is never adopted.
    """
    if claim.run_id == run_id:
        return store.lease(claim.job_id, claim.invoice_id, claim.attempt, run_owner(run_id))
    holder = store.current_holder(claim.invoice_id)
    if holder is not None and holder.owner == run_owner(run_id):
        return store.lease(holder.job_id, holder.invoice_id, holder.attempt, holder.owner)
    state = store.invoice_state(claim.invoice_id)
    if holder is None:
        attempt = (state.attempts if state else claim.attempt) + 1
        fresh = store.acquire(claim.invoice_id, attempt, run_owner(run_id))
        if fresh is not None:
            return fresh
        holder = store.current_holder(claim.invoice_id)
        state = store.invoice_state(claim.invoice_id)
    if holder is not None:
        why = f"held by {holder.describe()}"
    else:
        why = f"it is already {state.status if state else 'gone'}"
    raise Failure(f"re-executed run cannot take invoice {claim.invoice_id}: {why}", allow_retries=False)


def run_step(
    context: OpExecutionContext,
    invoice_db: InvoiceDatabase,
    claim: Claim,
    step: str,
    already_done: Callable[[], T | None],
    work: Callable[[Lease], T],
) -> T:
    """Breadcrumb, fast-forward if done, else work under a heartbeat; map errors to Failures.

    Every failure carries the job id as metadata, so the failure hook can release exactly
    this branch's lease.
    """
    store = invoice_db.store
    lease = _resume_lease(store, claim, context.run_id)
    keeper = invoice_db.lease_keeper
    keeper.hold(lease.job_id)  # already held unless this run was re-executed
    failure_meta = {"invoice_id": claim.invoice_id, "job_id": str(lease.job_id)}
    try:
        done = already_done()
        if done is not None:
            store.record_step(lease, step, skipped=True)
            context.log.info(f"{step}: already done for invoice {claim.invoice_id}, fast-forwarding")
            return done
        store.record_step(lease, step, skipped=False)
        result = within_deadline(lambda: work(lease), invoice_db.max_stage_seconds, step)
        if keeper.is_lost(lease.job_id):
            raise LeaseLost(lease.job_id, lease.invoice_id, "heartbeat found the job no longer running")
        return result
    except LeaseLost as exc:
        keeper.drop(lease.job_id)
        raise Failure(f"lease lost, stopping: {exc}", metadata=failure_meta, allow_retries=False) from exc
    except BadDocument as exc:
        keeper.drop(lease.job_id)
        store.quarantine(lease, exc.code, exc.reason)
        raise Failure(
            f"quarantined ({exc.code}): {exc.reason}",
            metadata=failure_meta | {"code": exc.code},
            allow_retries=False,
        ) from exc
    except StageTimedOut as exc:
        # Stop vouching for the abandoned work: the failure hook finishes the lease as failed
        # and reschedules the invoice, and should the hook not run, the sweep takes it at TTL.
        keeper.drop(lease.job_id)
        raise Failure(str(exc), metadata=failure_meta, allow_retries=False) from exc
    except Failure:
        raise
    except Exception as exc:
        raise Failure(f"{step} failed: {type(exc).__name__}: {exc}", metadata=failure_meta) from exc


class StageTimedOut(RuntimeError):
    """A stage ran past its maximum duration; its work was abandoned."""


def within_deadline(work: Callable[[], T], seconds: float, step: str) -> T:
    """`work()`, or StageTimedOut once it has run `seconds`.

    A heartbeat says the process is alive, not that the stage makes progress: a parse stuck in
    C code (or an OCR service that never answers) would otherwise hold its lease forever. The
    work runs in a daemon thread that is abandoned on timeout; that is safe because every write
    is fenced by the lease, which the failure path finishes, so a late write is refused.
    """
    outcome: list[tuple[bool, object]] = []
    finished = threading.Event()

    def target() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # handed to the waiting thread, re-raised there
            outcome.append((False, exc))
        finally:
            finished.set()

    threading.Thread(target=target, name=f"stage-{step}", daemon=True).start()
    if not finished.wait(seconds):
        raise StageTimedOut(
            f"{step} ran longer than its maximum of {seconds:g} s (InvoiceDatabase.max_stage_seconds); "
            "the attempt is abandoned and the invoice rescheduled"
        )
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def _materialize(context: OpExecutionContext, asset: str, claim: Claim, **metadata: object) -> None:
    context.log_event(
        AssetMaterialization(
            asset_key=asset,
            partition=None,
            metadata={"invoice_id": claim.invoice_id, "org_id": claim.org_id, **metadata},  # type: ignore[dict-item]
        )
    )


# -- stages ----------------------------------------------------------------------------------


@op(
    retry_policy=TRANSIENT_RETRY,
    description="Read the stored document's text (OCR for scans): the expensive step.",
)
def extract_text(
    context: OpExecutionContext, claim: Claim, invoice_db: InvoiceDatabase, document_reader: DocumentReader
) -> Claim:
    store = invoice_db.store

    def work(lease: Lease) -> bool:
        document = store.load_document(claim.invoice_id)
        if document is None:
            raise BadDocument("no_document", "the invoice has no stored document; ingest the file again")
        _materialize(context, ASSET_DOCUMENTS, claim, sha256=document.sha256, bytes=len(document.content))
        text = document_reader.read_text(document.content, document.filename, invoice_db.max_document_bytes)
        store.save_extracted_text(lease, text)
        _materialize(context, ASSET_TEXT, claim, format=text.format, method=text.method, chars=len(text.text))
        return True

    run_step(
        context, invoice_db, claim, "extract_text", lambda: store.load_extracted_text(claim.invoice_id), work
    )
    return claim


@op(
    retry_policy=TRANSIENT_RETRY,
    description="Invoice number, dates, totals, parties — with a source per field.",
)
def extract_fields(
    context: OpExecutionContext, claim: Claim, invoice_db: InvoiceDatabase, document_reader: DocumentReader
) -> Claim:
    store = invoice_db.store

    def work(lease: Lease) -> bool:
        extracted = store.load_extracted_text(claim.invoice_id)
        assert extracted is not None, "extract_text ran before"
        fields = document_reader.read_fields(extracted)
        store.save_fields(lease, fields)
        _materialize(
            context,
            ASSET_FIELDS,
            claim,
            invoice_number=fields.invoice_number or "",
            payable_total=float(fields.payable_total) if fields.payable_total is not None else None,
            currency=fields.currency or "",
        )
        return True

    run_step(context, invoice_db, claim, "extract_fields", lambda: store.load_fields(claim.invoice_id), work)
    return claim


@op(
    retry_policy=TRANSIENT_RETRY,
    description="Reject what cannot be paid: missing number or total, bad amounts, dates, currency.",
)
def validate(context: OpExecutionContext, claim: Claim, invoice_db: InvoiceDatabase) -> Claim:
    store = invoice_db.store

    def work(lease: Lease) -> bool:
        fields = store.load_fields(claim.invoice_id)
        assert fields is not None, "extract_fields ran before"
        problems = validate_fields(fields)
        if problems:
            raise BadDocument(problems[0].code, "; ".join(p.reason for p in problems))
        return True

    # Validation leaves no row of its own; a recorded duplicate decision proves it passed.
    run_step(
        context,
        invoice_db,
        claim,
        "validate",
        lambda: True if store.load_duplicate_decision(claim.invoice_id) else None,
        work,
    )
    return claim


@op(
    retry_policy=TRANSIENT_RETRY, description="Original or duplicate, under the business key's advisory lock."
)
def detect_duplicates(context: OpExecutionContext, claim: Claim, invoice_db: InvoiceDatabase) -> Claim:
    store = invoice_db.store

    def work(lease: Lease) -> bool:
        fields = store.load_fields(claim.invoice_id)
        assert fields is not None
        decision = decide_duplicate(store, lease, claim.org_id, fields)
        _materialize(
            context,
            ASSET_DUPLICATES,
            claim,
            status=decision.status,
            original_id=str(decision.original_id or ""),
            how=decision.how or "",
            reasons=MetadataValue.text("; ".join(decision.reasons)),
        )
        if decision.is_duplicate:
            context.log.info(
                f"duplicate of {decision.original_id} ({decision.how}): {'; '.join(decision.reasons)}"
            )
        return True

    run_step(
        context,
        invoice_db,
        claim,
        "detect_duplicates",
        lambda: store.load_duplicate_decision(claim.invoice_id),
        work,
    )
    return claim


@op(
    retry_policy=TRANSIENT_RETRY,
    description="Approve valid originals; reject exact duplicates; hold suspected ones for a person.",
)
def approve(context: OpExecutionContext, claim: Claim, invoice_db: InvoiceDatabase) -> Claim:
    store = invoice_db.store

    def work(lease: Lease) -> bool:
        decision = store.load_duplicate_decision(claim.invoice_id)
        assert decision is not None
        if decision.is_suspected:
            reason = f"suspected_duplicate of {decision.original_id}: {'; '.join(decision.reasons)}"
            store.hold_for_review(lease, [reason])
            context.log.warning(f"invoice {claim.invoice_id} held for review: {reason}")
            _materialize(context, ASSET_APPROVALS, claim, decision="held", rule=reason)
            return True
        if decision.is_duplicate:
            approval = store.record_approval(lease, "rejected", f"duplicate of {decision.original_id}")
        else:
            approval = store.record_approval(lease, "approved", "auto-approved: valid, not a duplicate")
        _materialize(context, ASSET_APPROVALS, claim, decision=approval.decision, rule=approval.rule)
        return True

    run_step(context, invoice_db, claim, "approve", lambda: _decided_or_held(store, claim), work)
    return claim


def _decided_or_held(store: InvoiceStore, claim: Claim) -> bool | None:
    """The approval step is done when it approved, rejected, or held the invoice for a person."""
    if store.review_reasons(claim.invoice_id) is not None:
        return True
    return True if store.load_approval(claim.invoice_id) is not None else None


@op(retry_policy=TRANSIENT_RETRY, description="Post approved invoices to the ledger, exactly once.")
def post_to_ledger(context: OpExecutionContext, claim: Claim, invoice_db: InvoiceDatabase) -> Claim:
    store = invoice_db.store

    def already_done() -> bool | None:
        # Nothing to post, ever, unless approved: a rejected or held invoice fast-forwards.
        if store.load_ledger_posting(claim.invoice_id) is not None:
            return True
        approval = store.load_approval(claim.invoice_id)
        return True if approval is None or approval.decision != "approved" else None

    def work(lease: Lease) -> bool:
        fields = store.load_fields(claim.invoice_id)
        assert fields is not None and fields.payable_total is not None and fields.currency
        # A credit note reduces what the org owes.
        amount = -fields.payable_total if fields.document_type == "credit_note" else fields.payable_total
        posting = store.post_to_ledger(lease, claim.org_id, amount, fields.currency)
        _materialize(context, ASSET_LEDGER, claim, amount=float(posting.amount), currency=posting.currency)
        return True

    run_step(context, invoice_db, claim, "post_to_ledger", already_done, work)
    return claim


@op(retry_policy=TRANSIENT_RETRY, description="Finish the lease as succeeded and mark the invoice processed.")
def release(context: OpExecutionContext, claim: Claim, invoice_db: InvoiceDatabase) -> None:
    store = invoice_db.store
    lease = _resume_lease(store, claim, context.run_id)
    # Stop heartbeating first: a beat racing the completion would find the job finished and
    # report a live lease lost. The fenced completion proves the holder alive by itself.
    invoice_db.lease_keeper.drop(lease.job_id)
    try:
        store.complete(lease)
    except LeaseLost as exc:
        raise Failure(
            f"lease lost, stopping: {exc}",
            metadata={"invoice_id": claim.invoice_id, "job_id": str(lease.job_id)},
            allow_retries=False,
        ) from exc
    context.log.info(f"invoice {claim.invoice_id} processed; lock released")


@failure_hook(required_resource_keys={"invoice_db"})
def release_lock_on_failure(context: HookContext) -> None:
    """Release a failed branch's lock at once, so its retry does not wait for the sweep."""
    exc = context.op_exception
    metadata = getattr(exc, "metadata", None) or {}
    job = metadata.get("job_id")
    if job is None:
        return
    job_id = str(getattr(job, "value", job))
    db: InvoiceDatabase = context.resources.invoice_db
    db.lease_keeper.drop(UUID(job_id))
    outcome = db.store.fail(job_id, str(exc), max_attempts=db.max_attempts, retry_base=db.retry_base)
    if outcome is not None:
        context.log.warning(
            f"invoice {outcome.invoice_id}: {outcome.status} after {outcome.attempts} attempt(s)"
            + (
                f", next attempt at {outcome.next_attempt_at.isoformat()}"
                if outcome.status == "failed"
                else ""
            )
        )


def batch_run_key(refs: list[InvoiceRef]) -> str:
    digest = hashlib.sha256(
        "\n".join(sorted(f"{r.invoice_id}:{r.attempt}" for r in refs)).encode()
    ).hexdigest()
    return f"batch:{digest[:24]}"
