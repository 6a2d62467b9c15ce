"""Business exceptions through the real pipeline, and every action a person takes on them.

The samples are the project's own (invented): negative totals in UBL, CII and Factur-X, a
French avoir sent as an invoice (type 380, BASIC-WL), a due date before the issue date. Each
is processed by the real process_invoice job and must end needs_review with a reason, never
quarantined; then a person's action decides, and the pipeline posts at most once.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest

from invoice_pipeline.domain.review import ReviewPolicy, reason_code
from invoice_pipeline.engine.review import Actor, TargetFilter, act, act_on
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples import review_cases
from invoice_pipeline_tests.engine.review.helpers import (
    SELLER_FR,
    failure_messages,
    make_dead_letter,
    postings,
    render,
    run_batch,
    run_invoice,
    sample,
    sql,
)
from pipeline_support.factories import json_invoice

ALICE = Actor("os-user:alice", "review:alice@test:1")
BOB = Actor("os-user:bob", "review:bob@test:2")


def held(store: InvoiceStore, database_url: str, content: bytes, name: str, org: str = "acme") -> object:
    invoice_id = store.documents.store_document(content, org, name).invoice_id
    result = run_invoice(database_url, invoice_id)
    assert result.success, failure_messages(result)
    return invoice_id


def reasons_of(store: InvoiceStore, invoice_id: object) -> list[str]:
    overview = store.reporting.invoice_overview(invoice_id)  # type: ignore[arg-type]
    assert overview is not None
    return list(overview.review_reasons or [])


@pytest.mark.parametrize("fmt", ["ubl", "cii", "facturx-pdf"])
def test_negative_invoice_is_held_for_review_not_quarantined(
    fmt: str, database_url: str, store: InvoiceStore
) -> None:
    inv = review_cases.negative_invoice(sample(f"NEG-{fmt}"))
    invoice_id = held(store, database_url, render(inv, fmt), f"negative.{fmt}")
    state = store.documents.invoice_state(invoice_id)  # type: ignore[arg-type]
    assert state is not None and state.status == "needs_review" and state.quarantine_code is None
    (reason,) = reasons_of(store, invoice_id)
    assert reason.startswith("negative_total: payable -120.00 EUR on an invoice (type 380)")
    assert postings(database_url, invoice_id) == 0  # type: ignore[arg-type]
    assert store.documents.load_approval(invoice_id) is None  # type: ignore[arg-type]


def test_french_avoir_sent_as_invoice_is_held(database_url: str, store: InvoiceStore) -> None:
    pdf = review_cases.avoir_basic_wl_pdf(sample("AV-2026-0007", seller=SELLER_FR))
    invoice_id = held(store, database_url, pdf, "avoir.pdf")
    assert store.documents.invoice_state(invoice_id).status == "needs_review"  # type: ignore[arg-type, union-attr]
    assert [reason_code(r) for r in reasons_of(store, invoice_id)] == ["negative_total"]
    text = store.documents.load_extracted_text(invoice_id)  # type: ignore[arg-type]
    assert text is not None and "basicwl" in (text.structured or ""), "read from the embedded BASIC-WL CII"


def test_due_before_issue_is_held(database_url: str, store: InvoiceStore) -> None:
    inv = review_cases.due_before_issue(sample("DUE-1"))
    invoice_id = held(store, database_url, render(inv, "ubl"), "due.xml")
    assert store.documents.invoice_state(invoice_id).status == "needs_review"  # type: ignore[arg-type, union-attr]
    (reason,) = reasons_of(store, invoice_id)
    assert reason.startswith("due_before_issue: due 2026-10-23 is 10 day(s) before issue 2026-11-02")


def test_approve_posts_exactly_once_through_the_pipeline(database_url: str, store: InvoiceStore) -> None:
    invoice_id = held(
        store, database_url, render(review_cases.negative_invoice(sample("NEG-A")), "ubl"), "a.xml"
    )
    outcome = act(store, "approve", invoice_id, ALICE, "refund agreed with the seller")  # type: ignore[arg-type]
    assert outcome.done and (outcome.from_status, outcome.to_status) == ("needs_review", "pending")
    approval = store.documents.load_approval(invoice_id)  # type: ignore[arg-type]
    assert approval is not None and approval.decision == "approved"
    assert approval.rule == "approved by os-user:alice: refund agreed with the seller"

    assert run_invoice(database_url, invoice_id).success
    state = store.documents.invoice_state(invoice_id)  # type: ignore[arg-type]
    assert state is not None and state.status == "processed"
    posting = store.documents.load_ledger_posting(invoice_id)  # type: ignore[arg-type]
    assert posting is not None and posting.amount == Decimal("-120.00")
    assert store.documents.count_step_executions(invoice_id, "extract_text") == 1, (
        "the approved run fast-forwarded"
    )  # type: ignore[arg-type]

    # Approving again, or running again, changes nothing.
    again = act(store, "approve", invoice_id, BOB)  # type: ignore[arg-type]
    assert not again.done and "it is processed" in again.message
    assert run_invoice(database_url, invoice_id).success
    assert postings(database_url, invoice_id) == 1  # type: ignore[arg-type]

    (audit,) = store.review.review_history(invoice_id)  # type: ignore[arg-type]
    assert (audit.action, audit.actor, audit.note) == (
        "approve",
        "os-user:alice",
        "refund agreed with the seller",
    )
    assert [reason_code(r) for r in audit.review_reasons] == ["negative_total"], (
        "the reasons live on in the audit"
    )
    assert audit.job_id in {j.job_id for j in store.claims.job_history(invoice_id)}, (
        "it held the processing lock"
    )  # type: ignore[arg-type]


def test_reject_with_a_reason_is_never_posted(database_url: str, store: InvoiceStore) -> None:
    invoice_id = held(
        store, database_url, render(review_cases.due_before_issue(sample("DUE-R")), "cii"), "r.xml"
    )
    with pytest.raises(ValueError, match="needs a reason"):
        act(store, "reject", invoice_id, ALICE, "  ")  # type: ignore[arg-type]
    outcome = act(store, "reject", invoice_id, ALICE, "wrong payment terms; asked for a corrected invoice")  # type: ignore[arg-type]
    assert outcome.done and outcome.to_status == "processed"
    approval = store.documents.load_approval(invoice_id)  # type: ignore[arg-type]
    assert approval is not None and approval.decision == "rejected" and "wrong payment terms" in approval.rule
    assert run_invoice(database_url, invoice_id).success
    assert postings(database_url, invoice_id) == 0  # type: ignore[arg-type]


def test_auto_approval_limit_is_per_org(database_url: str, store: InvoiceStore) -> None:
    store.review.set_review_policy("strict", ReviewPolicy(auto_approve_limit=Decimal("100")), "os-user:test")
    assert store.review.review_policies(["strict", "relaxed"]) == {
        "strict": ReviewPolicy(auto_approve_limit=Decimal("100")),
        "relaxed": ReviewPolicy(),
    }
    over = held(store, database_url, json_invoice("LIM-1", total="119.00"), "l.json", org="strict")
    assert [reason_code(r) for r in reasons_of(store, over)] == ["over_approval_limit"]
    fine = held(store, database_url, json_invoice("LIM-1", total="119.00"), "l.json", org="relaxed")
    assert store.documents.invoice_state(fine).status == "processed"  # type: ignore[arg-type, union-attr]
    assert postings(database_url, fine) == 1  # type: ignore[arg-type]


def _suspected_pair(database_url: str, store: InvoiceStore) -> tuple[object, object]:
    original = held(store, database_url, json_invoice("INV-5000", total="238.00"), "orig.json")
    # The vendor's new billing system dropped the number's prefix: a copy only by tolerance.
    copy = held(store, database_url, json_invoice("5000", total="238.00"), "copy.json")
    decision = store.dedupe.load_duplicate_decision(copy)  # type: ignore[arg-type]
    assert decision is not None and decision.status == "suspected" and decision.original_id == original
    return original, copy


def test_confirm_duplicate_rejects_and_never_posts(database_url: str, store: InvoiceStore) -> None:
    original, copy = _suspected_pair(database_url, store)
    refused = act(store, "approve", copy, ALICE)  # type: ignore[arg-type]
    assert (
        not refused.done and "suspected duplicate" in refused.message and "not-duplicate" in refused.message
    )
    outcome = act(store, "confirm_duplicate", copy, ALICE, "same invoice, new numbering")  # type: ignore[arg-type]
    assert outcome.done and outcome.to_status == "processed"
    decision = store.dedupe.load_duplicate_decision(copy)  # type: ignore[arg-type]
    assert decision is not None and decision.status == "duplicate" and decision.group_id is not None
    assert store.reporting.offending_ids("check_groups_without_one_original") == []
    assert run_invoice(database_url, copy).success
    assert postings(database_url, copy) == 0  # type: ignore[arg-type]
    assert store.reporting.offending_ids("check_copies_posted") == []


def test_not_duplicate_releases_an_original_that_continues(database_url: str, store: InvoiceStore) -> None:
    original, copy = _suspected_pair(database_url, store)
    outcome = act(store, "not_duplicate", copy, BOB, "two deliveries, two invoices")  # type: ignore[arg-type]
    assert outcome.done and outcome.to_status == "pending", outcome.message
    decision = store.dedupe.load_duplicate_decision(copy)  # type: ignore[arg-type]
    assert decision is not None and decision.status == "original" and decision.original_id is None
    assert run_invoice(database_url, copy).success
    assert store.documents.invoice_state(copy).status == "processed"  # type: ignore[arg-type, union-attr]
    assert postings(database_url, copy) == 1  # type: ignore[arg-type]
    # Later copies now match it, too: it is an original like any other.
    third = held(store, database_url, json_invoice("5000", total="238.00", po_number="PO-2"), "third.json")
    third_decision = store.dedupe.load_duplicate_decision(third)  # type: ignore[arg-type]
    assert third_decision is not None and third_decision.original_id == copy


def test_requeue_redrives_a_dead_letter(database_url: str, store: InvoiceStore) -> None:
    invoice_id = store.documents.store_document(json_invoice("DL-1"), "acme", "dl.json").invoice_id
    assert not make_dead_letter(database_url, invoice_id).success
    state = store.documents.invoice_state(invoice_id)
    assert state is not None and state.status == "needs_attention"
    # Launching the pipeline on a dead letter does not redrive it: it says how to.
    by_hand = run_invoice(database_url, invoice_id)
    assert not by_hand.success and "requeue_invoices" in failure_messages(by_hand)
    assert store.documents.invoice_state(invoice_id).status == "needs_attention"  # type: ignore[union-attr]
    outcome = act(store, "requeue", invoice_id, ALICE, "ledger is back")
    assert outcome.done and outcome.to_status == "pending" and "redrive 1" in outcome.message
    assert sql(database_url, "SELECT attempts, redrives FROM invoices WHERE id = %s", (invoice_id,)) == [
        (0, 1)
    ]
    assert run_invoice(database_url, invoice_id).success
    state = store.documents.invoice_state(invoice_id)
    assert state is not None and state.status == "processed" and state.attempts == 1
    assert postings(database_url, invoice_id) == 1
    assert store.documents.count_step_executions(invoice_id, "extract_text") == 1, (
        "the redrive fast-forwarded"
    )


def test_requeue_of_a_quarantined_invoice_reads_it_again(database_url: str, store: InvoiceStore) -> None:
    invoice_id = store.documents.store_document(
        json_invoice("Q-1", currency="XYZ"), "acme", "q.json"
    ).invoice_id
    run_invoice(database_url, invoice_id)
    assert store.documents.invoice_state(invoice_id).status == "quarantined"  # type: ignore[union-attr]
    outcome = act(store, "requeue", invoice_id, ALICE, "currency table fixed")
    assert outcome.done and "was: unknown_currency" in outcome.message
    assert (
        store.documents.load_extracted_text(invoice_id) is None
        and store.documents.load_fields(invoice_id) is None
    )
    run_invoice(database_url, invoice_id)
    # Still unusable (nothing was fixed here), but read afresh rather than fast-forwarded.
    assert store.documents.count_step_executions(invoice_id, "extract_text") == 2
    assert store.documents.invoice_state(invoice_id).status == "quarantined"  # type: ignore[union-attr]


def test_actions_refuse_what_they_do_not_apply_to_without_taking_a_lock(
    database_url: str, store: InvoiceStore
) -> None:
    invoice_id = held(store, database_url, json_invoice("OK-1"), "ok.json")
    jobs = len(store.claims.job_history(invoice_id))  # type: ignore[arg-type]
    for action in ("approve", "reject", "not_duplicate", "confirm_duplicate", "requeue"):
        outcome = act(store, action, invoice_id, ALICE, "x")  # type: ignore[arg-type]
        assert not outcome.done and "it is processed" in outcome.message
    assert len(store.claims.job_history(invoice_id)) == jobs  # type: ignore[arg-type]
    nobody = act(store, "approve", "00000000-0000-0000-0000-000000000000", ALICE)
    assert not nobody.done and nobody.message == "no such invoice"


def test_an_action_never_races_the_lock_holder(database_url: str, store: InvoiceStore) -> None:
    invoice_id = held(
        store, database_url, render(review_cases.negative_invoice(sample("BUSY")), "ubl"), "b.xml"
    )
    lease = store.review.take_review_lock(invoice_id, BOB.owner)  # type: ignore[arg-type]
    assert lease is not None
    busy = act(store, "approve", invoice_id, ALICE)  # type: ignore[arg-type]
    assert not busy.done and busy.message.startswith("busy: held by job") and BOB.owner in busy.message
    # Bob's write goes through; Alice's next try finds it decided.
    assert store.review.review_reject(lease, BOB.name, "not ours").done
    late = act(store, "approve", invoice_id, ALICE)  # type: ignore[arg-type]
    assert not late.done and "it is processed" in late.message
    assert store.claims.current_holder(invoice_id) is None  # type: ignore[arg-type]


def test_bulk_actions_by_filter(database_url: str, store: InvoiceStore) -> None:
    negative = review_cases.negative_invoice(sample("BULK-0"))
    ids = {
        org: [
            store.documents.store_document(
                render(replace(negative, invoice_number=f"BULK-{org}-{i}"), "ubl"), org, f"{i}.xml"
            ).invoice_id
            for i in range(3)
        ]
        for org in ("north", "south")
    }
    late = store.documents.store_document(
        render(review_cases.due_before_issue(sample("BULK-D")), "ubl"), "north", "d.xml"
    )
    assert run_batch(database_url, [*ids["north"], *ids["south"], late.invoice_id]).success
    sql(
        database_url,
        "UPDATE invoices SET review_since = now() - interval '10 days' WHERE id = ANY(%s)",
        (ids["north"][:2],),
    )
    by_age = act_on(store, "approve", TargetFilter(org_id="north", older_than=timedelta(days=7)), ALICE)
    assert {o.invoice_id for o in by_age} == set(ids["north"][:2]) and all(o.done for o in by_age)
    by_reason = act_on(store, "reject", TargetFilter(reason="due_before_issue"), ALICE, "terms")
    assert [o.invoice_id for o in by_reason] == [late.invoice_id]
    with pytest.raises(ValueError, match="applies to needs_review"):
        act_on(store, "approve", TargetFilter(status="quarantined"), ALICE)
    rest = act_on(
        store, "reject", TargetFilter(org_id="south", reason="negative_total"), BOB, "duplicate refund"
    )
    assert len(rest) == 3 and all(o.done for o in rest)
    queue = store.review.review_targets(("needs_review",))
    assert [t.invoice_id for t in queue] == [ids["north"][2]]


def test_the_audit_trail_is_append_only(database_url: str, store: InvoiceStore) -> None:
    invoice_id = held(
        store, database_url, render(review_cases.negative_invoice(sample("AUD")), "ubl"), "aud.xml"
    )
    act(store, "reject", invoice_id, ALICE, "no")  # type: ignore[arg-type]
    import psycopg

    for statement in ("UPDATE review_actions SET actor = 'mallory'", "DELETE FROM review_actions"):
        with pytest.raises(psycopg.errors.RestrictViolation):
            sql(database_url, statement)
