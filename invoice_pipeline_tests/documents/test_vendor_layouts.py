"""Vendor layouts without a database: learnt from one page and its confirmed values, then read a
later page of the same vendor whose lines moved; never applied to another vendor's page or for
another organisation; a layout that stops matching falls back and says so (issue 23).

Pages are the generated vendor series (`samples.vendor_series`): several invoices per vendor in
one layout, some in wording the template-free reader does not know.
"""

from __future__ import annotations

import dataclasses
from datetime import date
from decimal import Decimal
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invoice_pipeline.documents import ExtractedText, extract_fields, extract_text
from invoice_pipeline.documents.reading import layouts as L
from invoice_pipeline.documents.reading.layouts import merge as layouts_merge
from invoice_pipeline.documents.reading.layouts import read as layouts_read
from invoice_pipeline.documents.reading.seller_buyer import identifiers_for_the_registry
from invoice_pipeline.documents.text_fields import fields_from_text
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.identity import Identifier, OrgProfile, Vendor, normalise
from invoice_pipeline.domain.payment import confirmed_vendor
from invoice_pipeline.domain.review import DEFAULT_POLICY, review_reasons
from invoice_pipeline.samples.page_layouts import PageCase
from invoice_pipeline.samples.vat_ids import valid_vat_id
from invoice_pipeline.samples.vendor_series import HOUSE_LABELS, SeriesInvoice, due_date_of, vendor_series

KEY_FIELDS = ("invoice_number", "issue_date", "payable_total", "currency", "seller_name", "seller_vat_id")


def truth(case: PageCase) -> InvoiceFields:
    return InvoiceFields(
        invoice_number=case.invoice_number,
        issue_date=case.issue_date,
        due_date=due_date_of(case),
        currency=case.currency,
        net_total=case.net,
        tax_total=case.tax,
        payable_total=case.amount_due,
        seller_name=case.seller_name,
        seller_vat_id=case.seller_vat_id,
        buyer_name=case.buyer_name,
    )


@cache
def series() -> tuple[tuple[SeriesInvoice, ...], ...]:
    return tuple(v.invoices for v in vendor_series(11, 8, 4))


@cache
def read(invoice: SeriesInvoice) -> ExtractedText:
    return extract_text(invoice.pdf())


def twin_vat_id(n: int) -> str:
    return valid_vat_id("GB", str(700_000_000 + n * 7919))


def twin(invoice: SeriesInvoice, n: int) -> SeriesInvoice:
    """The same page layout and wording from a different vendor (another seller and VAT id)."""
    case = dataclasses.replace(
        invoice.case, seller_name=f"Twin Trading {n} Ltd", seller_vat_id=twin_vat_id(n)
    )
    return dataclasses.replace(invoice, case=case)


# Another seller of these tests' pages, with a VAT id whose check digits pass.
HALDEN_VAT = valid_vat_id("GB", "585738843")


@cache
def registry() -> tuple[Vendor, ...]:
    """The org's vendor registry in these tests: every seller of their pages (the series' vendors,
    the twins, the hand-written pages' sellers), each known by its VAT id, as after a person
    approved one of its invoices."""
    vendors = [*series(), *(v.invoices for v in vendor_series(2031, 18, 6))]
    sellers = {inv.case.seller_vat_id: inv.case.seller_name for v in vendors for inv in v}
    sellers |= {twin_vat_id(n): f"Twin Trading {n} Ltd" for n in (1, 100, 101)}
    sellers |= {HALDEN_VAT: "Halden Tools Ltd", "GB123456782": "Contoso Ltd", TITLE_VAT: "Lindqvist"}
    return tuple(
        Vendor(n, "acme", name, None, (Identifier("vat", normalise("vat", vat), vat),))
        for n, (vat, name) in enumerate(sorted(sellers.items()), start=1)
        if vat
    )


def page_vendor(text: str) -> Vendor | None:
    """The vendor the registry confirms for a page, as the extract_fields stage asks it."""
    return confirmed_vendor(identifiers_for_the_registry(text), registry(), OrgProfile("acme"))


def learn(invoice: SeriesInvoice, org: str = "acme", id: int = 1) -> L.VendorLayout:
    text = read(invoice)
    boxes, _ = L.page_of(text)
    layout = L.learn_layout(
        text.text, boxes, truth(invoice.case), org_id=org, learnt_from="i0", taught_by="t"
    )
    assert layout is not None
    return dataclasses.replace(layout, id=id)


def with_layouts(invoice: SeriesInvoice, layouts: list[L.VendorLayout], org: str = "acme") -> InvoiceFields:
    text = read(invoice)
    return L.apply_layouts(text, extract_fields(text), layouts, org, page_vendor(text.text))


def house_vendor() -> tuple[SeriesInvoice, ...]:
    return next(v for v in series() if v[0].labels is not None)


def test_a_layout_reads_later_invoices_whose_lines_moved() -> None:
    invoices = house_vendor()
    layout = learn(invoices[0])
    assert {r.field for r in layout.rules} >= {"invoice_number", "issue_date", "amount:net", "amount:tax"}
    for later in invoices[1:]:
        assert later.grow or later.items, "the series moves lines"
        fields = with_layouts(later, [layout])
        want = truth(later.case)
        assert {k: getattr(fields, k) for k in KEY_FIELDS} == {k: getattr(want, k) for k in KEY_FIELDS}
        assert fields.sources["invoice_number"].source.startswith("layout:1:")
        assert fields.sources["payable_total"].from_page
        # Money still fails closed: the layout only placed the amounts, the arithmetic confirmed.
        assert fields.amount_check is not None and fields.amount_check.confirmed, fields.amount_check
        assert not review_reasons(fields, DEFAULT_POLICY)
        # Without the layout, the vendor's own wording leaves the amount unconfirmed.
        assert review_reasons(extract_fields(read(later)), DEFAULT_POLICY)


def test_relative_positions_survive_a_page_that_grows() -> None:
    invoices = house_vendor()
    layout = learn(invoices[0])
    grown = dataclasses.replace(invoices[1], grow=3, items=5)
    fields = with_layouts(grown, [layout])
    assert fields.invoice_number == grown.case.invoice_number
    assert fields.payable_total == grown.case.amount_due


def test_never_applied_to_another_vendors_similar_page() -> None:
    invoices = house_vendor()
    layout = learn(invoices[0])
    other = twin(invoices[1], 1)
    fields = with_layouts(other, [layout])
    assert not any(s.source.startswith("layout:") for s in fields.sources.values())
    assert fields.seller_vat_id == other.case.seller_vat_id


def test_never_applied_for_another_org() -> None:
    invoices = house_vendor()
    layout = learn(invoices[0], org="acme")
    fields = with_layouts(invoices[1], [layout], org="globex")
    assert fields == extract_fields(read(invoices[1]))


def test_a_layout_that_no_longer_matches_falls_back_and_says_so() -> None:
    invoices = house_vendor()
    layout = learn(invoices[0])
    # The vendor changed its template: the standard wording of its language, not its own.
    changed = dataclasses.replace(invoices[1], labels=None)
    fields = with_layouts(changed, [layout])
    template_free = extract_fields(read(changed))
    assert not any(s.source.startswith("layout:") for s in fields.sources.values())
    assert "no longer matches" in fields.sources["invoice_number"].source
    assert fields.invoice_number == template_free.invoice_number
    assert fields.payable_total == template_free.payable_total


def test_the_layout_never_forces_an_amount() -> None:
    """A page whose printed amounts do not add up stays unconfirmed, layout or not."""
    invoices = house_vendor()
    layout = learn(invoices[0])
    text = read(invoices[1])
    net = invoices[1].case.net
    from invoice_pipeline.samples.page_layouts import fmt_amount

    printed = fmt_amount(net, invoices[1].case.number_format)
    assert printed in text.text
    broken = dataclasses.replace(
        text, text=text.text.replace(printed, fmt_amount(net + Decimal(7), invoices[1].case.number_format), 1)
    )
    fields = L.apply_layouts(broken, extract_fields(broken), [layout], "acme", page_vendor(broken.text))
    assert fields.amount_check is not None and not fields.amount_check.confirmed
    assert review_reasons(fields, DEFAULT_POLICY)


def test_export_round_trip() -> None:
    layout = learn(house_vendor()[0])
    again = L.VendorLayout.from_json(layout.to_json(), org_id="acme", id=1)
    assert again == dataclasses.replace(layout, taught_at=None)


def test_contradiction_is_detected() -> None:
    invoices = house_vendor()
    layout = learn(invoices[0])
    text = read(invoices[1])
    boxes, _ = L.page_of(text)
    page = L.Page.of(text.text, boxes)
    result = L.read_with_layout(page, layout, page_vendor(text.text))
    assert result.matched and not L.contradictions(result, truth(invoices[1].case))
    wrong = dataclasses.replace(truth(invoices[1].case), invoice_number="SOMETHING-ELSE")
    assert L.contradictions(result, wrong) == ["invoice_number"]


# -- isolation, as a property -------------------------------------------------------------------

ORGS = ("acme", "globex", "initech")


def _pool() -> list[tuple[SeriesInvoice, ...]]:
    """Vendors whose pages look alike: each house vendor and a twin of it (another seller)."""
    house = [v for v in series() if v[0].labels is not None][:2]
    twins = [tuple(twin(inv, 100 + i) for inv in v) for i, v in enumerate(house)]
    return [*house, *twins]


def violations(teach: list[tuple[int, int]], org: int, vendor: int, k: int) -> list[str]:
    """Layouts learnt for (org, vendor) pairs; a page of `vendor` read in `org` with all of them:
    the fields read with a layout that is not that org's and that vendor's."""
    pool = _pool()
    layouts = []
    owner: dict[int, tuple[int, int]] = {}
    for n, (t_org, t_vendor) in enumerate(dict.fromkeys(teach), start=1):
        layouts.append(learn(pool[t_vendor][0], org=ORGS[t_org], id=n))
        owner[n] = (t_org, t_vendor)
    fields = with_layouts(pool[vendor][1 + k], layouts, org=ORGS[org])
    out = []
    for name, source in fields.sources.items():
        if source.source.startswith("layout:"):
            used = int(source.source.split(":")[1])
            if owner[used] != (org, vendor):
                out.append(f"{name} read with layout {used} of {owner[used]} for {(org, vendor)}")
    return out


pair = st.tuples(st.integers(0, len(ORGS) - 1), st.integers(0, 3))


@settings(max_examples=25)
@given(teach=st.lists(pair, min_size=1, max_size=5), read_as=pair, k=st.integers(0, 2))
def test_a_layout_is_never_applied_across_orgs_or_vendors(
    teach: list[tuple[int, int]], read_as: tuple[int, int], k: int
) -> None:
    assert violations(teach, read_as[0], read_as[1], k) == []


@pytest.mark.parametrize("check", ["vendor", "org"])
def test_the_property_catches_a_missing_check(check: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The isolation property is not vacuous: without either check, a layout leaks. (Each check is
    taken away where it is asked: reading with one layout, merging the org's.)"""
    if check == "vendor":
        monkeypatch.setattr(layouts_read, "layout_of_vendor", lambda key, vendor: True)
        # Taught for vendor 0 in acme; a twin's page (vendor 2, same layout) read in acme.
        assert violations([(0, 0)], 0, 2, 0)
    else:
        monkeypatch.setattr(layouts_merge, "layout_for_org", lambda layout, org: layout.enabled)
        assert violations([(1, 0)], 0, 0, 0)


def test_house_wording_is_unknown_to_the_dictionaries() -> None:
    """The premise of the house vendors: the template-free reader holds them."""
    assert HOUSE_LABELS
    held = [bool(review_reasons(extract_fields(read(inv)), DEFAULT_POLICY)) for inv in house_vendor()]
    assert all(held)


def test_a_row_the_layout_never_saw_below_the_total_holds_the_invoice() -> None:
    """Learnt from an invoice with nothing prepaid; a later one prints a prepayment and the amount
    due in the vendor's own wording, which neither the layout nor the dictionaries know: the
    gross still adds up, but it is not what is due, so it must not be confirmed."""
    vendor = next(
        v.invoices
        for v in vendor_series(2031, 18, 6)
        if v.house_labels and any(i.case.prepaid for i in v.invoices)
    )
    first = next(i for i in vendor if not i.case.prepaid)
    later = next(i for i in vendor if i.case.prepaid)
    fields = with_layouts(later, [learn(first)])
    assert fields.amount_check is not None and not fields.amount_check.confirmed, fields.amount_check
    assert "does not know" in fields.amount_check.rule
    assert review_reasons(fields, DEFAULT_POLICY)


def test_a_legal_footer_below_the_totals_is_not_a_row_the_layout_never_saw() -> None:
    """The footer's registration numbers ("Registered in England and Wales No. 04417856") stand
    below the totals but are no amount: a vendor whose footer names it still posts."""
    for vendor in vendor_series(2031, 18, 6):
        invoices = [i for i in vendor.invoices if not i.case.prepaid]
        if not vendor.house_labels or invoices[0].case.variant != "footer_seller":
            continue
        layout = learn(invoices[0])
        for later in invoices[1:]:
            fields = with_layouts(later, [layout])
            assert fields.amount_check is not None and fields.amount_check.confirmed, fields.amount_check
            assert fields.payable_total == later.case.amount_due
            assert not review_reasons(fields, DEFAULT_POLICY)
        return
    pytest.fail("the series has no house vendor with its name in the legal footer")


DATES_PAGE = f"""\
Halden Tools Ltd                                            VAT No: {HALDEN_VAT}
Delivery date    {{delivery}}
Invoice date     {{issued}}
Invoice no       INV-{{number}}

                                                  Goods              {{net}}
                                                  VAT 20%            {{tax}}
                                                  Total              {{gross}}
"""


def test_a_date_printed_twice_is_learnt_under_its_own_label() -> None:
    """The first invoice was delivered the day it was issued: the confirmed date stands under
    "Delivery date" and "Invoice date". The rule is the invoice date's, so a later invoice
    delivered earlier is read by its issue date."""
    first = DATES_PAGE.format(
        delivery="01.03.2025", issued="01.03.2025", number=1001, net="100.00", tax="20.00", gross="120.00"
    )
    confirmed = dataclasses.replace(
        fields_from_text(first), issue_date=date(2025, 3, 1), seller_name="Halden Tools Ltd"
    )
    layout = L.learn_layout(first, None, confirmed, org_id="acme")
    assert layout is not None
    assert layout.rule("issue_date").anchor == "invoice date"  # type: ignore[union-attr]
    later = DATES_PAGE.format(
        delivery="20.02.2025", issued="05.03.2025", number=1002, net="50.00", tax="10.00", gross="60.00"
    )
    read = L.read_with_layout(L.Page.of(later, None), dataclasses.replace(layout, id=1), page_vendor(later))
    assert read.matched, read.why
    assert read.values["issue_date"].value == date(2025, 3, 5)


def _dates_layout() -> L.VendorLayout:
    first = DATES_PAGE.format(
        delivery="01.03.2025", issued="01.03.2025", number=1001, net="100.00", tax="20.00", gross="120.00"
    )
    confirmed = dataclasses.replace(
        fields_from_text(first),
        issue_date=date(2025, 3, 1),
        seller_name="Halden Tools Ltd",
        net_total=Decimal("100.00"),
        tax_total=Decimal("20.00"),
        payable_total=Decimal("120.00"),
        currency="GBP",
    )
    layout = L.learn_layout(first, None, confirmed, org_id="acme")
    assert layout is not None
    return dataclasses.replace(layout, id=1)


def _read_later(below_totals: str) -> InvoiceFields:
    later = (
        DATES_PAGE.format(
            delivery="20.02.2025", issued="05.03.2025", number=1002, net="50.00", tax="10.00", gross="60.00"
        )
        + below_totals
    )
    text = ExtractedText("pdf", later, None, "pdf-text", 1)
    return L.apply_layouts(text, fields_from_text(later), [_dates_layout()], "acme", page_vendor(later))


def test_a_registration_line_right_under_the_totals_is_no_row_the_layout_never_saw() -> None:
    fields = _read_later("Halden Tools Ltd - Registered in England and Wales No. 04417856\n")
    assert fields.amount_check is not None and fields.amount_check.confirmed, fields.amount_check
    assert fields.payable_total == Decimal("60.00")


def test_a_row_the_layout_never_saw_right_above_the_legal_footer_still_holds_the_invoice() -> None:
    """The legal footer's registration numbers are no totals row, but a prepayment printed right
    above the footer, with no empty line between, is one: the footer must not hide it."""
    fields = _read_later(
        "                                                  Received           20.00\n"
        "                                                  Remit              40.00\n"
        f"Halden Tools Ltd - Registered in England and Wales No. 04417856 - VAT No: {HALDEN_VAT}\n"
    )
    assert fields.amount_check is not None and not fields.amount_check.confirmed, fields.amount_check
    assert "does not know" in fields.amount_check.rule


# -- binding: only the identifier in the seller's position (issue 37) ----------------------------


def _insert_after(text: str, line_text: str, new_line: str) -> str:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == line_text) + 1
    return "\n".join([*lines[:at], new_line, *lines[at:]])


def _read_text(text: str, layout: L.VendorLayout) -> InvoiceFields:
    return L.fields_with_layouts(
        text, None, fields_from_text(text), [layout], org_id="acme", vendor=page_vendor(text)
    )


def _used_layout(fields: InvoiceFields) -> bool:
    return any(s.source.startswith("layout:") for s in fields.sources.values())


def test_a_layout_is_refused_for_another_vendor_that_prints_its_vat_id_as_the_buyers_or_in_a_reference() -> (
    None
):
    """Vendor B's invoices come from the same software as vendor A's (same layout, same wording)
    and print A's VAT id: as the buyer's, in a reference, in an item line. A's layout is bound to
    the VAT id in the seller's position, which on B's page is B's (or none): never applied."""
    invoices = house_vendor()
    layout = learn(invoices[0])
    a_vat = invoices[0].case.seller_vat_id
    assert layout.vendor_key == f"vat:{a_vat}"
    indent = " " * 17
    b = twin(invoices[1], 1)
    b_text = read(b).text
    b_own_line = f"{b.case.seller_name} - VAT Reg. No.: {b.case.seller_vat_id}"
    assert b_own_line in b_text
    pages = {
        "A's VAT id in B's buyer block": _insert_after(
            b_text, "Hotel Zonneweide", f"{indent}VAT No.: {a_vat}"
        ),
        "in a reference": _insert_after(b_text, "INVOICE", f"{indent}Your reference: VAT {a_vat}"),
        "in an item line": b_text.replace("1. Service item 1", f"1. Service item 1 for VAT {a_vat}"),
    }
    # B printing no VAT id of its own: A's, in the buyer's block, is still not the seller's.
    pages["B prints none of its own"] = pages["A's VAT id in B's buyer block"].replace(b_own_line, "")
    for what, text in pages.items():
        assert a_vat in text
        fields = _read_text(text, layout)
        assert not _used_layout(fields), (what, fields.sources)
        # (Who the seller is, on a page printing no VAT id of its own, is the vendor registry's
        # question, not a layout's: the template-free reader's answer stands, as read.)
    # The control: A's own later page, which prints its buyer's VAT id too, is read with it.
    a_text = _insert_after(
        read(invoices[1]).text, "Hotel Zonneweide", f"{indent}VAT No.: {b.case.seller_vat_id}"
    )
    fields = _read_text(a_text, layout)
    assert _used_layout(fields) and fields.invoice_number == invoices[1].case.invoice_number


def test_a_name_keyed_layout_never_applies() -> None:
    """`name:` keys (stored by earlier versions) bind nothing: a name can be printed anywhere,
    in an item line of another vendor's page."""
    invoices = house_vendor()
    layout = dataclasses.replace(
        learn(invoices[0]), vendor_key=f"name:{L.norm_name(invoices[0].case.seller_name)}"
    )
    assert not _used_layout(_read_text(read(invoices[1]).text, layout))


# -- nothing taught outranks the page's own labels (issue 37) -------------------------------------

_W = " " * 17
ITEM_ROWS_PAGE = "\n".join(
    [
        f"{_W}Contoso Ltd - VAT Reg. No.: GB123456782",
        f"{_W}Bill to:",
        f"{_W}Fabrikam Inc",
        f"{_W}{'':40}Invoice no.:   INV-2025-0042",
        f"{_W}{'':40}Date:          2025-03-14",
        "",
        f"{_W}Consulting{'':40}400.00",
        f"{_W}Travel    {'':40}100.00",
        f"{_W}Materials {'':40}500.00",
        f"{_W}Balance due{'':39}600.00 GBP",
    ]
)


def _rule_right_of(page: L.Page, field: str, anchor: str) -> L.FieldRule:
    seg = next(s for s in page.segs() if L.norm_text(s.text) == anchor)
    value = next(s for s in page.lines[seg.line] if s.col > seg.col)
    return L.FieldRule(field, anchor, seg.col, "right", value.col - seg.col, 0, None, value.end - seg.col)


def test_an_amount_a_layout_places_against_the_pages_own_label_holds_the_invoice() -> None:
    """A layout (imported with its roles moved) places the due on an item row, 500.00, and the net
    and tax on two others that add up to it; the page's own label says "Balance due 600.00".
    The arithmetic alone would confirm 500.00: the label holds the invoice, both readings shown."""
    page = L.Page.of(ITEM_ROWS_PAGE)
    rules = (
        _rule_right_of(page, "amount:net", "consulting"),
        _rule_right_of(page, "amount:tax", "travel"),
        _rule_right_of(page, "amount:due", "materials"),
    )
    layout = L.VendorLayout("acme", "vat:GB123456782", None, None, "GBP", L.fingerprint_of(page), rules, id=9)
    fields = _read_text(ITEM_ROWS_PAGE, layout)
    assert fields.sources["payable_total"].source.startswith("layout:9:")  # it was read with it
    check = fields.amount_check
    assert check is not None and not check.confirmed, check
    assert "'Balance due' 600.00" in check.rule and "places due 500.00" in check.rule, check.rule
    reasons = review_reasons(fields, DEFAULT_POLICY)
    assert any(r.startswith("amount_unconfirmed") and "600.00" in r and "500.00" in r for r in reasons)


# -- what a person types, where the page shows it (issue 54) --------------------------------------

TITLE_VAT = valid_vat_id("DE", "281907414")
TITLE_PAGE = f"""\
Lindqvist Werkzeugbau GmbH                                  USt-IdNr.: {TITLE_VAT}
Teilrechnung {{part}} zu Auftrag 118 Nr. {{number}} vom {{issued}}

Pos. 1   Fraesarbeiten                                      {{net}}
                                                  Nettobetrag        {{net}}
                                                  MwSt 19%           {{tax}}
                                                  Gesamtbetrag       {{gross}}
Stylesheet-Version 2.1 vom 10.11.2025
"""


def _title_page(part: int, number: str, issued: str, net: str, tax: str, gross: str) -> str:
    return TITLE_PAGE.format(part=part, number=number, issued=issued, net=net, tax=tax, gross=gross)


def test_a_typed_number_and_date_printed_in_a_title_line_are_read_there_on_the_next_page() -> None:
    """The person typed the number and the issue date, which the page prints only inside its title
    line ("Teilrechnung 3 zu Auftrag 118 Nr. 210111 vom 30.05.2025"). The layout learns the words
    right before each ("nr", "vom") near their column, so the vendor's next page is read there,
    not at the stylesheet's "vom 10.11.2025"."""
    first = _title_page(3, "210111", "30.05.2025", "1000.00", "190.00", "1190.00")
    confirmed = dataclasses.replace(
        fields_from_text(first),
        invoice_number="210111",
        issue_date=date(2025, 5, 30),
        seller_vat_id=TITLE_VAT,
        net_total=Decimal("1000.00"),
        tax_total=Decimal("190.00"),
        payable_total=Decimal("1190.00"),
    )
    layout = L.learn_layout(first, None, confirmed, org_id="acme")
    assert layout is not None
    number, issued = layout.rule("invoice_number"), layout.rule("issue_date")
    assert number is not None and (number.relation, number.anchor) == ("after", "nr"), layout.rules
    assert issued is not None and (issued.relation, issued.anchor) == ("after", "vom"), layout.rules
    later = _title_page(4, "210187", "30.06.2025", "500.00", "95.00", "595.00")
    text = ExtractedText("pdf", later, None, "pdf-text", 1)
    fields = L.apply_layouts(
        text, fields_from_text(later), [dataclasses.replace(layout, id=1)], "acme", page_vendor(later)
    )
    assert (fields.invoice_number, fields.issue_date) == ("210187", date(2025, 6, 30)), fields.sources
    assert fields.sources["invoice_number"].source.startswith("layout:1:")
    # The export keeps the new relation, and an import reads it back.
    assert L.VendorLayout.from_json(layout.to_json(), org_id="acme").rule("issue_date") == issued


def test_a_typed_value_the_page_does_not_print_teaches_nothing_and_says_so() -> None:
    first = _title_page(3, "210111", "30.05.2025", "1000.00", "190.00", "1190.00")
    confirmed = dataclasses.replace(
        fields_from_text(first),
        invoice_number="210111",
        issue_date=date(2025, 5, 30),
        due_date=date(2025, 6, 29),  # typed from the contract: not on the page
        seller_vat_id=TITLE_VAT,
    )
    layout = L.learn_layout(first, None, confirmed, org_id="acme")
    assert layout is not None and layout.rule("due_date") is None
    assert any(w.startswith("due_date 2025-06-29: not printed on the page") for w in layout.not_learnt), (
        layout.not_learnt
    )


@pytest.mark.slow
def test_the_registry_is_asked_by_the_sellers_own_vat_id_wherever_the_page_prints_it() -> None:
    """Every generated vendor's page offers the registry its seller's VAT id: in a letterhead, a
    legal footer, or on a line naming the seller right under the buyer's block (which the block
    rule alone would take for the buyer's)."""
    for vendor in (*series(), *(v.invoices for v in vendor_series(2031, 18, 6))):
        for inv in vendor:
            offered = [i.value for i in identifiers_for_the_registry(read(inv).text)]
            assert inv.case.seller_vat_id in offered, (inv.case.name, offered)
