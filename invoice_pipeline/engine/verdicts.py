"""The verdict rules: approve, reject or hold an invoice, for the approval stage (engine/stages.py)
and for a person's correction (engine/corrections.py) alike, so that a corrected invoice is held
for the same reasons, in the same order, as the pipeline would hold it.

The payment decision's facts are read here without locks, for what the approval holds on early
and what a correction shows; only the posting decides who is paid (store/payments.py), on facts
it reads again under the identity locks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from invoice_pipeline.domain.corrections import CORRECTED
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.payment import PaymentFacts, identity_keys, payee_reasons
from invoice_pipeline.domain.review import SUSPECTED_DUPLICATE, ReviewPolicy, review_reasons
from invoice_pipeline.engine.records import DuplicateDecision, MatchOutcome, Verdict
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.engine.store.corrections import HeldFor


def verdict_for(
    fields: InvoiceFields,
    status: str,
    original: UUID | None,
    reasons: Sequence[str],
    policy: ReviewPolicy,
    who_is_paid: Sequence[str] = (),
) -> Verdict:
    """Approve, reject or hold: exact copies are rejected, business exceptions go to a person, and
    so does an invoice whose payee the vendor registry does not confirm (`who_is_paid`)."""
    if status == "duplicate":
        return Verdict("rejected", f"duplicate of {original}")
    held = [*review_reasons(fields, policy), *who_is_paid]
    if status == "suspected":
        held.insert(0, f"{SUSPECTED_DUPLICATE} of {original}: {'; '.join(reasons)}")
    if held:
        return Verdict("held", "; ".join(held), tuple(held))
    return Verdict(
        "approved", "auto-approved: valid, not a duplicate, no business exception, vendor confirmed"
    )


def payment_facts(
    store: InvoiceStore,
    found: Mapping[UUID, tuple[str, InvoiceFields]],
    policies: Mapping[str, ReviewPolicy],
    decisions: Mapping[UUID, DuplicateDecision] | None = None,
) -> dict[UUID, PaymentFacts]:
    """The payment decision's facts for these invoices, read now, without locks: what the
    approval stage holds on early, and what a correction shows. Only the posting decides
    (store/payments.py), on facts it reads again under the identity locks."""
    keys = [(org, ident) for org, fields in found.values() for ident in identity_keys(fields)]
    registry = store.vendors.vendors_named_by(keys)
    profiles = store.vendors.org_profiles(sorted({org for org, _ in found.values()}))
    out: dict[UUID, PaymentFacts] = {}
    for invoice_id, (org, fields) in found.items():
        decision = (decisions or {}).get(invoice_id)
        out[invoice_id] = PaymentFacts(
            org,
            fields,
            tuple(registry.get(org, ())),
            profiles[org],
            policies[org],
            decision.status if decision else "original",
            decision.original_id if decision else None,
        )
    return out


def who_is_paid(facts: PaymentFacts) -> list[str]:
    """Why whom the invoice pays is not confirmed, as the texts a verdict holds it for."""
    return [r.text for r in payee_reasons(facts)]


def held_after_correction(policy: ReviewPolicy, reviewer: str, paid: Sequence[str] = ()) -> HeldFor:
    """The reasons a corrected invoice stays held: the pipeline's own (`verdict_for`, as the
    approval stage computes them, a match being at most a suspicion: a person confirms it, and
    the vendor registry's word on who is paid, `paid`), then `corrected`."""

    def reasons(fields: InvoiceFields, outcome: MatchOutcome | None) -> list[str]:
        if outcome is None:
            verdict = verdict_for(fields, "original", None, (), policy, paid)
        else:
            verdict = verdict_for(fields, "suspected", outcome.original_id, outcome.reasons, policy, paid)
        corrected = [name for name, source in fields.sources.items() if source.source.startswith("review:")]
        return [
            *verdict.reasons,
            f"{CORRECTED}: {', '.join(sorted(corrected))} given by {reviewer}; "
            "approve to post it as corrected, or reject it",
        ]

    return reasons
