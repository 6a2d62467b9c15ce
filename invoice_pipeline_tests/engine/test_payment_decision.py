"""Money decided at posting, under the lock (issue 52): who is paid is decided in the fenced
transaction that posts, under advisory locks on the invoice's identity keys, from the registry
of that moment; a person's approval re-decides and vouches only for what they were shown.

Each test is one attack from the issue, through the real pipeline (the Dagster batch job, in
process) on a real PostgreSQL. Companies, VAT ids and IBANs are made up (check digits valid).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.domain.identity import BANK_DETAILS_CHANGED, VENDOR_UNCONFIRMED, Identifier, normalise
from invoice_pipeline.domain.payment import (
    IBAN_INVALID,
    OWN_IDENTITY_AS_SELLER,
    POSSIBLE_IMPERSONATION,
    VENDOR_IDENTITY_CONFLICT,
)
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.engine.store.review import REASONS_CHANGED
from invoice_pipeline.engine.vendors import read_vendor_csv
from invoice_pipeline.samples.render import Party
from invoice_pipeline_tests.engine.review.helpers import (
    failure_messages,
    import_vendor_master,
    postings,
    process_documents,
    render,
    run_batch,
    run_ok,
    sample,
    sql,
    status_and_reasons,
)
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import blocks_someone, wait_for

ALICE = Actor("os-user:alice", "review:alice@test:1")
IBAN_A = "DE89370400440532013000"
IBAN_B = "GB82WEST12345698765432"
VAT = "DE136695976"  # check digits valid
OTHER_VAT = "DE812871812"  # check digits valid, another company


def _paid_into(database_url: str, invoice_id: UUID) -> list[tuple[Any, ...]]:
    return sql(
        database_url,
        "SELECT iban, vendor_id, registered_name, registered_vat_id, printed_seller_name, printed_seller_vat_id "
        "FROM ledger_postings WHERE invoice_id = %s",
        (invoice_id,),
    )


def test_one_chunk_cannot_register_a_vendor_and_pay_its_second_iban(
    database_url: str, store: InvoiceStore
) -> None:
    """A registry read once per chunk: two e-invoices of a vendor not yet registered, same VAT
    id, IBANs A and B, in ONE chunk. The first registers the vendor with A and is paid; the
    second is decided after it, in the same transaction, and is held: B is not the vendor's."""
    first, second = process_documents(
        database_url,
        store,
        "acme",
        [
            (json_invoice("INV-7001", vat_id=VAT, payee_iban=IBAN_A), "a.json"),
            (json_invoice("INV-7002", vat_id=VAT, payee_iban=IBAN_B), "b.json"),
        ],
    )
    assert status_and_reasons(database_url, first) == ("processed", [])
    assert status_and_reasons(database_url, second) == ("needs_review", [BANK_DETAILS_CHANGED])
    assert postings(database_url, second) == 0
    (vendor,) = store.vendors.list_vendors("acme")
    assert vendor.of_kind("iban") == [IBAN_A]


def test_a_registration_racing_the_posting_is_seen_by_it(database_url: str, store: InvoiceStore) -> None:
    """Two transactions racing for a vendor's first registration: another one (here the test's
    own, in the role of a concurrent posting) registers the vendor with IBAN A under the VAT id's
    identity lock and has not committed yet. The posting of an e-invoice with the same VAT id and
    IBAN B waits on that lock, then reads the registry as it is after the commit, and holds.
    Without the identity locks it reads no vendor, registers its own and pays B."""
    content = json_invoice("INV-7101", vat_id=VAT, payee_iban=IBAN_B)
    invoice = store.documents.store_document(content, "acme", "b.json").invoice_id
    holder = psycopg.connect(database_url)
    vat = Identifier("vat", normalise("vat", VAT), VAT)
    store.vendors.lock_identities(holder, [("acme", vat)])
    (vendor_id,) = holder.execute(
        "INSERT INTO vendors (org_id, name, source, created_by) VALUES ('acme', 'Acme Supplies GmbH', 'import', 'test') "
        "RETURNING id"
    ).fetchone() or (None,)
    holder.cursor().executemany(
        "INSERT INTO vendor_identifiers (org_id, vendor_id, kind, value, shown, source, added_by) "
        "VALUES ('acme', %s, %s, %s, %s, 'import', 'test')",
        [(vendor_id, "vat", vat.value, VAT), (vendor_id, "iban", IBAN_A, IBAN_A)],
    )
    (holder_pid,) = holder.execute("SELECT pg_backend_pid()").fetchone() or (0,)
    outcome: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: outcome.update(result=run_batch(database_url, [invoice])))
    worker.start()
    try:
        wait_for(
            lambda: blocks_someone(database_url, holder_pid), what="the posting to wait on the registration"
        )
    finally:
        holder.commit()
        holder.close()
    worker.join()
    assert outcome["result"].success, failure_messages(outcome["result"])
    assert status_and_reasons(database_url, invoice) == ("needs_review", [BANK_DETAILS_CHANGED])
    assert postings(database_url, invoice) == 0
    assert [v.vendor_id for v in store.vendors.list_vendors("acme")] == [vendor_id]


def _two_new_vendor_pages(database_url: str, store: InvoiceStore) -> tuple[UUID, UUID]:
    """Two page-read invoices of a vendor nobody registered, asking for IBANs A and B: both held."""
    seller = Party("Hafenkran Technik GmbH", VAT, "Kai 3", "20457", "Hamburg", "DE")
    first, second = process_documents(
        database_url,
        store,
        "acme",
        [
            (render(replace(sample("INV-7201", seller=seller), payee_iban=IBAN_A), "pdf"), "a.pdf"),
            (render(replace(sample("INV-7202", seller=seller), payee_iban=IBAN_B), "pdf"), "b.pdf"),
        ],
    )
    for invoice in (first, second):
        assert status_and_reasons(database_url, invoice) == ("needs_review", [VENDOR_UNCONFIRMED])
    return first, second


def test_an_approval_whose_reasons_changed_is_refused_and_shows_the_new_ones(
    database_url: str, store: InvoiceStore
) -> None:
    """Hold reasons written once: approving the first registers the vendor with A. The second
    still says only vendor_unconfirmed; approving it re-decides, is refused, and the invoice
    now also shows bank_details_changed. Approving what is now shown pays B, and B is added to
    the vendor, vouched for by the person, audited."""
    first, second = _two_new_vendor_pages(database_url, store)
    assert act(store, "approve", first, ALICE).done
    run_ok(database_url, [first])
    assert status_and_reasons(database_url, first) == ("processed", [])

    refused = act(store, "approve", second, ALICE)
    assert not refused.done and REASONS_CHANGED in refused.message and BANK_DETAILS_CHANGED in refused.message
    assert status_and_reasons(database_url, second) == (
        "needs_review",
        [VENDOR_UNCONFIRMED, BANK_DETAILS_CHANGED],
    )
    assert postings(database_url, second) == 0

    assert act(store, "approve", second, ALICE).done
    (vouched,) = sql(database_url, "SELECT vouched FROM approvals WHERE invoice_id = %s", (second,))[0]
    assert any(v.startswith(BANK_DETAILS_CHANGED) and IBAN_B in v for v in vouched)
    run_ok(database_url, [second])
    assert status_and_reasons(database_url, second) == ("processed", [])
    (vendor,) = store.vendors.list_vendors("acme")
    assert sorted(vendor.of_kind("iban")) == sorted([IBAN_A, IBAN_B])
    assert _paid_into(database_url, second)[0][0] == IBAN_B


def test_an_approval_made_before_the_registry_changed_is_decided_again_at_posting(
    database_url: str, store: InvoiceStore
) -> None:
    """Both pages approved while neither vendor existed; the first posting registers the vendor
    with A. The second posting re-decides under the lock: the person vouched for an unknown
    vendor, not for an account the registered vendor does not have: held, with the reason of now,
    its approval withdrawn."""
    first, second = _two_new_vendor_pages(database_url, store)
    assert act(store, "approve", first, ALICE).done
    assert act(store, "approve", second, ALICE).done
    run_ok(database_url, [first, second])
    assert status_and_reasons(database_url, first) == ("processed", [])
    assert status_and_reasons(database_url, second) == ("needs_review", [BANK_DETAILS_CHANGED])
    assert postings(database_url, second) == 0
    assert sql(database_url, "SELECT count(*) FROM approvals WHERE invoice_id = %s", (second,))[0][0] == 0


def test_a_registered_vendors_name_without_its_vat_id_is_held_as_a_possible_impersonation(
    database_url: str, store: InvoiceStore
) -> None:
    """Impersonation: an e-invoice in a registered vendor's exact name, its VAT id left out, or
    written with a Cyrillic look-alike letter, asks to be paid into a new IBAN. Held, with both
    parties shown; no second vendor of that name is registered."""
    import_vendor_master(store, "acme", f"name,vat_id,iban\nAcme Supplies GmbH,{VAT},{IBAN_A}\n")
    look_alike = VAT.replace("E", "\u0415", 1)  # CYRILLIC CAPITAL LETTER IE
    missing, faked = process_documents(
        database_url,
        store,
        "acme",
        [
            (json_invoice("INV-7301", vat_id=None, payee_iban=IBAN_B), "a.json"),
            (json_invoice("INV-7302", vat_id=look_alike, payee_iban=IBAN_B), "b.json"),
        ],
    )
    assert status_and_reasons(database_url, missing) == ("needs_review", [POSSIBLE_IMPERSONATION])
    status, codes = status_and_reasons(database_url, faked)
    assert status == "needs_review" and POSSIBLE_IMPERSONATION in codes
    (reason,) = [
        r for r in store.documents.review_reasons(missing) or [] if r.startswith(POSSIBLE_IMPERSONATION)
    ]
    assert "Acme Supplies GmbH" in reason and VAT in reason and IBAN_B in reason
    assert postings(database_url, missing) + postings(database_url, faked) == 0
    assert len(store.vendors.list_vendors("acme")) == 1


def test_the_orgs_own_identity_as_the_seller_is_held_never_registered(
    database_url: str, store: InvoiceStore
) -> None:
    """An e-invoice whose seller VAT id is the org's own, under another name: held, never
    posted, no vendor registered, and nobody may approve it."""
    store.vendors.add_org_identity("acme", "vat", VAT, source="test", added_by="test")
    (invoice,) = process_documents(
        database_url,
        store,
        "acme",
        [(json_invoice("INV-7401", seller="Somebody Else Ltd", vat_id=VAT, payee_iban=IBAN_B), "a.json")],
    )
    assert status_and_reasons(database_url, invoice) == ("needs_review", [OWN_IDENTITY_AS_SELLER])
    refused = act(store, "approve", invoice, ALICE)
    assert not refused.done and OWN_IDENTITY_AS_SELLER in refused.message
    assert postings(database_url, invoice) == 0
    assert store.vendors.list_vendors("acme") == []


def test_an_iban_that_fails_its_check_digits_is_never_paid_into(
    database_url: str, store: InvoiceStore
) -> None:
    bad = IBAN_A[:-1] + ("1" if IBAN_A[-1] != "1" else "2")
    (invoice,) = process_documents(
        database_url, store, "acme", [(json_invoice("INV-7501", vat_id=VAT, payee_iban=bad), "a.json")]
    )
    status, codes = status_and_reasons(database_url, invoice)
    assert status == "needs_review" and IBAN_INVALID in codes
    assert not act(store, "approve", invoice, ALICE).done
    assert postings(database_url, invoice) == 0


def test_a_vendor_confirmed_by_its_account_while_the_page_names_another_vat_id_is_held(
    database_url: str, store: InvoiceStore
) -> None:
    """An identity that contradicts itself: the page asks to be paid into the registered
    vendor's IBAN but prints another company's VAT id as the seller's. Held; once a person
    vouches for it, the posting records the registry's name and VAT id beside the printed ones."""
    import_vendor_master(store, "acme", f"name,vat_id,iban\nHafenkran Technik GmbH,{VAT},{IBAN_A}\n")
    seller = Party("Bénéficiaire", OTHER_VAT, "Kai 3", "20457", "Hamburg", "DE")
    page = replace(sample("INV-7601", seller=seller), payee_iban=IBAN_A)
    (invoice,) = process_documents(database_url, store, "acme", [(render(page, "pdf"), "a.pdf")])
    status, codes = status_and_reasons(database_url, invoice)
    assert status == "needs_review" and VENDOR_IDENTITY_CONFLICT in codes, codes
    assert postings(database_url, invoice) == 0

    assert act(store, "approve", invoice, ALICE).done
    run_ok(database_url, [invoice])
    ((iban, vendor_id, registered_name, registered_vat, _printed_name, printed_vat),) = _paid_into(
        database_url, invoice
    )
    (vendor,) = store.vendors.list_vendors("acme")
    assert (iban, vendor_id) == (IBAN_A, vendor.vendor_id)
    assert (registered_name, registered_vat, printed_vat) == ("Hafenkran Technik GmbH", VAT, OTHER_VAT)
    assert vendor.of_kind("vat") == [VAT], "a vouched conflict teaches the registry nothing"


def test_a_vendor_known_by_its_name_alone_is_paid_as_itself_unless_an_account_is_asked_for(
    database_url: str, store: InvoiceStore
) -> None:
    """A vendor master may list a vendor by its name only (a seller abroad that prints no VAT id).
    Its e-invoice, asking for no account, is that vendor's: posted, no second vendor. One in its
    name asking to be paid into an account nobody confirmed is a possible impersonation."""
    import_vendor_master(store, "acme", "name\nKettle Works LLC\n")
    plain, asking = process_documents(
        database_url,
        store,
        "acme",
        [
            (json_invoice("K-1", seller="KETTLE WORKS, LLC", vat_id=None, currency="USD"), "a.json"),
            (
                json_invoice(
                    "K-2", seller="Kettle Works LLC", vat_id=None, currency="USD", payee_iban=IBAN_B
                ),
                "b.json",
            ),
        ],
    )
    (vendor,) = store.vendors.list_vendors("acme")
    assert status_and_reasons(database_url, plain) == ("processed", [])
    assert _paid_into(database_url, plain)[0][:2] == (None, vendor.vendor_id)
    assert status_and_reasons(database_url, asking) == ("needs_review", [POSSIBLE_IMPERSONATION])
    assert postings(database_url, asking) == 0


def test_identifiers_of_two_vendors_once_vouched_pay_the_owner_of_the_account(
    database_url: str, store: InvoiceStore
) -> None:
    """The VAT id names one vendor, the IBAN another: held. A person who vouches for it pays the
    account's owner, and the ledger records that vendor: never one vendor's invoice into another
    vendor's account (found by the stateful property)."""
    import_vendor_master(
        store,
        "acme",
        f"name,vat_id,iban\nHafenkran Technik GmbH,{VAT},{IBAN_A}\nKaiwerk AG,{OTHER_VAT},{IBAN_B}\n",
    )
    (invoice,) = process_documents(
        database_url,
        store,
        "acme",
        [(json_invoice("INV-7801", seller="Kaiwerk AG", vat_id=OTHER_VAT, payee_iban=IBAN_A), "a.json")],
    )
    assert status_and_reasons(database_url, invoice) == ("needs_review", [VENDOR_IDENTITY_CONFLICT])
    assert act(store, "approve", invoice, ALICE).done
    run_ok(database_url, [invoice])
    owner = next(v for v in store.vendors.list_vendors("acme") if v.has("iban", IBAN_A))
    assert _paid_into(database_url, invoice)[0][:2] == (IBAN_A, owner.vendor_id)


def test_a_vendor_master_row_with_the_orgs_own_identity_is_refused(store: InvoiceStore) -> None:
    store.vendors.add_org_identity("acme", "vat", VAT, source="test", added_by="test")
    result = store.vendors.import_vendors(
        "acme",
        read_vendor_csv(f"name,vat_id,iban\nAcme Supplies GmbH,{VAT},{IBAN_A}\nKaiwerk AG,{OTHER_VAT},\n"),
        "erp",
    )
    assert (
        len(result.refused) == 1
        and "org's own identity" in result.refused[0]
        and "row 1" in result.refused[0]
    )
    assert [v.name for v in store.vendors.list_vendors("acme")] == ["Kaiwerk AG"]


def _registry(store: InvoiceStore) -> dict[int, tuple[str, list[tuple[str, str]]]]:
    """Each vendor of acme: its name and identifiers."""
    return {
        v.vendor_id: (v.name, sorted((i.kind, i.value) for i in v.identifiers))
        for v in store.vendors.list_vendors("acme")
    }


def test_a_vendor_master_row_naming_two_vendors_is_refused_and_merges_nothing(store: InvoiceStore) -> None:
    """Issue 53: a row whose VAT id is one vendor's and whose IBAN is another's is refused,
    naming both; neither vendor gains the row's name or the other's identifiers, so no invoice
    of one is ever paid into the other's account because an import said they were one."""
    import_vendor_master(
        store,
        "acme",
        f"name,vat_id,iban\nAcme Supplies GmbH,{VAT},{IBAN_A}\nKaiwerk AG,{OTHER_VAT},{IBAN_B}\n",
    )
    before = _registry(store)
    result = store.vendors.import_vendors(
        "acme", read_vendor_csv(f"name,vat_id,iban\nAcme Kaiwerk Merged,{VAT},{IBAN_B}\n"), "erp"
    )
    assert len(result.refused) == 1, result
    assert "row 1" in result.refused[0] and "different vendors" in result.refused[0]
    assert all(f"#{vendor_id}" in result.refused[0] for vendor_id in before), result.refused
    assert (result.created, result.extended, result.identifiers_added) == (0, 0, 0)
    assert _registry(store) == before
