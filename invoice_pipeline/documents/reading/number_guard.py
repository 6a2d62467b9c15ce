"""What an invoice number can never be: a date, an amount, a VAT id, an IBAN or BIC, a postcode or
a phone number printed on the same page (issue 52, item 6).

A re-sent copy whose number is printed as a picture has no number in its text layer (or its OCR);
a reader that then takes the value standing where the number should be (the issue date, the
total, the postcode of the address below the label) gives the copy a number of its own, the
duplicate check misses it and it is paid twice. Every path that reads a page's invoice number
(the label rules in `text_fields`, the ranker's candidates in `candidates`, a vendor layout's
learnt position in `layouts`) asks `why_not_a_number` about its value; a value refused there is
never the number, and the field is left unread with the reason (held `field_unread` for a
person), never filled from another value.

Two kinds of refusal:

* by the value's own shape: it IS a date (any format the reader knows, and a compact 20250530 /
  30052025 that is a real date), an amount with decimals ("1190.00", "1.190,00"), a VAT id printed
  on the page or one that passes its country's check digits, a valid IBAN, a BIC printed on the
  page, a phone number ("+49 …");
* as a part of something else: a fragment of an IBAN or a phone number, the digits of a VAT id
  without its prefix, the postcode of an address line, a whole number equal to a labelled amount.
  These are refused unless the value is printed on the page on its own too, outside every such
  thing: an invoice numbered 20457 whose seller lives in 20457 Hamburg prints its number beside
  its label, not only in the address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from functools import lru_cache

from stdnum import iban as stdnum_iban
from stdnum.eu import vat as stdnum_vat

from .amounts import find_amounts, parse_number
from .labels import VAT_LABELS
from .page_values import AMOUNT, VAT_COUNTRIES, VAT_VALUE, currency_near, date_spans, is_month, make_date

# An IBAN as printed: country, check digits, then groups (of four, spaced or not).
_IBAN = re.compile(r"(?<![A-Z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![A-Z0-9])")
# A VAT id or IBAN counts as one when its check digits hold or a label names it: an invoice
# number may start with a country's letters too ("FR-2024-001").
_VAT_LABEL = re.compile("|".join(VAT_LABELS), re.I)
_IBAN_LABEL = re.compile(r"iban", re.I)
_LABEL_REACH = 30
_BIC_LABEL = re.compile(
    r"(?<![A-Za-z])(?:bic|swift)(?:[\s-]*code)?\W{0,3}([A-Z]{6}[A-Z0-9]{2}(?:[A-Z0-9]{3})?)\b", re.I
)
_PHONE_LABEL = r"(?<![A-Za-z])(?:tel(?:efon|ephone)?|t[ée]l[ée]phone|t[ée]l|phone|fon|fax|telefax|mobile?|mob|handy|cell|gsm)"
_PHONE = re.compile(_PHONE_LABEL + r"\.?\s*[:.]?\s*(\+?[\d(][\d\s()/.\-]{4,}\d)", re.I)
_INTERNATIONAL = re.compile(r"(?<![\w+])\+\d{1,3}[\s\d()/.\-]{6,}\d")
# The start of an address line's last part: "20457 Hamburg", "F-75008 PARIS", "…, 1010 Wien".
_POSTCODE = re.compile(r"(?:^|,\s*)(?:[A-Z]{1,2}-)?(\d{4,5})\s+(?=[A-ZÀ-Ýa-zà-ÿ])([^\d:]*)$")
_COMPACT = (
    re.compile(r"((?:19|20)\d{2})(\d{2})(\d{2})"),  # 20250530
    re.compile(r"(\d{2})(\d{2})((?:19|20)\d{2})"),  # 30052025
)
_DECIMAL_AMOUNT = re.compile(
    r"[-−–+]?\s?(?:\d{1,3}(?:[.,'\u00a0\u202f ]\d{3})+(?:[.,]\d{1,2})?|\d+[.,]\d{1,2})"
)
_NUMERIC = re.compile(r"[-−–+]?\s?\d[\d.,'\u00a0\u202f ]*")


def _alnum(text: str) -> str:
    return re.sub(r"[^0-9A-Z]", "", text.upper())


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


@dataclass(frozen=True)
class PageNumbers:
    """The values on a page that are not its invoice number, and its text with them blanked."""

    dates: frozenset[date]
    amounts: frozenset[Decimal]  # money printed (with decimals or a currency) or labelled, unsigned
    vat_ids: frozenset[str]  # letters and digits, with their prefix
    ibans: tuple[str, ...]  # letters and digits
    bics: frozenset[str]
    phones: tuple[str, ...]  # digits
    postcodes: frozenset[str]
    # The page's lines with every date, amount, identifier, phone number and postcode blanked:
    # a value still printed here is printed on its own.
    rest: str

    @classmethod
    def of(cls, text: str) -> PageNumbers:
        return _page_numbers(text)


@lru_cache(maxsize=32)
def _page_numbers(text: str) -> PageNumbers:
    dates: set[date] = set()
    amounts: set[Decimal] = set()
    vat_ids: set[str] = set()
    ibans: list[str] = []
    bics: set[str] = set()
    phones: list[str] = []
    postcodes: set[str] = set()
    rest: list[str] = []
    for line in text.splitlines():
        spans: list[tuple[int, int]] = []
        for start, end, d in date_spans(line):
            dates.add(d)
            spans.append((start, end))
        for m in AMOUNT.finditer(line):
            money = re.search(r"[.,]\d{1,2}$", m.group("num")) or currency_near(line, m.start(), m.end())
            if money and (amount := parse_number(m.group("num"))) is not None:
                amounts.add(abs(amount))
                spans.append(m.span())
        for m in _IBAN.finditer(line):
            value = _alnum(m.group())
            if stdnum_iban.is_valid(value) or _IBAN_LABEL.search(
                line[max(0, m.start() - _LABEL_REACH) : m.start()]
            ):
                ibans.append(value)
                spans.append(m.span())
        for m in VAT_VALUE.finditer(line):
            value = _alnum(m.group())
            if {m.group(1), m.group(1)[:2]} & VAT_COUNTRIES and 8 <= len(value) <= 16:
                before = line[max(0, m.start() - _LABEL_REACH) : m.start()]
                if _valid_vat(value) or _VAT_LABEL.search(before):
                    vat_ids.add(value)
                    spans.append(m.span())
        for m in _BIC_LABEL.finditer(line):
            bics.add(m.group(1).upper())
            spans.append(m.span(1))
        for rx, group in ((_PHONE, 1), (_INTERNATIONAL, 0)):
            for m in rx.finditer(line):
                if len(_digits(m.group(group))) >= 6:
                    phones.append(_digits(m.group(group)))
                    spans.append(m.span(group))
        for segment in re.finditer(r"\S+(?: {1,2}\S+)*", line):
            if (code := _POSTCODE.search(segment.group())) and not _not_a_city(code.group(2)):
                postcodes.add(code.group(1))
                spans.append((segment.start() + code.start(1), segment.start() + code.end(1)))
        chars = list(line)
        for start, end in spans:
            chars[start:end] = " " * (end - start)
        rest.append("".join(chars))
    amounts.update(abs(f.amount) for f in find_amounts(text))
    amounts.discard(Decimal(0))
    return PageNumbers(
        frozenset(dates),
        frozenset(amounts),
        frozenset(vat_ids),
        tuple(ibans),
        frozenset(bics),
        tuple(phones),
        frozenset(postcodes),
        "\n".join(rest),
    )


def _not_a_city(words: str) -> bool:
    """What follows a 4-5 digit number and is no town: a month ("30 May"), a currency code, a unit."""
    first = words.split()[0].strip(".,") if words.split() else ""
    return is_month(first) or first.upper() in ("EUR", "USD", "GBP", "CHF") or len(first) < 2


def whole_date(value: str) -> date | None:
    """The date `value` is, as a whole: any printed format the reader knows, or a compact one
    (20250530, 30052025) that is a real date."""
    v = value.strip(" .:#-/")
    for start, end, d in date_spans(v):
        if start == 0 and not re.search(r"[A-Za-z0-9]", v[end:]):
            return d
    if re.fullmatch(r"\d{8}", v):
        for rx, order in zip(_COMPACT, ("ymd", "dmy"), strict=True):
            if (m := rx.fullmatch(v)) is not None:
                a, b, c = (int(g) for g in m.groups())
                if (compact := make_date(a, b, c) if order == "ymd" else make_date(c, b, a)) is not None:
                    return compact
    return None


def _printed_alone(value: str, page: PageNumbers) -> bool:
    """Whether `value` is printed on the page outside every date, amount, identifier, phone
    number and postcode."""
    return (
        re.search(r"(?<![A-Za-z0-9])" + re.escape(value.strip()) + r"(?![A-Za-z0-9])", page.rest) is not None
    )


def why_not_a_number(value: str, page: PageNumbers) -> str | None:
    """Why `value` cannot be the page's invoice number (what else it is), or None when it can."""
    v = value.strip()
    alnum, digits = _alnum(v), _digits(v)
    letters = re.search(r"[A-Za-z]", v) is not None
    if (d := whole_date(v)) is not None:
        return f"{v!r} is a date ({d.isoformat()})"
    if _DECIMAL_AMOUNT.fullmatch(v) and re.search(r"[.,]\d{1,2}$", v):
        return f"{v!r} is an amount"
    if v.startswith("+") and len(digits) >= 6:
        return f"{v!r} is a phone number"
    # Printed as a VAT id is (letters and digits, maybe spaced or dotted), not with an invoice
    # number's dashes or slashes: only then do check digits that happen to hold say "VAT id".
    if alnum in page.vat_ids or (letters and not re.search(r"[-/_]", v) and _valid_vat(alnum)):
        return f"{v!r} is a VAT id"
    if alnum in page.ibans or (len(alnum) >= 15 and stdnum_iban.is_valid(alnum)):
        return f"{v!r} is an IBAN"
    if alnum in page.bics:
        return f"{v!r} is a BIC"
    part = _part_of_something(v, alnum, digits, letters, page)
    if part is not None and not _printed_alone(v, page):
        return f"{v!r} is printed on the page only as {part}"
    return None


def could_be_invoice_number(value: str, page: PageNumbers) -> bool:
    """Whether `value` may be read as the page's invoice number (see `why_not_a_number`)."""
    return why_not_a_number(value, page) is None


def _valid_vat(alnum: str) -> bool:
    if alnum[:2] not in VAT_COUNTRIES or not 8 <= len(alnum) <= 16:
        return False
    try:
        return bool(stdnum_vat.is_valid(alnum))
    except Exception:  # stdnum raises for countries it has no module for
        return False


def _part_of_something(v: str, alnum: str, digits: str, letters: bool, page: PageNumbers) -> str | None:
    """What larger value on the page `v` is a part of, if any."""
    if len(alnum) >= 4 and any(alnum in iban for iban in page.ibans):
        return "a part of an IBAN"
    if len(alnum) >= 6 and any(vat[2:] == alnum or vat[3:] == alnum for vat in page.vat_ids):
        return "the digits of a VAT id"
    if letters:
        return None
    if len(digits) >= 4 and any(digits in phone for phone in page.phones):
        return "a part of a phone number"
    if digits in page.postcodes and _NUMERIC.fullmatch(v):
        return "the postcode of an address"
    if _NUMERIC.fullmatch(v) and (amount := parse_number(v)) is not None and abs(amount) in page.amounts:
        return f"the amount {amount}"
    return None
