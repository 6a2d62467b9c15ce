"""What the vendor is known to be fills what its page cannot say (issue 54), through the real
stages and the real review functions, on PostgreSQL: a vendor the registry confirms by the IBAN
and VAT id its page prints is posted under its registered name (the page's reading kept in the
source); a page printing only "$" is held until a person approved one of the vendor's invoices in
a dollar, and from then on is read in that currency; a page that names another seller's VAT id
beside the vendor's account is held, read by no layout, filled with nothing."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from decimal import Decimal
from uuid import UUID

from invoice_pipeline.config import DEFAULT_MAX_DOCUMENT_BYTES
from invoice_pipeline.domain.identity import Identifier, normalise
from invoice_pipeline.domain.review import DEFAULT_POLICY, reason_code
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import act
from invoice_pipeline.engine.stages import StageEnv
from invoice_pipeline.engine.store import InvoiceStore, VendorImportRow
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline.samples.render import letter_pdf
from invoice_pipeline_tests.engine.test_vendor_layouts_store import ALICE, run_documents

VAT, OTHER_VAT, IBAN = "DE811907980", "DE136695976", "DE89370400440532013000"
REGISTERED = "Prairie Tools Incorporated"


def dollar_page(number: str, *, seller_vat: str = VAT, sign: str = "$") -> bytes:
    """A one-page invoice in a monospace font, its amounts printed with `sign` only."""
    lines = [
        f"Prairie Tools Inc                                  VAT No: {seller_vat}",
        "1200 Harbour Road, Springfield",
        "",
        "Bill to: Maison Verte Paysage SAS",
        "",
        f"Invoice no: {number}",
        "Invoice date: 01.03.2025",
        "",
        f"                                      Subtotal         {sign}1,000.00",
        f"                                      VAT 19%            {sign}190.00",
        f"                                      Total            {sign}1,190.00",
        "Pay to IBAN DE89 3704 0044 0532 0130 00",
    ]
    return letter_pdf(lines, font="Courier", size=9)


def register(store: InvoiceStore, org: str) -> None:
    idents = (
        Identifier("vat", normalise("vat", VAT), VAT),
        Identifier("iban", normalise("iban", IBAN), IBAN),
    )
    store.vendors.import_vendors(org, [VendorImportRow(REGISTERED, idents)], "test: vendor master")


def status(store: InvoiceStore, invoice_id: UUID) -> str:
    state = store.documents.invoice_state(invoice_id)
    assert state is not None
    return state.status


def post_approved(store: InvoiceStore, invoice_id: UUID) -> None:
    """The pipeline's next run over an approved invoice: the posting."""
    env = StageEnv(
        store, DocumentReader(isolate=False), DEFAULT_MAX_DOCUMENT_BYTES, 120, 3, timedelta(minutes=1)
    )
    process_chunk(env, claim_chunk(store, [(invoice_id, None)], "registry-test"))


def test_a_dollar_page_is_held_until_a_person_approved_the_vendors_invoice_in_a_dollar(
    store: InvoiceStore,
) -> None:
    register(store, "acme")
    [first] = run_documents(store, "acme", [(dollar_page("PT-1001"), "pt-1001.pdf")])
    fields = store.documents.load_fields(first)
    assert fields is not None
    assert fields.currency is None, fields.sources.get("currency")
    assert "'$'" in (fields.sources["currency"].reason or "")
    assert status(store, first) == "needs_review"
    # The registry confirmed the vendor: its registered name, the page's beside it.
    assert fields.seller_name == REGISTERED
    assert fields.sources["seller_name"].source.startswith("registry:vendor #")
    assert "'Prairie Tools Inc'" in (fields.sources["seller_name"].reason or "")

    assert correct_invoice(store, first, {"currency": "USD"}, ALICE).done
    assert act(store, "approve", first, ALICE).done
    post_approved(store, first)
    assert status(store, first) == "processed"

    [second] = run_documents(store, "acme", [(dollar_page("PT-1002"), "pt-1002.pdf")])
    fields = store.documents.load_fields(second)
    assert fields is not None
    assert fields.currency == "USD", fields.sources.get("currency")
    assert fields.sources["currency"].source.startswith("registry:vendor #")
    assert status(store, second) == "processed", store.documents.review_reasons(second)
    posting = store.documents.load_ledger_posting(second)
    assert posting is not None and posting.currency == "USD" and posting.vendor_id is not None

    # Another org, the same vendor in its master, nobody approved one of its invoices: held,
    # even though its policy's default currency is the euro, which "$" cannot mean.
    register(store, "globex")
    store.review.set_review_policy("globex", dataclasses.replace(DEFAULT_POLICY, default_currency="EUR"), "t")
    [elsewhere] = run_documents(store, "globex", [(dollar_page("PT-1002"), "pt-1002.pdf")])
    fields = store.documents.load_fields(elsewhere)
    assert fields is not None and fields.currency is None
    assert status(store, elsewhere) == "needs_review"


def test_a_page_naming_another_sellers_vat_id_beside_the_vendors_account_is_held_and_filled_with_nothing(
    store: InvoiceStore,
) -> None:
    """The vendor has an active layout (a person approved one of its invoices); a page of the same
    template prints the vendor's account but another valid VAT id as the seller's. The registry
    would confirm the vendor by the account: the page contradicts it, so no layout reads it,
    nothing is filled, and the payment decision holds it."""
    register(store, "acme")
    # The org's policy holds every invoice for a person, so the first one is approved by one.
    store.review.set_review_policy(
        "acme", dataclasses.replace(DEFAULT_POLICY, auto_approve_limit=Decimal("0.01")), "t"
    )
    [first] = run_documents(store, "acme", [(dollar_page("PT-2000", sign="EUR "), "first.pdf")])
    assert status(store, first) == "needs_review"
    assert act(store, "approve", first, ALICE).done
    assert [r.state for r in store.layouts.list_layouts("acme")] == ["active"]
    [same_vendor] = run_documents(store, "acme", [(dollar_page("PT-2001", sign="EUR "), "own.pdf")])
    fields = store.documents.load_fields(same_vendor)
    assert fields is not None and fields.sources["invoice_number"].source.startswith("layout:")

    page = dollar_page("PT-2002", seller_vat=OTHER_VAT, sign="EUR ")
    [invoice_id] = run_documents(store, "acme", [(page, "other.pdf")])
    fields = store.documents.load_fields(invoice_id)
    assert fields is not None
    assert (fields.seller_name, fields.seller_vat_id) == ("Prairie Tools Inc", OTHER_VAT)
    assert not any(s.source.startswith(("registry:", "layout:")) for s in fields.sources.values()), (
        fields.sources
    )
    assert status(store, invoice_id) == "needs_review"
    codes = {reason_code(r) for r in store.documents.review_reasons(invoice_id) or ()}
    assert "vendor_identity_conflict" in codes, codes
