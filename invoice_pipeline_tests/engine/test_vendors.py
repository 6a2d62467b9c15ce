"""Who is paid (issue 37), through the real pipeline: a legible page is held, not quarantined, and
can be corrected; the seller is confirmed by the org's vendor registry, never guessed; the org's
own identity is never the seller's; a changed IBAN is held on every format; the posting says
whom it pays, for which invoice, into which account.

Each test names the mechanism it guards; removing that mechanism makes it fail (closing note of
issue 37 lists the sabotage runs).
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from uuid import UUID

from invoice_pipeline.domain.fields import FieldSource, InvoiceFields
from invoice_pipeline.domain.identity import (
    BANK_DETAILS_CHANGED,
    VENDOR_UNCONFIRMED,
    Identifier,
    OrgProfile,
    normalise,
    without_own_identity,
)
from invoice_pipeline.domain.payment import (
    OWN_IDENTITY_AS_SELLER,
    POSSIBLE_IMPERSONATION,
    own_identity_reasons,
)
from invoice_pipeline.domain.review import CORRECTED, FIELD_UNREAD, ReviewPolicy
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.engine.vendors import read_vendor_csv
from invoice_pipeline.samples.render import Party
from invoice_pipeline_tests.engine.review.helpers import (
    SELLER_DE,
    import_vendor_master,
    postings,
    process_documents,
    render,
    run_batch,
    sample,
    sql,
    status_and_reasons,
)
from pipeline_support.factories import json_invoice

ALICE = Actor("os-user:alice", "review:alice@test:1")
IBAN_A = "DE89370400440532013000"
IBAN_B = "GB82WEST12345698765432"


def _posting(database_url: str, invoice_id: UUID) -> tuple[object, ...]:
    rows = sql(
        database_url,
        "SELECT v.name, p.invoice_number, p.issue_date, p.due_date, p.iban, p.amount, v.source "
        "FROM ledger_postings p JOIN vendors v ON v.id = p.vendor_id WHERE p.invoice_id = %s",
        (invoice_id,),
    )
    assert len(rows) == 1, f"expected one posting with a vendor, found {rows}"
    return tuple(rows[0])


def test_a_legible_page_without_its_total_is_held_corrected_and_posted_as_typed(
    database_url: str, store: InvoiceStore
) -> None:
    """Mechanism: validation holds a page-read invoice with a reason per unread field instead of
    quarantining it (stages.validate); a correction then decides it, approval posts it."""
    import_vendor_master(store, "acme", f"name,vat_id\n{SELLER_DE.name},{SELLER_DE.vat_id}\n")
    page = render(dataclasses.replace(sample("INV-9001"), omit_payable=True), "pdf")
    (held,) = process_documents(database_url, store, "acme", [(page, "no-total.pdf")])
    status, codes = status_and_reasons(database_url, held)
    assert status == "needs_review", f"a legible page must be held for a person, not {status}"
    assert FIELD_UNREAD in codes
    reasons = store.documents.review_reasons(held) or []
    assert any("payable_total" in r for r in reasons), reasons
    # Nothing to compare yet: approving unread fields is refused until a person types them.
    refused = act(store, "approve", held, ALICE)
    assert not refused.done and "correct the missing fields" in refused.message

    corrected = correct_invoice(store, held, {"payable_total": "119.00"}, ALICE)
    assert corrected.done, corrected.message
    assert status_and_reasons(database_url, held) == ("needs_review", [CORRECTED])
    assert act(store, "approve", held, ALICE).done
    assert run_batch(database_url, [held]).success
    name, number, _, _, _, amount, _ = _posting(database_url, held)
    assert (name, number, amount) == (SELLER_DE.name, "INV-9001", Decimal("119.00"))


def test_a_page_read_seller_not_in_the_registry_is_held_and_approval_registers_it(
    database_url: str, store: InvoiceStore
) -> None:
    """Mechanism: the payment decision (domain/payment.py) holds an unconfirmed page-read seller; the approved posting
    registers it (source approval, audited), so its next invoice posts by itself."""
    (first,) = process_documents(database_url, store, "acme", [(render(sample("INV-9101"), "pdf"), "a.pdf")])
    assert status_and_reasons(database_url, first) == ("needs_review", [VENDOR_UNCONFIRMED])
    assert postings(database_url, first) == 0
    assert store.vendors.list_vendors("acme") == []

    assert act(store, "approve", first, ALICE).done
    assert run_batch(database_url, [first]).success
    name, *_, source = _posting(database_url, first)
    assert (name, source) == (SELLER_DE.name, "approval")
    (vendor,) = store.vendors.list_vendors("acme")
    assert vendor.has("vat", SELLER_DE.vat_id)
    events = store.vendors.vendor_events("acme", vendor.vendor_id)
    assert events[0][0] == "registered" and events[0][2] == ALICE.name and events[0][3] == first

    (second,) = process_documents(database_url, store, "acme", [(render(sample("INV-9102"), "pdf"), "b.pdf")])
    assert status_and_reasons(database_url, second) == ("processed", [])
    assert postings(database_url, second) == 1
    # Another org's registry is its own: the same seller is unconfirmed there.
    (elsewhere,) = process_documents(
        database_url, store, "globex", [(render(sample("INV-9103"), "pdf"), "c.pdf")]
    )
    assert status_and_reasons(database_url, elsewhere) == ("needs_review", [VENDOR_UNCONFIRMED])


def test_a_name_alone_confirms_no_vendor(database_url: str, store: InvoiceStore) -> None:
    """Mechanism: only an identifier in the seller's position confirms; a registered name does not:
    a page in a registered vendor's name with another VAT id is a possible impersonation (issue 52)."""
    import_vendor_master(store, "acme", "name,vat_id\nNordwind Logistik GmbH,DE999999995\n")
    (held,) = process_documents(database_url, store, "acme", [(render(sample("INV-9201"), "pdf"), "a.pdf")])
    assert status_and_reasons(database_url, held) == ("needs_review", [POSSIBLE_IMPERSONATION])


def test_a_changed_iban_is_held_on_a_structured_invoice_too(database_url: str, store: InvoiceStore) -> None:
    """Mechanism: the payment decision's IBAN check (bank_details_changed), for every format."""
    import_vendor_master(store, "acme", f"name,vat_id,iban\nAcme Supplies GmbH,DE123456788,{IBAN_A}\n")
    known, changed = process_documents(
        database_url,
        store,
        "acme",
        [
            (json_invoice("INV-9301", payee_iban=IBAN_A), "a.json"),
            (json_invoice("INV-9302", payee_iban=IBAN_B), "b.json"),
        ],
    )
    assert status_and_reasons(database_url, known) == ("processed", [])
    *_, iban, _, _ = _posting(database_url, known)
    assert iban == IBAN_A
    assert status_and_reasons(database_url, changed) == ("needs_review", [BANK_DETAILS_CHANGED])
    assert postings(database_url, changed) == 0
    reasons = store.documents.review_reasons(changed) or []
    assert IBAN_B in reasons[0] and IBAN_A in reasons[0]

    # A person who checked the change approves it: the account is added to the vendor, audited.
    assert act(store, "approve", changed, ALICE).done
    assert run_batch(database_url, [changed]).success
    (vendor,) = store.vendors.list_vendors("acme")
    assert vendor.has("iban", IBAN_B)
    assert any(
        e[0] == "identifier_added" and IBAN_B in e[1]
        for e in store.vendors.vendor_events("acme", vendor.vendor_id)
    )


def test_a_correction_decides_who_is_paid_again(database_url: str, store: InvoiceStore) -> None:
    """Mechanism: a correction re-checks who is paid for the fields as corrected
    (engine/corrections.py, issue 53). Held for a changed IBAN, corrected to the vendor's known
    account: held only as corrected. Corrected back to the unknown account: bank_details_changed
    again, beside corrected, so the person approving sees what the pipeline would have shown."""
    import_vendor_master(store, "acme", f"name,vat_id,iban\nAcme Supplies GmbH,DE123456788,{IBAN_A}\n")
    (held,) = process_documents(
        database_url, store, "acme", [(json_invoice("INV-9311", payee_iban=IBAN_B), "a.json")]
    )
    assert status_and_reasons(database_url, held) == ("needs_review", [BANK_DETAILS_CHANGED])

    assert correct_invoice(store, held, {"payee_iban": IBAN_A}, ALICE).done
    assert status_and_reasons(database_url, held) == ("needs_review", [CORRECTED])

    assert correct_invoice(store, held, {"payee_iban": IBAN_B}, ALICE).done
    assert status_and_reasons(database_url, held) == ("needs_review", [BANK_DETAILS_CHANGED, CORRECTED])
    reasons = store.documents.review_reasons(held) or []
    assert IBAN_B in reasons[0] and IBAN_A in reasons[0], reasons
    assert postings(database_url, held) == 0


def test_a_first_einvoice_registers_its_vendor_unless_the_policy_holds_it(
    database_url: str, store: InvoiceStore
) -> None:
    """Mechanism: the org policy register_einvoice_vendors, and registration at posting."""
    first, same_chunk = process_documents(
        database_url,
        store,
        "acme",
        [(json_invoice("INV-9401", payee_iban=IBAN_A), "a.json"), (json_invoice("INV-9403"), "c.json")],
    )
    assert status_and_reasons(database_url, first) == ("processed", [])
    # Two invoices of one new vendor in a chunk register it once, and both post to it.
    assert len(store.vendors.list_vendors("acme")) == 1
    assert _posting(database_url, same_chunk)[0] == "Acme Supplies GmbH"
    assert sql(database_url, "SELECT count(DISTINCT vendor_id), count(*) FROM ledger_postings")[0] == (1, 2)
    name, number, issue, due, iban, amount, source = _posting(database_url, first)
    assert (name, number, str(issue), str(due), iban, amount, source) == (
        "Acme Supplies GmbH",
        "INV-9401",
        "2026-11-02",
        "2026-12-02",
        IBAN_A,
        Decimal("119.00"),
        "e-invoice",
    )
    store.review.set_review_policy("strict", ReviewPolicy(register_einvoice_vendors=False), "test")
    (held,) = process_documents(database_url, store, "strict", [(json_invoice("INV-9402"), "b.json")])
    assert status_and_reasons(database_url, held) == ("needs_review", [VENDOR_UNCONFIRMED])
    assert store.vendors.list_vendors("strict") == []


def test_the_orgs_own_identity_is_never_taken_for_the_sellers(database_url: str, store: InvoiceStore) -> None:
    """Mechanism: without_own_identity in extract_fields. The page's seller-position VAT id is
    the org's own (as when the reader takes the buyer's block for the seller's); a vendor once
    registered under it by mistake must not make the invoice post. (Neither the import nor
    `org profile add` lets the two meet any more; a registry from before they refused it can
    still hold such a row, written here as it was.)"""
    own = Party("Maison Verte Paysage SAS", "FR36345678908", "12 avenue Foch", "75016", "Paris", "FR")
    import_vendor_master(store, "maison", "name,vat_id\nMislabelled Vendor,FR36345678908\n")
    sql(
        database_url,
        "INSERT INTO org_identities (org_id, kind, value, shown, source, added_by)"
        " VALUES ('maison', 'vat', 'FR36345678908', 'FR 36345678908', 'test', 'test') RETURNING value",
    )
    (held,) = process_documents(
        database_url, store, "maison", [(render(sample("INV-9501", seller=own), "pdf"), "a.pdf")]
    )
    fields = store.documents.load_fields(held)
    assert fields is not None and fields.seller_vat_id is None
    assert "org's own" in (fields.sources["seller_vat_id"].reason or "")
    assert status_and_reasons(database_url, held) == ("needs_review", [VENDOR_UNCONFIRMED])
    assert postings(database_url, held) == 0


def test_own_identity_is_dropped_in_any_language_and_the_page_iban_is_the_sellers() -> None:
    profile = OrgProfile(
        "maison",
        (
            Identifier("vat", normalise("vat", "FR36345678908"), "FR36345678908"),
            Identifier("name", normalise("name", "Maison Verte Paysage"), "Maison Verte Paysage"),
            Identifier("iban", IBAN_B, IBAN_B),
        ),
    )
    page = FieldSource("pdf-text: label", 0.8)
    fields = InvoiceFields(
        seller_name="MAISON  VERTE paysage",
        seller_vat_id="fr 363 456 789 08",
        sources={"seller_name": page, "seller_vat_id": page},
    )
    text = (
        f"Prélèvement sur votre compte {IBAN_B[:4]} {IBAN_B[4:8]} {IBAN_B[8:]}\nBankverbindung IBAN {IBAN_A}"
    )
    cleaned = without_own_identity(fields, profile, text)
    assert cleaned.seller_name is None and cleaned.seller_vat_id is None
    assert cleaned.payee_iban == IBAN_A
    # Structured data keeps its own word, and the payment decision never pays the org itself:
    # it holds the invoice (issue 52) instead of paying, or registering, whoever else it names.
    structured = InvoiceFields(payee_iban=IBAN_B, sources={"payee_iban": FieldSource("/Invoice/x")})
    assert without_own_identity(structured, profile, None) == structured
    (own,) = own_identity_reasons(structured, profile)
    assert own.code == OWN_IDENTITY_AS_SELLER and not own.vouchable


def test_a_vendor_csv_with_a_bad_iban_imports_nothing() -> None:
    try:
        read_vendor_csv("name,iban\nGood GmbH,DE89370400440532013000\nBad GmbH,DE89370400440532013001\n")
    except ValueError as exc:
        assert "line 3" in str(exc) and "IBAN" in str(exc)
    else:
        raise AssertionError("a bad IBAN must refuse the file")


def test_a_seller_known_by_name_only_is_registered_once(database_url: str, store: InvoiceStore) -> None:
    """A page without a VAT id or IBAN can never confirm its seller (every invoice is held), but
    approving two of them registers one vendor, not two: the second is paid as the vendor the
    first registered, known by its name alone, since nothing tells the two apart and it asks for
    no account (domain/payment.decide_payment)."""
    nameless = dataclasses.replace(SELLER_DE, vat_id=None)
    ids = process_documents(
        database_url,
        store,
        "acme",
        [(render(sample(f"INV-96{n:02d}", seller=nameless), "pdf"), f"n{n}.pdf") for n in (1, 2)],
    )
    for invoice_id in ids:
        assert status_and_reasons(database_url, invoice_id) == ("needs_review", [VENDOR_UNCONFIRMED])
        assert act(store, "approve", invoice_id, ALICE).done
        assert run_batch(database_url, [invoice_id]).success
    (vendor,) = store.vendors.list_vendors("acme")
    assert vendor.name == SELLER_DE.name and [i.kind for i in vendor.identifiers] == ["name"]
    assert sql(database_url, "SELECT count(DISTINCT vendor_id), count(*) FROM ledger_postings")[0] == (1, 2)
