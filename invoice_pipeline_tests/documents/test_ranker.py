"""Issue 40: the candidates a page offers for each key field, their features, and the ranker's
contract (weights load, scores are deterministic, an unsure choice is no value with a reason).
No training here: the shipped weights are read as the product reads them."""

from __future__ import annotations

import io
import math
from datetime import date
from decimal import Decimal

from fpdf import FPDF

from invoice_pipeline.documents.pdf import text_layer
from invoice_pipeline.documents.reading.candidates import (
    KEY_FIELDS,
    Candidate,
    amount_candidates,
    currency_candidates,
    date_candidates,
    name_candidates,
    number_candidates,
    vat_candidates,
    vat_checksum,
)
from invoice_pipeline.documents.reading.page_view import PageView
from invoice_pipeline.documents.reading.ranker import FieldModel, Ranker, ranked_fields, shipped_ranker
from invoice_pipeline.documents.reading.words import TextBoxes
from invoice_pipeline.documents.text_fields import fields_from_text, hand_fields_from_text
from invoice_pipeline.samples.page_layouts import page_cases, page_pdf
from invoice_pipeline.samples.render import FIXED_PDF_DATE


def _view(*lines: str, boxes: TextBoxes | None = None) -> PageView:
    return PageView("\n".join(lines), boxes)


def _one(cands: list[Candidate], value: object) -> Candidate:
    found = [c for c in cands if c.value == value]
    assert len(found) == 1, f"{value!r} among {[c.value for c in cands]}"
    return found[0]


# ---------------------------------------------------------------- candidates and features


def test_an_invoice_number_is_a_candidate_with_its_label_left_of_it_or_above_it() -> None:
    view = _view(
        "Invoice number:   XK-4410",
        "",
        "",
        "",
        "Order ref.   PO 7781",
        "",
        "Rechnungsnummer",
        "R-2025/17",
    )
    cands = list(number_candidates(view))
    labelled_left = _one(cands, "XK-4410").features
    assert labelled_left["number_left"] == 1.0 and labelled_left["number_above"] == 0.0
    under = _one(cands, "R-2025/17").features
    assert under["number_above"] == 1.0 and under["number_left"] == 0.0
    po = _one(cands, "7781").features
    assert po["po_near"] == 1.0 and po["number_near"] == 0.0
    # Dates and decimal amounts are never invoice numbers.
    assert not [c for c in number_candidates(_view("Date: 12.03.2025   Total 1.234,50")) if c.value]


def test_an_ambiguous_slash_date_is_offered_both_ways_and_the_page_can_prove_its_order() -> None:
    cands = list(date_candidates(_view("Invoice date: 04/01/2017", "Due date: 04/15/2017")))
    day_first = _one(cands, date(2017, 1, 4)).features
    month_first = _one(cands, date(2017, 4, 1)).features
    assert day_first["month_first"] == 0.0 and month_first["month_first"] == 1.0
    # "04/15/2017" can only be month-first: the page says which order it writes.
    assert month_first["page_month_first"] == 1.0 and month_first["page_day_first"] == 0.0
    assert month_first["issue_left"] == 0.0 and month_first["issue_same"] == 1.0
    due = _one(cands, date(2017, 4, 15)).features
    assert due["due_near"] == 1.0 and due["issue_same"] == 0.0
    # An impossible date is no candidate.
    assert list(date_candidates(_view("Invoice date: 31/02/2017"))) == []


def test_payable_candidates_carry_the_page_arithmetic_and_unlabelled_totals_are_candidates_too() -> None:
    view = _view(
        "Subtotal           100.00",
        "VAT 20%             20.00",
        "Total incl. VAT    120.00",
        "Already paid        20.00",
        "Balance due        100.00",
        "",
        "Grand Bazaar sum   555.00",
    )
    cands = list(amount_candidates(view))
    due = [c for c in cands if c.features.get("kind_due") == 1.0]
    assert [c.value for c in due] == [Decimal("100.00")]
    assert due[0].features["arithmetic"] == 1.0 and due[0].features["confirmed"] == 1.0
    gross = _one([c for c in cands if c.features.get("kind_gross") == 1.0], Decimal("120.00"))
    assert gross.features["arithmetic"] == 0.0
    loose = _one([c for c in cands if c.features.get("unlabelled") == 1.0], Decimal("555.00"))
    assert loose.features["arithmetic"] == 0.0


def test_currency_comes_only_from_what_the_page_prints_and_the_vat_country_only_confirms() -> None:
    printed = {
        c.value: c for c in currency_candidates(_view("Amount due   $ 12.00", "Paid in US dollars"), "EUR")
    }
    assert set(printed) == {"USD"}
    assert printed["USD"].features["dollar_sign"] > 0 and printed["USD"].features["word"] > 0
    assert printed["USD"].features["vat_country_agrees"] == 0.0
    rupees = {c.value for c in currency_candidates(_view("Total payable   1,500.00 Rupees"), None)}
    assert rupees == {"INR"}
    confirmed = {c.value: c for c in currency_candidates(_view("Total   12,00 EUR"), "EUR")}
    assert confirmed["EUR"].features["vat_country_agrees"] == 1.0
    # Nothing printed: a German VAT id adds no currency.
    assert list(currency_candidates(_view("Total   12,00"), "EUR")) == []


def test_the_letterhead_is_the_largest_type_and_the_buyer_block_is_marked() -> None:
    lines = ("Nordlicht Werkstatt GmbH", "Bill to:", "Kundenhaus AG", "Invoice number: 17")
    boxes = TextBoxes(
        (
            ((40.0, 30.0, 260.0, 48.0),),  # 18 pt
            ((40.0, 120.0, 80.0, 130.0),),  # 10 pt
            ((40.0, 132.0, 120.0, 142.0),),
            ((300.0, 132.0, 420.0, 142.0),),
        )
    )
    cands = list(name_candidates(_view(*lines, boxes=boxes), "Kundenhaus AG"))
    head = _one(cands, "Nordlicht Werkstatt GmbH").features
    buyer = _one(cands, "Kundenhaus AG").features
    assert head["font_is_max"] == 1.0 and head["font_rel"] == 1.0
    assert buyer["font_is_max"] == 0.0 and math.isclose(buyer["font_rel"], 10 / 18)
    assert buyer["buyer_near"] == 1.0 and buyer["buyer"] == 1.0 and head["buyer"] == 0.0
    assert head["buyer_near"] == 0.0
    assert head["legal_form"] == 1.0 and head["y"] < buyer["y"]


def test_a_text_layer_keeps_each_segments_bold_share_beside_its_box() -> None:
    case = page_cases(4040, 1)[0]  # a letterhead page: the seller's name set in Helvetica Bold
    layer = text_layer(page_pdf(case), ocr=False)
    boxes = TextBoxes.from_structured(layer.structured)
    assert boxes is not None and boxes.bold is not None
    seg = next(s for s in PageView(layer.text, boxes).doc.segs() if s.text == case.seller_name)
    assert boxes.bold_share(seg.line, seg.index) == 1.0
    regular = [boxes.bold_share(s.line, s.index) for s in PageView(layer.text, boxes).doc.segs()]
    assert 0.0 in regular  # the address and the items are regular type
    # Stored and read back the same; an older stored layer without weights still reads its boxes.
    assert TextBoxes.from_structured(boxes.to_structured()) == boxes
    old = TextBoxes.from_structured(TextBoxes(boxes.lines).to_structured())
    assert old is not None and old.bold is None and old.bold_share(seg.line, seg.index) is None
    # Weights that do not line up with the boxes are dropped, never shifted onto other segments.
    shifted = TextBoxes(boxes.lines, boxes.bold[1:] + ((),))
    assert TextBoxes.from_structured(shifted.to_structured()) == TextBoxes(boxes.lines)


def test_the_letterhead_is_ranked_by_size_and_weight_and_a_country_line_is_no_seller() -> None:
    lines = (
        "Nordlicht Werkstatt",
        "Hafenstrasse 4",
        "Deutschland",
        "Date d'échéance",
        "",
        "Total   12,00 EUR",
    )
    boxes = TextBoxes(
        (
            ((40.0, 30.0, 200.0, 40.0),),  # 10 pt bold
            ((40.0, 42.0, 120.0, 52.0),),  # 10 pt regular
            ((40.0, 54.0, 120.0, 64.0),),
            ((40.0, 66.0, 120.0, 76.0),),
            (),
            ((300.0, 760.0, 340.0, 770.0), (360.0, 760.0, 420.0, 770.0)),  # the foot of the page
        ),
        ((1.0,), (0.0,), (0.0,), (0.0,), (), (0.0, 0.0)),
    )
    view = _view(*lines, boxes=boxes)
    cands = list(name_candidates(view, None))
    head = _one(cands, "Nordlicht Werkstatt").features
    street = _one(cands, "Hafenstrasse 4").features
    assert head["bold"] == 1.0 and street["bold"] == 0.0
    assert head["letterhead"] == 1.0 and street["letterhead"] == 0.5  # same size: the bold line first
    assert head["top_band"] == 1.0 and head["bottom_band"] == 0.0 and head["font_median_rel"] > 0
    assert "Deutschland" not in {c.value for c in cands}  # a country alone is no company's name
    assert _one(cands, "Date d'échéance").features["name_is_label"] == 1.0 and head["name_is_label"] == 0.0
    total = next(c for c in amount_candidates(view) if c.value == Decimal("12.00")).features
    assert total["bottom_band"] == 1.0 and total["letterhead"] == 0.0 and total["top_band"] == 0.0


def test_vat_ids_are_read_after_a_tax_word_and_checked_where_the_country_has_a_public_rule() -> None:
    cands = list(vat_candidates(_view("TVA FR40303265045   Client VAT: DE136695976"), None))
    assert {c.value for c in cands} == {"FR40303265045", "DE136695976"}
    assert _one(cands, "DE136695976").features["vat_same"] == 1.0
    assert vat_checksum("FR40303265045") is True and vat_checksum("FR41303265045") is False
    assert vat_checksum("DE136695976") is True and vat_checksum("DE136695977") is False
    assert vat_checksum("IT00743110157") is True and vat_checksum("IT00743110158") is False
    assert vat_checksum("GB123456789") is None


# ---------------------------------------------------------------- the ranker's contract


def test_the_shipped_weights_load_for_every_key_field_and_score_deterministically() -> None:
    ranker = shipped_ranker()
    assert set(ranker.models) == set(KEY_FIELDS)
    for model in ranker.models.values():
        assert model.weights and all(math.isfinite(w) for w in model.weights.values())
        assert model.use in ("hand", "fill", "ranker") and 0 < model.min_confidence < 1
    page = "\n".join(("Invoice number:   XK-4410", "Order ref.   PO 7781", "Invoice date: 04/01/2017"))
    view = PageView(page, None)
    for field, cands in (
        ("invoice_number", list(number_candidates(view))),
        ("issue_date", list(date_candidates(view))),
    ):
        first, second = ranker.choose(field, cands), ranker.choose(field, list(cands))
        assert first == second


def _model(field: str, min_confidence: float, use: str = "fill") -> FieldModel:
    return FieldModel(field, {"font_rel": 8.0, "legal_form": 1.0}, 0.0, min_confidence, use)


def test_a_low_confidence_leaves_the_field_empty_with_a_reason() -> None:
    cands = [
        Candidate("seller_name", "Alpha Ltd", 0, 0, {"font_rel": 1.0, "legal_form": 1.0}),
        Candidate("seller_name", "Beta Ltd", 1, 0, {"font_rel": 1.0, "legal_form": 1.0}),
    ]
    unsure = Ranker({"seller_name": _model("seller_name", 0.6)}).choose("seller_name", cands)
    assert unsure.candidate is None and math.isclose(unsure.confidence, 0.5)
    assert "below 0.60" in unsure.reason and "not guessed" in unsure.reason
    sure = Ranker({"seller_name": _model("seller_name", 0.4)}).choose("seller_name", cands)
    # A tie goes to the value printed first.
    assert sure.candidate is not None and sure.candidate.value == "Alpha Ltd"
    nothing = Ranker({"seller_name": _model("seller_name", 0.4)}).choose("seller_name", [])
    assert nothing.candidate is None and nothing.reason


def test_the_same_value_printed_twice_adds_up_to_one_choice() -> None:
    cands = [
        Candidate("seller_name", "Alpha Ltd", 0, 0, {"font_rel": 0.5}),
        Candidate("seller_name", "Beta Ltd", 1, 0, {"font_rel": 0.55}),
        Candidate("seller_name", "Alpha Ltd", 9, 0, {"font_rel": 0.5}),
    ]
    choice = Ranker({"seller_name": _model("seller_name", 0.1)}).choose("seller_name", cands)
    assert choice.candidate is not None and choice.candidate.value == "Alpha Ltd"
    assert choice.confidence > 0.5


# ---------------------------------------------------------------- in the product

_NO_SELLER_LABEL = "\n".join(
    (
        "   Nordlicht Werkstatt",
        "",
        "   Invoice number:   XK-4410",
        "   Invoice date:   2025-03-04",
        "   Total due:   120.00 EUR",
    )
)
_BOXES = TextBoxes(
    (
        ((40.0, 30.0, 260.0, 48.0),),
        (),
        ((40.0, 120.0, 200.0, 130.0),),
        ((40.0, 132.0, 200.0, 142.0),),
        ((40.0, 144.0, 200.0, 154.0),),
    )
)


def test_the_ranker_fills_a_field_the_hand_reader_left_empty_and_says_where_and_how_sure() -> None:
    hand = hand_fields_from_text(_NO_SELLER_LABEL, boxes=_BOXES)
    assert hand.seller_name is None
    ranker = Ranker({f: _model(f, 0.5, "fill" if f == "seller_name" else "hand") for f in KEY_FIELDS})
    filled = ranked_fields(hand, _NO_SELLER_LABEL, _BOXES, ranker)
    assert filled.seller_name == "Nordlicht Werkstatt"
    source = filled.sources["seller_name"]
    assert source.source.endswith(":ranker") and source.page == 1 and source.box == _BOXES.lines[0][0]
    assert source.confidence >= 0.5
    # Every other field is the hand reader's.
    assert (filled.invoice_number, filled.payable_total) == (hand.invoice_number, hand.payable_total)


def test_an_unsure_ranker_leaves_the_field_for_a_person_never_a_guess() -> None:
    hand = hand_fields_from_text(_NO_SELLER_LABEL, boxes=_BOXES)
    ranker = Ranker({f: _model(f, 0.999, "fill" if f == "seller_name" else "hand") for f in KEY_FIELDS})
    held = ranked_fields(hand, _NO_SELLER_LABEL, _BOXES, ranker)
    assert held.seller_name is None
    assert "below 1.00" in (held.sources["seller_name"].reason or "")


def test_the_product_reads_each_field_as_the_shipped_weights_say() -> None:
    fields = fields_from_text(_NO_SELLER_LABEL, boxes=_BOXES)
    hand = hand_fields_from_text(_NO_SELLER_LABEL, boxes=_BOXES)
    ranker = shipped_ranker()
    expected = ranked_fields(hand, _NO_SELLER_LABEL, _BOXES, ranker)
    assert fields == expected
    for name in KEY_FIELDS:
        if ranker.models[name].use == "hand":
            assert getattr(fields, name) == getattr(hand, name)
            assert fields.sources[name] == hand.sources[name]


def _letterhead_page() -> bytes:
    """A German invoice whose only sign of its issuer is a bold letterhead: no legal form, no
    seller label, no legal footer (the rules read no seller from it)."""
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_PDF_DATE)
    pdf.set_auto_page_break(False)
    pdf.add_page()
    pdf.set_font("Helvetica", "B", 18)
    pdf.set_xy(20, 15)
    pdf.cell(100, 8, "Nordlicht Werkstatt")
    pdf.set_font("Helvetica", "", 10)
    rows = [(20, 25 + 5 * k, t) for k, t in enumerate(("Hafenstrasse 4", "24103 Kiel"))]
    rows += [(20, 50 + 6 * k, t) for k, t in enumerate(("Kundenhaus", "Marktplatz 7", "20095 Hamburg"))]
    rows += [(110, 50, "Rechnungsnummer:   RE-2025-0417"), (110, 56, "Rechnungsdatum:   04.03.2025")]
    rows += [(20, 85, "RECHNUNG"), (110, 110, "Nettobetrag   100,00 EUR"), (110, 116, "USt 19 %   19,00 EUR")]
    rows += [(110, 122, "Gesamtbetrag   119,00 EUR")]
    for x, y, text in rows:
        pdf.set_xy(x, y)
        pdf.cell(90, 5, text.replace("   ", " " * 12))
    out = io.BytesIO()
    pdf.output(out)
    return out.getvalue()


def test_the_shipped_weights_fill_a_seller_from_a_bold_letterhead_the_rules_leave_empty() -> None:
    layer = text_layer(_letterhead_page(), ocr=False)
    boxes = TextBoxes.from_structured(layer.structured)
    assert boxes is not None and boxes.bold is not None
    assert hand_fields_from_text(layer.text, boxes=boxes).seller_name is None
    assert shipped_ranker().models["seller_name"].use in ("fill", "ranker")
    fields = fields_from_text(layer.text, boxes=boxes)
    assert fields.seller_name == "Nordlicht Werkstatt"
    source = fields.sources["seller_name"]
    assert source.source.endswith(":ranker") and source.page == 1 and source.box is not None
    assert source.confidence >= shipped_ranker().models["seller_name"].min_confidence
