"""A Factur-X/ZUGFeRD PDF's visible page held against its own XML (issue 55).

A person reading the PDF sees the page; the ledger records the XML. When the two name another
invoice number, date, amount due, currency, seller VAT id or account to pay, the invoice is held
(`page_disagrees_with_xml`) with both values, instead of posted on the XML's word.

The XML stays the source of the values; the page is a witness. A field is in disagreement only
when the page reader read a value for it that differs from the XML's *and* the XML's value is
printed nowhere on the page: a page that prints the XML's value agrees (the reader may have
picked another number on it), and a field the page does not print is no disagreement.

For a lineless profile under the German rules the roles swap (`compare_evidence`): the page is
the invoice, read as any page, and the XML is the witness.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from ..domain.fields import CURRENCY_FROM_VAT_COUNTRY, FieldSource, InvoiceFields, PageDisagreement
from ..domain.identity import compact, ibans_on_page
from ..domain.normalize import normalize_invoice_number, normalize_vat_id, number_skeleton
from .extracted import ExtractedText
from .reading.words import TextBoxes
from .text_fields import fields_from_text

# How each currency may be printed besides its ISO code.
_CURRENCY_SIGNS: dict[str, tuple[str, ...]] = {
    "EUR": ("€", "EURO"),
    "GBP": ("£",),
    "USD": ("US$", "$"),
    "CHF": ("SFR", "FR."),
    "JPY": ("¥",),
}


@dataclass(frozen=True)
class PrintedPage:
    """The page's text in the forms the comparisons search."""

    text: str
    upper: str
    alnum: str  # upper-case letters and digits only

    @classmethod
    def of(cls, text: str) -> PrintedPage:
        upper = text.upper()
        return cls(text, upper, re.sub(r"[^0-9A-Z]", "", upper))


def number_printed(value: str, page: PrintedPage) -> bool:
    wanted = normalize_invoice_number(value)
    if not wanted:
        return False
    return any(normalize_invoice_number(token) == wanted for token in re.findall(r"\S+", page.text))


def _same_number(xml: str, printed: str) -> bool:
    if normalize_invoice_number(xml) == normalize_invoice_number(printed):
        return True
    # One seller's number is one number whatever its prefix (issue 58, domain/normalize):
    # "IFR_2200566" printed as "2200566" is the same invoice.
    skeleton = number_skeleton(xml)
    return bool(skeleton) and skeleton == number_skeleton(printed)


def _date_forms(value: date) -> list[str]:
    d, m, y = value.day, value.month, value.year
    forms = {
        f"{d:02d}.{m:02d}.{y}",
        f"{d}.{m}.{y}",
        f"{d:02d}/{m:02d}/{y}",
        f"{m:02d}/{d:02d}/{y}",
        f"{d:02d}-{m:02d}-{y}",
        value.isoformat(),
        f"{y}{m:02d}{d:02d}",
        f"{d:02d}.{m:02d}.{y % 100:02d}",
        f"{d:02d}/{m:02d}/{y % 100:02d}",
    }
    return sorted(forms)


def _date_printed(value: date, page: PrintedPage) -> bool:
    return any(re.search(rf"(?<![0-9]){re.escape(form)}(?![0-9])", page.text) for form in _date_forms(value))


def _amount_forms(value: Decimal) -> list[str]:
    amount = abs(value).quantize(Decimal("0.01"))
    whole, cents = f"{amount:f}".split(".")
    grouped = f"{int(whole):,}"
    forms = {
        f"{whole}.{cents}",
        f"{whole},{cents}",
        f"{grouped}.{cents}",
        f"{grouped.replace(',', '.')},{cents}",
        f"{grouped.replace(',', ' ')},{cents}",
        f"{grouped.replace(',', chr(0xA0))},{cents}",
        f"{grouped.replace(',', chr(0x202F))},{cents}",
        f"{grouped.replace(',', chr(0x27))}.{cents}",
    }
    if cents == "00":
        forms |= {whole, grouped, grouped.replace(",", ".")}
    return sorted(forms)


def _amount_printed(value: Decimal, page: PrintedPage) -> bool:
    return any(
        re.search(rf"(?<![0-9.,]){re.escape(form)}(?![0-9]|[.,][0-9])", page.text)
        for form in _amount_forms(value)
    )


def _currency_printed(code: str, page: PrintedPage) -> bool:
    if re.search(rf"(?<![A-Z]){re.escape(code.upper())}(?![A-Z])", page.upper):
        return True
    return any(sign in page.upper for sign in _CURRENCY_SIGNS.get(code.upper(), ()))


def _vat_printed(value: str, page: PrintedPage) -> bool:
    national = normalize_vat_id(value)
    return bool(national) and national is not None and national in page.alnum


@dataclass(frozen=True)
class _Comparison:
    """One key field: the XML's and the page's values as shown, whether they are the same
    value, and whether the XML's value is printed anywhere on the page."""

    field: str
    same: Callable[[object, object], bool]
    printed: Callable[[object, PrintedPage], bool]


def _shown(value: object) -> str:
    return value.isoformat() if isinstance(value, date) else str(value)


_COMPARED: tuple[_Comparison, ...] = (
    _Comparison(
        "invoice_number", lambda a, b: _same_number(str(a), str(b)), lambda v, p: number_printed(str(v), p)
    ),
    _Comparison("issue_date", lambda a, b: a == b, lambda v, p: isinstance(v, date) and _date_printed(v, p)),
    _Comparison(
        "payable_total",
        lambda a, b: isinstance(a, Decimal) and isinstance(b, Decimal) and abs(a) == abs(b),
        lambda v, p: isinstance(v, Decimal) and _amount_printed(v, p),
    ),
    _Comparison(
        "currency", lambda a, b: str(a).upper() == str(b).upper(), lambda v, p: _currency_printed(str(v), p)
    ),
    _Comparison(
        "seller_vat_id",
        lambda a, b: normalize_vat_id(str(a)) == normalize_vat_id(str(b)),
        lambda v, p: _vat_printed(str(v), p),
    ),
)


def _disagreement(
    name: str, xml_value: object, page_value: object, source: FieldSource | None
) -> PageDisagreement:
    return PageDisagreement(name, _shown(xml_value), _shown(page_value), source or FieldSource("page"))


def _iban_disagreement(xml_iban: str | None, page: PrintedPage) -> list[PageDisagreement]:
    """The account to pay: the page's printed IBANs must include the XML's, if it prints any."""
    if not xml_iban:
        return []
    printed = ibans_on_page(page.text)
    if not printed or compact(xml_iban).upper() in printed:
        return []
    return [
        PageDisagreement("payee_iban", xml_iban, ", ".join(printed), FieldSource("IBANs printed on the page"))
    ]


def compare_page(xml_fields: InvoiceFields, extracted: ExtractedText) -> tuple[PageDisagreement, ...]:
    """The key fields the visible page prints differently from the XML (empty: none, or no page)."""
    if not extracted.text.replace("\f", "").strip():
        return ()
    boxes = TextBoxes.from_structured(extracted.page_boxes)
    page_fields = fields_from_text(extracted.text, boxes=boxes)
    page = PrintedPage.of(extracted.text)
    out: list[PageDisagreement] = []
    for comparison in _COMPARED:
        xml_value = getattr(xml_fields, comparison.field)
        page_value = getattr(page_fields, comparison.field)
        source = page_fields.sources.get(comparison.field)
        if xml_value is None or page_value is None or comparison.same(xml_value, page_value):
            continue
        if source is not None and CURRENCY_FROM_VAT_COUNTRY in source.source:
            continue  # a currency the page does not print, only suggested by the VAT id's country
        if comparison.printed(xml_value, page):
            continue
        out.append(_disagreement(comparison.field, xml_value, page_value, source))
    out.extend(_iban_disagreement(xml_fields.payee_iban, page))
    return tuple(out)


def compare_evidence(
    page_fields: InvoiceFields, xml_fields: InvoiceFields, page_text: str
) -> tuple[PageDisagreement, ...]:
    """The other way round, for a PDF whose page is the invoice and its XML only evidence (a
    lineless Factur-X profile under the German rules, `domain.review.page_is_the_invoice`): the
    key fields the page reader read differently from the XML. Stricter than `compare_page`: the
    page's values are the ones recorded, so the XML's value printed elsewhere on the page is no
    excuse (the reader may have taken the wrong one). A field either side lacks is no
    disagreement; the account to pay is one when the page prints IBANs and not the XML's."""
    out: list[PageDisagreement] = []
    for comparison in _COMPARED:
        xml_value = getattr(xml_fields, comparison.field)
        page_value = getattr(page_fields, comparison.field)
        if xml_value is None or page_value is None or comparison.same(xml_value, page_value):
            continue
        source = page_fields.sources.get(comparison.field)
        out.append(_disagreement(comparison.field, xml_value, page_value, source))
    xml_iban, page_iban = xml_fields.payee_iban, page_fields.payee_iban
    if xml_iban and page_iban and compact(xml_iban).upper() != compact(page_iban).upper():
        out.append(_disagreement("payee_iban", xml_iban, page_iban, page_fields.sources.get("payee_iban")))
    else:
        out.extend(_iban_disagreement(xml_iban, PrintedPage.of(page_text)))
    return tuple(out)
