"""An invoice number is never a date, an amount, a VAT id, an IBAN, a BIC, a postcode or a phone
number printed on the page (issue 52, item 6).

The attack: a re-sent copy whose number is printed as a picture has no number in its text layer;
a reader that takes whatever stands by the number's label (the issue date, the total, the address)
gives the copy a number of its own, the duplicate check misses it and it is paid twice. Every path
that reads a page's number (the label rules, the ranker's candidates, a vendor layout) asks
`number_guard.why_not_a_number`; a refused number is left unread with its reason, never guessed,
and validation holds the invoice `field_unread` for a person.

Companies, numbers and identifiers here are made up.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invoice_pipeline.documents import extract_fields, extract_text
from invoice_pipeline.documents.reading import layouts as L
from invoice_pipeline.documents.reading.candidates import number_candidates
from invoice_pipeline.documents.reading.number_guard import (
    PageNumbers,
    could_be_invoice_number,
    why_not_a_number,
)
from invoice_pipeline.documents.reading.page_view import PageView
from invoice_pipeline.documents.text_fields import fields_from_text
from invoice_pipeline.domain.identity import Identifier, Vendor
from invoice_pipeline.domain.review import FIELD_UNREAD
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.engine.vendors import read_vendor_csv
from invoice_pipeline.samples.render import Line, Party, SampleInvoice, invoice_pdf
from invoice_pipeline_tests.engine.review.helpers import postings, status_and_reasons
from invoice_pipeline_tests.engine.test_stages import Reader, stage_env

SELLER = Party("Kestrel Drahtwerk GmbH", "DE136695976", "Uferweg 3", "24103", "Kiel", "DE")
BUYER = Party("Moorfeld Bakery Ltd", None, "Mill Lane 9", "10117", "Berlin", "DE")
IBAN = "DE89 3704 0044 0532 0130 00"


def page(number_cell: str) -> str:
    """A page's text layer (columns three spaces apart) with `number_cell` right of its number label."""
    return "\n".join(
        [
            "Kestrel Drahtwerk GmbH",
            "Uferweg 3, 24103 Kiel",
            "Tel. +49 431 5550172",
            "VAT ID: DE136695976",
            "",
            "Moorfeld Bakery Ltd",
            "Mill Lane 9",
            "10117 Berlin",
            "",
            "INVOICE",
            f"Invoice no.:      {number_cell}",
            "Invoice date:     30.05.2025",
            "",
            "Qty   Description        Unit price      Amount",
            "2     Wire rope          100.84 EUR      201.68 EUR",
            "                         Net total:      201.68 EUR",
            "                         VAT 19 %:        38.32 EUR",
            "                         Amount due:     240.00 EUR",
            "",
            f"IBAN: {IBAN}   BIC: COBADEFFXXX",
        ]
    )


# What stands by the label when the number itself is a picture: each is refused, on its own shape
# or because the page prints it only as that other thing.
REFUSED = [
    ("the issue date", "30.05.2025"),
    ("the issue date, compact", "20250530"),
    ("the issue date, day first and compact", "30052025"),
    ("the issue date, ISO", "2025-05-30"),
    ("the amount due", "240.00"),
    ("an amount with thousands", "1.190,00"),
    ("the seller's VAT id", "DE136695976"),
    ("the seller's IBAN", IBAN),
    ("the seller's BIC", "COBADEFFXXX"),
    ("the seller's postcode and town", "24103 Kiel"),
    ("the seller's phone number", "+49 431 5550172"),
]


@pytest.mark.parametrize(("what", "cell"), REFUSED, ids=[w for w, _ in REFUSED])
def test_a_number_label_beside_another_value_leaves_the_number_unread(what: str, cell: str) -> None:
    """Mechanism: `text_fields._invoice_number` asks `why_not_a_number` of the label's value."""
    fields = fields_from_text(page(cell))
    assert fields.invoice_number is None, f"{what} was read as the invoice number"
    reason = fields.sources["invoice_number"].reason or ""
    assert "no invoice number after" in reason and "not guessed" in reason, reason
    # The rest of the page still reads: a person corrects the number alone.
    assert fields.payable_total == Decimal("240.00")


@pytest.mark.parametrize("number", ["2025-0042", "RE-20250530-1", "KD-7731", "24103", "0044"])
def test_a_real_number_that_merely_contains_such_digits_is_read(number: str) -> None:
    """A number with a date's digits inside it, or one that also happens to be a postcode or a
    group of the IBAN, printed by its label, is the number."""
    assert fields_from_text(page(number)).invoice_number == number


@pytest.mark.parametrize(("what", "cell"), REFUSED, ids=[w for w, _ in REFUSED])
def test_the_rankers_candidates_never_include_another_value(what: str, cell: str) -> None:
    """Mechanism: `candidates.number_candidates` drops what `number_guard` refuses, whatever its
    features would have ranked it."""
    text = page(cell)
    printed = PageNumbers.of(text)
    values = [c.value for c in number_candidates(PageView(text, None))]
    assert values, "the page has number-shaped tokens"
    refused = [v for v in values if not could_be_invoice_number(v, printed)]
    assert refused == [], f"{what}: candidates {refused} are refused values"
    assert not {"24103", "0532", "136695976", "5550172"} & set(values), values


def test_a_vendor_layout_whose_number_place_holds_a_date_leaves_the_number_unread() -> None:
    """Mechanism: `layouts.read._read_rule` asks `why_not_a_number` of the value at the learnt place,
    and `_anchored_fields` leaves the field unread (not template-free) when it is refused."""
    first = page("4711")
    confirmed = dataclasses.replace(
        fields_from_text(first), invoice_number="4711", seller_vat_id="DE136695976"
    )
    layout = L.learn_layout(first, None, confirmed, org_id="acme", learnt_from="i0", taught_by="t")
    assert layout is not None and layout.rule("invoice_number") is not None
    layout = dataclasses.replace(layout, id=1)
    # The page's vendor, as the registry confirms it by the VAT id the page prints.
    vendor = Vendor(1, "acme", "Seller", None, (Identifier("vat", "DE136695976", "DE136695976"),))
    # The learnt place (digits only) now holds the issue date, compact; whatever the page reader
    # made of the page, the layout's refusal stands.
    copy = page("20250530")
    template_free = dataclasses.replace(fields_from_text(copy), invoice_number="4712")
    read = L.fields_with_layouts(copy, None, template_free, [layout], org_id="acme", vendor=vendor)
    assert read.invoice_number is None
    reason = read.sources["invoice_number"].reason or ""
    assert "layout:1" in reason and "is a date" in reason, reason
    # The same layout still reads a real number at its place.
    again = page("4712")
    assert (
        L.fields_with_layouts(
            again, None, fields_from_text(again), [layout], org_id="acme", vendor=vendor
        ).invoice_number
        == "4712"
    )


_DATE_FORMATS = ("%d.%m.%Y", "%Y-%m-%d", "%Y%m%d", "%d%m%Y", "%d/%m/%Y", "%Y/%m/%d", "%d-%m-%Y")


@given(st.dates(dt.date(1990, 1, 1), dt.date(2099, 12, 31)), st.sampled_from(_DATE_FORMATS))
def test_any_date_in_any_format_is_never_a_number(day: dt.date, fmt: str) -> None:
    assert why_not_a_number(day.strftime(fmt), PageNumbers.of(page("x"))) is not None


@given(st.decimals(Decimal("0.01"), Decimal("999999.99"), places=2), st.booleans())
def test_any_amount_with_decimals_is_never_a_number(amount: Decimal, german: bool) -> None:
    printed = f"{amount:,.2f}"
    if german:
        printed = printed.replace(",", "_").replace(".", ",").replace("_", ".")
    assert why_not_a_number(printed, PageNumbers.of(page("x"))) is not None


@given(
    st.sampled_from(["RE", "INV", "KD", "F"]),
    st.dates(dt.date(1990, 1, 1), dt.date(2099, 12, 31)),
    st.integers(1, 9999),
)
def test_a_number_built_from_a_date_and_a_sequence_is_a_number(prefix: str, day: dt.date, n: int) -> None:
    number = f"{prefix}-{day:%Y%m%d}-{n}"
    assert why_not_a_number(number, PageNumbers.of(page(number))) is None


# ---------------------------------------------------------------- end to end


def _invoice(number: str) -> SampleInvoice:
    return SampleInvoice(
        invoice_number=number,
        document_type="invoice",
        issue_date=dt.date(2025, 5, 30),
        due_date=dt.date(2025, 6, 29),
        currency="EUR",
        seller=SELLER,
        buyer=BUYER,
        lines=(Line("Wire rope", Decimal(2), Decimal("100.84"), Decimal(19)),),
        po_number=None,
    )


def test_a_resent_copy_whose_number_is_not_text_is_held_not_posted(
    database_url: str, store: InvoiceStore
) -> None:
    """Through the real stages and database: the original is posted once; its copy, whose
    number is not in the text layer (printed as a picture), would have been read with another
    value as its number (the item table's quantity below the label) and posted a second time.
    It is held `field_unread` for a person instead."""
    imported = store.vendors.import_vendors(
        "acme", read_vendor_csv(f"name,vat_id\n{SELLER.name},{SELLER.vat_id}\n"), "test"
    )
    assert not imported.refused, imported.refused
    original = invoice_pdf(_invoice("KD-7731"), "de")
    copy = invoice_pdf(_invoice(""), "de")
    assert "KD-7731" not in extract_text(copy, "copy.pdf").text
    assert extract_fields(extract_text(copy, "copy.pdf")).invoice_number is None

    ids = [
        store.documents.store_document(content, "acme", name).invoice_id
        for content, name in ((original, "original.pdf"), (copy, "copy.pdf"))
    ]
    for invoice_id in ids:  # one after the other: the copy is compared with a posted original
        chunk = claim_chunk(store, [(invoice_id, None)], "test-number")
        process_chunk(stage_env(store, Reader()), chunk)

    assert postings(database_url, ids[0]) == 1, status_and_reasons(database_url, ids[0])
    status, codes = status_and_reasons(database_url, ids[1])
    assert postings(database_url, ids[1]) == 0, "the copy was paid a second time"
    assert status == "needs_review" and FIELD_UNREAD in codes, (status, codes)
    reasons = store.documents.review_reasons(ids[1]) or []
    assert any("invoice_number" in r for r in reasons), reasons
    # Its number unread, it is still compared by seller, amount and date: the person who types
    # the number is shown the original it may copy (issue 52).
    assert any(r.startswith(f"suspected_duplicate of {ids[0]}: its number was not read") for r in reasons), (
        reasons
    )
    fields = store.documents.load_fields(ids[1])
    assert fields is not None and fields.invoice_number is None
    assert "not guessed" in (fields.sources["invoice_number"].reason or ""), fields.sources
