from __future__ import annotations

import zlib
from datetime import date, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invoice_pipeline.domain.fields import DocumentType, InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate, find_match


def cand(
    invoice_id: str,
    *,
    org: str = "org-1",
    number: str = "INV-00123",
    seller: str | None = "Acme GmbH",
    vat: str | None = "DE123456789",
    total: str = "1436.50",
    currency: str | None = "EUR",
    issued: date | None = date(2024, 3, 1),
    doc_type: DocumentType = "invoice",
) -> MatchCandidate:
    fields = InvoiceFields(
        invoice_number=number,
        document_type=doc_type,
        issue_date=issued,
        currency=currency,
        payable_total=Decimal(total),
        seller_name=seller,
        seller_vat_id=vat,
    )
    return MatchCandidate.from_fields(invoice_id, org, fields)


def test_exact_key_match_with_reasons() -> None:
    m = find_match(cand("new", number="INV 123"), [cand("old")])
    assert m is not None and m.how == "exact_key" and m.original_id == "old" and m.score == 100.0
    assert any("1436.50 EUR" in r for r in m.reasons)


def test_same_key_different_amount_is_not_a_duplicate() -> None:
    assert find_match(cand("new", total="2005.00"), [cand("old", total="1125.00")]) is None


def test_amount_within_tolerance_is_only_suspected() -> None:
    m = find_match(cand("new", total="1436.51"), [cand("old")])
    assert m is not None and not m.exact and m.how == "fuzzy"
    assert find_match(cand("new", total="1436.52"), [cand("old")]) is None


def test_different_currency_is_not_a_duplicate() -> None:
    assert find_match(cand("new", currency="USD"), [cand("old")]) is None


def test_never_across_orgs() -> None:
    assert find_match(cand("new", org="org-2"), [cand("old", org="org-1")]) is None


def test_credit_note_never_matches_invoice() -> None:
    assert find_match(cand("new", doc_type="credit_note"), [cand("old")]) is None


def test_same_number_different_seller() -> None:
    other = cand("old", seller="Globex Ltd", vat="GB999999973")
    assert find_match(cand("new"), [other]) is None


def test_fuzzy_match_when_one_side_lacks_vat() -> None:
    m = find_match(
        cand("new", vat=None, seller="ACME GmbH.", number="INV123"), [cand("old", seller="Acme GmbH")]
    )
    assert m is not None and m.how == "fuzzy" and m.score >= 90 and not m.exact


def test_fuzzy_needs_same_digits() -> None:
    assert find_match(cand("new", vat=None, number="INV-00124"), [cand("old")]) is None


def test_fuzzy_needs_close_dates() -> None:
    new = cand("new", vat=None, issued=date(2024, 3, 10))
    assert find_match(new, [cand("old")]) is None


def test_best_match_wins_then_earliest() -> None:
    originals = [
        cand("fuzzy", vat=None, seller="Acme Gmbh", issued=date(2024, 3, 3)),
        cand("first"),
        cand("second"),
    ]
    m = find_match(cand("new"), originals)
    assert m is not None and m.original_id == "first" and m.how == "exact_key"


def test_ignores_itself() -> None:
    assert find_match(cand("same"), [cand("same")]) is None


names = st.text(alphabet=st.characters(categories=["L"]), min_size=3, max_size=12)


@given(
    st.integers(1, 10**6),
    st.sampled_from(["INV-{:06d}", "INV {}", "inv{}", "Inv.#{:05d}"]),
    st.integers(0, 3),
)
def test_reformatted_copy_matches_original(n: int, fmt: str, shift: int) -> None:
    original = cand("old", number=f"INV-{n}")
    copy = cand("new", number=fmt.format(n), issued=date(2024, 3, 1) + timedelta(days=shift))
    assert find_match(copy, [original]) is not None


@given(names, names, st.integers(1, 10**6))
def test_different_sellers_never_match_on_number_alone(a: str, b: str, n: int) -> None:
    old = cand("old", seller=f"{a} Trading", vat=f"DE{zlib.crc32(a.encode()) % 10**9:09d}", number=str(n))
    new = cand("new", seller=f"{b} Trading", vat=f"DE{zlib.crc32(b.encode()) % 10**9:09d}", number=str(n))
    if old.key.vendor != new.key.vendor:
        assert find_match(new, [old]) is None


@given(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_org_isolation(org_a: str, org_b: str) -> None:
    if org_a != org_b:
        assert find_match(cand("new", org=org_a), [cand("old", org=org_b)]) is None


@given(st.sampled_from(["invoice", "credit_note"]), st.booleans())
def test_credit_note_vs_invoice_never(doc_type: DocumentType, has_vat: bool) -> None:
    other: DocumentType = "credit_note" if doc_type == "invoice" else "invoice"
    vat = "DE123456789" if has_vat else None
    assert find_match(cand("new", doc_type=doc_type, vat=vat), [cand("old", doc_type=other, vat=vat)]) is None


@pytest.mark.parametrize("vat", ["123456789", "DE 123 456 789", "de.123.456.789", "DE-123456789"])
def test_vat_id_spelt_differently_is_an_exact_duplicate(vat: str) -> None:
    m = find_match(cand("new", vat=vat), [cand("old", vat="DE123456789")])
    assert m is not None and m.exact


def test_equal_names_without_vat_ids_are_exact_but_name_against_vat_is_suspected() -> None:
    both_by_name = find_match(cand("new", vat=None, seller="ACME GMBH"), [cand("old", vat=None)])
    assert both_by_name is not None and both_by_name.exact
    one_side_vat = find_match(cand("new", vat=None), [cand("old")])
    assert one_side_vat is not None and not one_side_vat.exact


@pytest.mark.parametrize("number", ["5000", "INV-5000", "RE 05000", "INV-5OOO", "Inv.#5000"])
def test_reformatted_or_ocr_confused_number_is_suspected(number: str) -> None:
    m = find_match(cand("new", number=number), [cand("old", number="INV-5000")])
    assert m is not None
    assert m.exact == (number in ("INV-5000", "Inv.#5000")), m


@pytest.mark.parametrize(
    ("seller", "vat"),
    [("Acme GmbH", "DE999999999"), ("Acme GmbH", "FR12345678901"), ("Globex Ltd", None)],
)
def test_same_number_and_total_from_another_seller_never_matches(seller: str, vat: str | None) -> None:
    assert find_match(cand("new", seller=seller, vat=vat), [cand("old")]) is None


def test_exact_beats_an_earlier_fuzzy_candidate() -> None:
    m = find_match(cand("new"), [cand("fuzzy", total="1436.51"), cand("exact")])
    assert m is not None and m.original_id == "exact" and m.exact


# -- number twins: the check that runs when no blocking key can be formed (issue 18) --------------


def test_a_number_without_digits_is_still_compared_and_an_identical_copy_is_exact() -> None:
    original, copy = cand("old", number="INV-ABC"), cand("new", number="inv abc")
    assert original.block is None and copy.block is None  # no digits, no blocking key
    m = find_match(copy, [original])
    assert m is not None and m.exact and m.original_id == "old"


def test_a_copy_without_currency_is_suspected_never_exact() -> None:
    """A scan that found no currency, of an e-invoice that stated EUR: held, never paid twice."""
    m = find_match(cand("scan", currency=None, vat=None), [cand("xml")])
    assert m is not None and not m.exact
    assert any("currency missing on one side" in r for r in m.reasons)


def test_two_invoices_without_currency_are_at_most_suspected() -> None:
    m = find_match(cand("b", currency=None), [cand("a", currency=None)])
    assert m is not None and not m.exact


@pytest.mark.parametrize(
    "other",
    [
        {"total": "1436.60"},  # a different amount stated on both sides: another invoice
        {"currency": "USD"},
        {"seller": "Globex Ltd", "vat": "DE999999999"},
        {"org": "org-2"},
        {"doc_type": "credit_note"},
    ],
)
def test_number_twins_that_state_a_difference_are_not_copies(other: dict[str, object]) -> None:
    new = cand("new", number="INV-ABC", **other)  # type: ignore[arg-type]
    assert find_match(new, [cand("old", number="INV-ABC")]) is None
