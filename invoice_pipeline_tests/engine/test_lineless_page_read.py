"""A lineless Factur-X profile read from its page under the German rules (issue 55, item 3),
through the real pipeline (the Dagster batch job in process, documents read in the sandbox
workers) on a real PostgreSQL, with PDFs the project's own generators make and, when present,
the development corpus's.

For an org that receives under the German rules (`review policy --einvoice-country DE`), a German
seller's MINIMUM or BASIC WL PDF is no e-invoice: its fields are read from the page, as a PDF
without XML is, and its XML is evidence. A page its XML contradicts is held naming the field; a
page with no text layer is held `not_an_einvoice`; an org without the setting and a foreign
seller are read from the XML as before.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from uuid import UUID

import pytest

from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.review import (
    DEFAULT_POLICY,
    NOT_AN_EINVOICE,
    PAGE_DISAGREES_WITH_XML,
    VENDOR_UNCONFIRMED,
)
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.render import SampleInvoice, invoice_pdf
from invoice_pipeline.samples.scans import encode, render_pages
from invoice_pipeline_tests.engine.review.helpers import (
    postings,
    process_documents,
    render,
    sample,
    status_and_reasons,
)
from pipeline_support.einvoice_mutations import PAGE_DISAGREEMENTS, changed, with_payee_iban, with_xml

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ROOT.parent / "shared" / "corpus" / "pdf-layouts"
IBAN = "DE89370400440532013000"
MINIMUM = "urn:factur-x.eu:1p0:minimum"
BASIC_WL = "urn:factur-x.eu:1p0:basicwl"
KEY_FIELDS = ("invoice_number", "issue_date", "currency", "payable_total", "seller_vat_id")
DE_ORG = "de-org"


def _sample(number: str) -> SampleInvoice:
    return replace(sample(number), payee_iban=IBAN)


def _xml(inv: SampleInvoice, guideline: str) -> bytes:
    """The sample's CII, declaring a lineless Factur-X profile (valid under its rules)."""
    return with_payee_iban(render(inv, "cii"), IBAN).replace(b"urn:cen.eu:en16931:2017", guideline.encode())


def _hybrid(inv: SampleInvoice, guideline: str) -> bytes:
    return with_xml(invoice_pdf(inv), _xml(inv, guideline))


def _fields(store: InvoiceStore, invoice_id: UUID) -> InvoiceFields:
    fields = store.documents.load_fields(invoice_id)
    assert fields is not None
    return fields


def _read_from_the_page(fields: InvoiceFields) -> None:
    for name in KEY_FIELDS:
        assert fields.sources[name].source.startswith("pdf-text:"), (name, fields.sources[name])
        assert fields.sources[name].page is not None, name


def _read_from_the_xml(fields: InvoiceFields) -> None:
    for name in ("invoice_number", "payable_total"):
        assert fields.sources[name].source.startswith("/rsm:CrossIndustryInvoice"), (
            name,
            fields.sources[name],
        )


@pytest.fixture
def de_org(store: InvoiceStore) -> str:
    store.review.set_review_policy(DE_ORG, replace(DEFAULT_POLICY, einvoice_country="DE"), "test")
    return DE_ORG


def test_a_german_lineless_factur_x_is_read_from_its_page_and_posts_when_page_and_xml_agree(
    database_url: str, store: InvoiceStore, de_org: str
) -> None:
    """Its fields' sources are the page (its boxes), its XML's check is kept as evidence. Read as
    a page, it meets the payment decision of a page-read invoice: a vendor nobody registered is
    held `vendor_unconfirmed` (not `not_an_einvoice`); once the vendor is registered (by an
    EN 16931 e-invoice of its own), a page that proves its amount, its XML agreeing, is posted
    without a person."""
    minimum, basic_wl = process_documents(
        database_url,
        store,
        de_org,
        [(_hybrid(_sample("INV-7100"), MINIMUM), "m.pdf"), (_hybrid(_sample("INV-7101"), BASIC_WL), "b.pdf")],
    )
    for invoice_id, profile in ((minimum, "MINIMUM"), (basic_wl, "BASIC WL")):
        fields = _fields(store, invoice_id)
        _read_from_the_page(fields)
        assert fields.einvoice_check is not None and fields.einvoice_check.profile == profile
        assert fields.amount_check is not None and fields.amount_check.confirmed
        assert fields.page_disagreements == ()
        assert status_and_reasons(database_url, invoice_id) == ("needs_review", [VENDOR_UNCONFIRMED])
        assert postings(database_url, invoice_id) == 0

    (en16931,) = process_documents(
        database_url,
        store,
        de_org,
        [
            (
                with_xml(
                    invoice_pdf(_sample("INV-7102")), _xml(_sample("INV-7102"), "urn:cen.eu:en16931:2017")
                ),
                "e.pdf",
            )
        ],
    )
    assert status_and_reasons(database_url, en16931) == ("processed", [])
    _read_from_the_xml(_fields(store, en16931))
    (later,) = process_documents(
        database_url, store, de_org, [(_hybrid(_sample("INV-7103"), MINIMUM), "l.pdf")]
    )
    _read_from_the_page(_fields(store, later))
    assert status_and_reasons(database_url, later) == ("processed", [])
    assert postings(database_url, later) == 1


def test_a_page_its_xml_contradicts_is_held_naming_the_field(
    database_url: str, store: InvoiceStore, de_org: str
) -> None:
    """The XML names another invoice number or account than the page: held
    `page_disagrees_with_xml` naming the field, the page's value recorded (not the XML's)."""
    documents = []
    for index, change in enumerate(PAGE_DISAGREEMENTS):
        inv = _sample(f"INV-720{index}")
        documents.append((with_xml(invoice_pdf(inv), changed(_xml(inv, MINIMUM), change)), f"{index}.pdf"))
    held = process_documents(database_url, store, de_org, documents)
    for index, (invoice_id, change) in enumerate(zip(held, PAGE_DISAGREEMENTS, strict=True)):
        status, codes = status_and_reasons(database_url, invoice_id)
        assert status == "needs_review" and PAGE_DISAGREES_WITH_XML in codes, (status, codes)
        fields = _fields(store, invoice_id)
        _read_from_the_page(fields)
        assert [d.field for d in fields.page_disagreements] == [change.expect]
        assert fields.invoice_number == f"INV-720{index}"  # the page's, never the XML's
        assert postings(database_url, invoice_id) == 0


def test_an_org_without_the_setting_and_a_foreign_seller_are_read_from_the_xml(
    database_url: str, store: InvoiceStore, de_org: str
) -> None:
    """The same German MINIMUM PDF for an org under no country's rules, and a French seller's
    MINIMUM PDF for the German org: the XML is the invoice, as before."""
    (elsewhere,) = process_documents(
        database_url, store, "acme", [(_hybrid(_sample("INV-7300"), MINIMUM), "m.pdf")]
    )
    _read_from_the_xml(_fields(store, elsewhere))
    assert status_and_reasons(database_url, elsewhere) == ("processed", [])

    french = _sample("INV-7301")
    french = replace(french, seller=replace(french.seller, vat_id="FR40303265045", country="FR"))
    (foreign,) = process_documents(database_url, store, de_org, [(_hybrid(french, MINIMUM), "f.pdf")])
    fields = _fields(store, foreign)
    _read_from_the_xml(fields)
    assert fields.seller_vat_id == "FR40303265045"
    assert NOT_AN_EINVOICE not in status_and_reasons(database_url, foreign)[1]


def test_a_page_without_a_text_layer_is_held_not_an_einvoice(
    database_url: str, store: InvoiceStore, de_org: str
) -> None:
    """A scanned page with a MINIMUM XML attached: not OCRed in this stage; its XML's fields
    shown, held for a person who reads the page."""
    inv = _sample("INV-7400")
    scan = encode(render_pages(invoice_pdf(inv), 100), "pdf", 100)
    (invoice_id,) = process_documents(
        database_url, store, de_org, [(with_xml(scan, _xml(inv, MINIMUM)), "s.pdf")]
    )
    assert status_and_reasons(database_url, invoice_id) == ("needs_review", [NOT_AN_EINVOICE])
    _read_from_the_xml(_fields(store, invoice_id))
    assert postings(database_url, invoice_id) == 0


@pytest.mark.skipif(not LAYOUTS.is_dir(), reason="no shared corpus")
def test_the_corpus_lineless_files_are_read_by_their_sellers_country(
    database_url: str, store: InvoiceStore, de_org: str
) -> None:
    """Public files, read where they lie: a German seller's BASIC WL is read from its page (which
    proves its amount), a French seller's MINIMUM and BASIC WL from their XML."""
    german = LAYOUTS / "factur-x-kit" / "FacturX_BASICWL_Test.pdf"
    french = [
        LAYOUTS / "facturx-engine" / "invoice_raw.pdf",
        LAYOUTS / "facturx-check" / "facture-demo-facturx.pdf",
    ]
    paths = [german, *french]
    if not all(p.is_file() for p in paths):
        pytest.skip("corpus files missing")
    page_read, *xml_read = process_documents(
        database_url, store, de_org, [(p.read_bytes(), p.name) for p in paths]
    )
    fields = _fields(store, page_read)
    _read_from_the_page(fields)
    assert (fields.invoice_number, str(fields.payable_total)) == ("DOC-12345", "990.00")
    assert fields.amount_check is not None and fields.amount_check.confirmed
    assert fields.einvoice_check is not None and fields.einvoice_check.profile == "BASIC WL"
    assert NOT_AN_EINVOICE not in status_and_reasons(database_url, page_read)[1]
    for invoice_id in xml_read:
        _read_from_the_xml(_fields(store, invoice_id))
        assert NOT_AN_EINVOICE not in status_and_reasons(database_url, invoice_id)[1]
