"""The review and redrive actions as jobs a person launches from the Dagster UI's Launchpad.

`review_invoice` (approve, reject, not-duplicate, confirm-duplicate) and `requeue_invoices` run
the same code as `invoice-pipeline review ...` and `invoice-pipeline requeue` (review.py): each
invoice under its processing lock, fenced, audited. The audit names the run
(`dagster-run:<id>`, plus the `reviewer` name typed in the config, if any), and the lock is
owned by the run, so the sweep reconciles a review run that died like any other.

Who may act (`launchpad_actor`, fail closed): only a local deployment's runs act (the webserver
has no login: nothing vouches for a typed name); there, with the review page's users file
(INVOICE_PIPELINE_REVIEW_USERS), the reviewer named in the config must be listed and acts only
for that entry's orgs. The engine refuses an action on another org's invoice (`not_their_org`),
writing nothing.

An approved or requeued invoice is due at once: the sensor launches its `process_invoice` run,
which fast-forwards to what is left (post_to_ledger for an approval, everything for a redrive).
A run whose invoices were all refused (busy, or in no state for the action) fails, listing why.
"""

from datetime import timedelta
from enum import Enum
from pathlib import Path

from dagster import Config, Failure, MetadataValue, OpExecutionContext, in_process_executor, job, op
from pydantic import Field

from invoice_pipeline.domain.fields import FIELD_NAMES
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import Actor, TargetFilter, act_on, check_reason_code, statuses_for
from invoice_pipeline.engine.review_records import Action, ActionOutcome
from invoice_pipeline.engine.reviewers import AuthError, load_users
from invoice_pipeline.engine.store import as_uuid
from invoice_pipeline.orchestration.resources import InvoiceDatabase, ReviewAccess
from invoice_pipeline.orchestration.resources.review_access import LOCAL_DEPLOYMENT
from invoice_pipeline.orchestration.run_requests import run_owner

REVIEW_INVOICE = "review_invoice"
REQUEUE_INVOICES = "requeue_invoices"
CORRECT_INVOICE = "correct_invoice"


def run_actor(run_id: str, reviewer: str | None = None, orgs: tuple[str, ...] | None = None) -> Actor:
    """The run acts, under its own owner: the sweep reconciles a dead review run like any other run."""
    owner = run_owner(run_id)
    return Actor(owner + (f" ({reviewer.strip()})" if reviewer and reviewer.strip() else ""), owner, orgs)


def launchpad_actor(run_id: str, reviewer: str, access: ReviewAccess) -> Actor:
    """Who a Launchpad run acts as, failing closed. The webserver has no login, so nothing vouches
    for the name typed into a run's config: only a local (development) deployment's runs act at
    all, whatever its users file says. There, with the review page's users file, the reviewer
    must be listed and acts only for that entry's orgs (`"orgs": []`: none); without one, as the
    deployment's one local user."""
    if access.deployment != LOCAL_DEPLOYMENT:
        raise Failure(
            f"Launchpad review runs of the {access.deployment or 'unknown'} deployment never act: "
            "Dagster's webserver has no login, so nothing vouches for the reviewer's name; "
            "decide on the review page, behind its authentication",
            allow_retries=False,
        )
    name = reviewer.strip()
    if not access.users_file:
        return run_actor(run_id, name)
    try:
        users = load_users(Path(access.users_file), passwords=False)
    except AuthError as exc:
        raise Failure(f"no Launchpad review can run: {exc}", allow_retries=False) from None
    listed = users.get(name)
    if listed is None:
        raise Failure(
            f"reviewer {name!r} is not in the review users file: put your name in the run's "
            "config (reviewer), as the users file lists it, or decide on the review page",
            allow_retries=False,
        )
    return run_actor(run_id, name, listed.orgs)


class ReviewDecision(Enum):
    approve = "approve"
    reject = "reject"
    not_duplicate = "not_duplicate"
    confirm_duplicate = "confirm_duplicate"


class _Targets(Config):
    invoice_ids: list[str] = Field(default=[], description="Invoice ids; or leave empty and filter")
    org: str | None = Field(default=None, description="Only this org's invoices")
    reason_code: str | None = Field(
        default=None, description="Only invoices held for this reason code (e.g. negative_total)"
    )
    older_than_days: float | None = Field(default=None, ge=0, description="Only invoices waiting longer")
    all: bool = Field(default=False, description="No ids and no filter: act on every invoice it applies to")
    note: str = Field(default="", description="Free text for the audit trail (a reject's reason)")
    reviewer: str = Field(default="", description="Your name, recorded beside this run's id")


class ReviewInvoiceConfig(_Targets):
    decision: ReviewDecision = Field(
        description="approve, reject (note = the reason), not_duplicate, confirm_duplicate"
    )


class RequeueConfig(_Targets):
    status: str | None = Field(
        default=None, description="needs_attention, failed or quarantined; unset: all three"
    )


def _filter(config: _Targets, action: Action, status: str | None = None) -> TargetFilter:
    try:
        flt = TargetFilter(
            invoice_ids=tuple(as_uuid(i) for i in config.invoice_ids),
            org_id=config.org or None,
            status=status or None,
            reason=check_reason_code(config.reason_code) if config.reason_code else None,
            older_than=timedelta(days=config.older_than_days) if config.older_than_days is not None else None,
        )
        if flt.status is not None:
            statuses_for(action, flt.status)
    except ValueError as exc:
        raise Failure(str(exc), allow_retries=False) from None
    if not flt.invoice_ids and not flt.has_filter and not config.all:
        raise Failure(
            "give invoice_ids, or a filter (org, reason_code, older_than_days), or all: true",
            allow_retries=False,
        )
    return flt


def _run(
    context: OpExecutionContext,
    invoice_db: InvoiceDatabase,
    access: ReviewAccess,
    action: Action,
    config: _Targets,
    flt: TargetFilter,
) -> None:
    if action == "reject" and not config.note.strip():
        raise Failure("a rejection needs a reason: put it in note", allow_retries=False)

    def log(o: ActionOutcome) -> None:
        if o.done:
            context.log.info(f"{action} {o.invoice_id}: {o.from_status} -> {o.to_status}: {o.message}")
        else:
            context.log.warning(f"{action} {o.invoice_id} refused: {o.message}")

    actor = launchpad_actor(context.run_id, config.reviewer, access)
    outcomes = act_on(invoice_db.store, action, flt, actor, config.note or None, on_outcome=log)
    refused = [o for o in outcomes if not o.done]
    table = "\n".join(
        f"| {o.invoice_id} | {'done' if o.done else 'refused'} | {o.to_status or ''} | {o.message} |"
        for o in outcomes
    )
    context.add_output_metadata(
        {
            "done": len(outcomes) - len(refused),
            "refused": len(refused),
            "outcomes": MetadataValue.md(
                "| invoice | outcome | status | what |\n|---|---|---|---|\n" + table
            ),
        }
    )
    if refused:
        raise Failure(
            f"{len(refused)} of {len(outcomes)} invoice(s) refused: "
            + "; ".join(f"{o.invoice_id}: {o.message}" for o in refused[:20]),
            allow_retries=False,
        )
    if not outcomes:
        context.log.info("no invoice matches")


@op(description="Approve, reject, or decide a suspected duplicate; each invoice under its processing lock.")
def review_invoices(
    context: OpExecutionContext,
    config: ReviewInvoiceConfig,
    invoice_db: InvoiceDatabase,
    review_access: ReviewAccess,
) -> None:
    action: Action = config.decision.value
    _run(context, invoice_db, review_access, action, config, _filter(config, action))


@op(
    description="Redrive dead letters, failed or (after a fix) quarantined invoices: attempts start over, due now."
)
def requeue(
    context: OpExecutionContext,
    config: RequeueConfig,
    invoice_db: InvoiceDatabase,
    review_access: ReviewAccess,
) -> None:
    _run(context, invoice_db, review_access, "requeue", config, _filter(config, "requeue", config.status))


@job(
    name=REVIEW_INVOICE,
    executor_def=in_process_executor,
    description="A person's decision on held invoices (needs_review): approve, reject, not_duplicate, confirm_duplicate.",
    tags={"kind": "review"},
)
def review_invoice_job() -> None:
    review_invoices()


@job(
    name=REQUEUE_INVOICES,
    executor_def=in_process_executor,
    description="Requeue dead letters (needs_attention), failed or fixed quarantined invoices for processing.",
    tags={"kind": "review"},
)
def requeue_invoices_job() -> None:
    requeue()


class CorrectInvoiceConfig(Config):
    """One held invoice's corrected fields; a field left unset keeps its value (an empty string
    clears an optional field). The same function as `invoice-pipeline review correct` and the
    review page: validated and checked for duplicates again, still held until approved."""

    invoice_id: str = Field(description="The held invoice (needs_review) to correct")
    invoice_number: str | None = Field(default=None, description="e.g. INV-2026-0042")
    document_type: str | None = Field(default=None, description="invoice or credit_note")
    issue_date: str | None = Field(default=None, description="YYYY-MM-DD")
    due_date: str | None = Field(default=None, description="YYYY-MM-DD")
    currency: str | None = Field(default=None, description="ISO 4217, e.g. EUR")
    net_total: str | None = Field(default=None, description="e.g. 25.20")
    tax_total: str | None = Field(default=None, description="e.g. 4.79")
    payable_total: str | None = Field(default=None, description="The amount due, e.g. 29.99")
    seller_name: str | None = Field(default=None)
    seller_vat_id: str | None = Field(default=None)
    buyer_name: str | None = Field(default=None)
    po_number: str | None = Field(default=None)
    buyer_vat_id: str | None = Field(default=None)
    payee_iban: str | None = Field(default=None, description="The account the seller asks to be paid into")
    note: str = Field(default="", description="Free text for the audit trail")
    reviewer: str = Field(default="", description="Your name, recorded beside this run's id")

    def changes(self) -> dict[str, str]:
        return {name: value for name in FIELD_NAMES if (value := getattr(self, name)) is not None}


@op(
    description="Correct fields of a held invoice under its processing lock: validated, checked for duplicates again."
)
def correct_fields(
    context: OpExecutionContext,
    config: CorrectInvoiceConfig,
    invoice_db: InvoiceDatabase,
    review_access: ReviewAccess,
) -> None:
    actor = launchpad_actor(context.run_id, config.reviewer, review_access)
    try:
        outcome = correct_invoice(
            invoice_db.store, config.invoice_id, config.changes(), actor, config.note or None
        )
    except ValueError as exc:
        raise Failure(str(exc), allow_retries=False) from None
    context.add_output_metadata(
        {"done": outcome.done, "status": outcome.to_status or "", "what": outcome.message}
    )
    if not outcome.done:
        raise Failure(f"correct {outcome.invoice_id} refused: {outcome.message}", allow_retries=False)
    context.log.info(f"correct {outcome.invoice_id}: {outcome.message}")


@job(
    name=CORRECT_INVOICE,
    executor_def=in_process_executor,
    description="Correct a held invoice's fields (then approve it with review_invoice, or on the review page).",
    tags={"kind": "review"},
)
def correct_invoice_job() -> None:
    correct_fields()


review_jobs = [review_invoice_job, requeue_invoices_job, correct_invoice_job]
