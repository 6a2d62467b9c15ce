"""Values as printed on a page: money with its currency, dates in the languages the reader knows,
document identifiers, VAT ids, and the currency a VAT id's country invoices in.

Locale-tolerant parsers over one segment's text; where a value stands is `labels`' business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from ...domain.validation import KNOWN_CURRENCIES
from .amounts import parse_number

_I = re.IGNORECASE


AMOUNT = re.compile(
    r"(?<![\w.,/-])(?P<sign>[-−–])?\s?(?P<num>\d{1,3}(?:[.,'\u00a0\u202f ]\d{3})+(?:[.,]\d{1,4})?|\d+(?:[.,]\d{1,4})?)(?![\w%/]|[.,]\d)"
)
CURRENCY_SYMBOLS = {
    "€": "EUR",
    "£": "GBP",
    "¥": "JPY",
    "₹": "INR",
    "₽": "RUB",
    "₺": "TRY",
    "₩": "KRW",
    "zł": "PLN",
    "Kč": "CZK",
}
DOLLAR_PREFIXES = {
    "US$": "USD",
    "A$": "AUD",
    "AU$": "AUD",
    "C$": "CAD",
    "CA$": "CAD",
    "NZ$": "NZD",
    "HK$": "HKD",
    "S$": "SGD",
}


# Signs several currencies print (issue 54): "$" alone (not "US$", "C$" ...) or "kr" says that the
# page is in one of these, not which one.
SHARED_SIGNS: dict[str, frozenset[str]] = {
    "$": frozenset({"USD", "CAD", "AUD", "NZD", "HKD", "SGD", "MXN"}),
    "kr": frozenset({"SEK", "NOK", "DKK", "ISK"}),
}
_SHARED_SIGN = re.compile(r"(?<![A-Za-z$])(\$|kr)(?![A-Za-z$])")


def shared_currency_signs(text: str) -> dict[str, frozenset[str]]:
    """The shared signs printed on a line with an amount, each with the currencies it may mean;
    {} when the page prints none (or prints a currency's own code or sign beside them: then the
    reader's currency stands)."""
    found: dict[str, frozenset[str]] = {}
    for line in text.splitlines():
        if AMOUNT.search(line) is None:
            continue
        for m in _SHARED_SIGN.finditer(line):
            found[m.group(1)] = SHARED_SIGNS[m.group(1)]
    return found


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str | None


def currency_near(text: str, start: int, end: int) -> str | None:
    before, after = text[max(0, start - 5) : start], text[end : end + 5]
    for window in (after, before):
        m = re.search(r"\b([A-Z]{3})\b", window)
        if m and m.group(1) in KNOWN_CURRENCIES:
            return m.group(1)
        for prefix, code in DOLLAR_PREFIXES.items():
            if prefix in window:
                return code
        for sym, code in CURRENCY_SYMBOLS.items():
            if sym in window:
                return code
    return None


def first_money(text: str) -> Money | None:
    for m in AMOUNT.finditer(text):
        tail = text[m.end() : m.end() + 2]
        if tail.strip().startswith("%"):
            continue
        amount = parse_number(m.group("num"))
        if amount is None:
            continue
        if m.group("sign"):
            amount = -amount
        return Money(amount, currency_near(text, m.start(), m.end()))
    return None


_MONTHS: dict[str, int] = {}
for _num, _names in enumerate(
    (
        "jan janv january januar jänner janvier enero gennaio januari",
        "feb febr february februar février fevrier febrero febbraio februari",
        "mar march märz maerz mars marzo maart",
        "apr april avril abril aprile",
        "may mai mayo maggio mag mei",
        "jun june juni juin junio giugno giu",
        "jul july juli juillet juil julio luglio lug",
        "aug august août aout agosto ago augustus",
        "sep sept september septembre septiembre settembre set",
        "oct october oktober octobre octubre ottobre ott okt",
        "nov november novembre noviembre",
        "dec december dezember décembre decembre diciembre dicembre dic dez",
    ),
    start=1,
):
    for _n in _names.split():
        _MONTHS[_n] = _num

MONTH_WORD = r"([A-Za-zÀ-ÿ]{3,10})\.?"
_DATE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)"), "ymd"),
    (re.compile(r"(?<!\d)(\d{4})/(\d{1,2})/(\d{1,2})(?!\d)"), "ymd"),
    (re.compile(r"(?<![\d.])(\d{1,2})\.\s?(\d{1,2})\.\s?(\d{4}|\d{2})(?![\d])"), "dmy"),
    (re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\d/])"), "dmy?"),
    (re.compile(r"(?<![\d-])(\d{1,2})-(\d{1,2})-(\d{4})(?![\d-])"), "dmy"),
    # Spaces optional: OCR often reads "19 January 2024" as "19January2024" (the month must
    # still be a known month name).
    (re.compile(r"(?<!\d)(\d{1,2})\.?\s*" + MONTH_WORD + r",?\s*(\d{4})(?!\d)"), "d_month_y"),
    # And "October 1,2023": a comma alone may part the day from the year.
    (re.compile(MONTH_WORD + r"\s*(\d{1,2})(?:st|nd|rd|th)?(?:,\s*|\s+)(\d{4})(?!\d)"), "month_d_y"),
)


def _year(y: str) -> int:
    n = int(y)
    return n + 2000 if len(y) == 2 else n


def _month(word: str) -> int | None:
    return _MONTHS.get(word.lower())


def is_month(word: str) -> bool:
    """Whether a word is a month's name (or its abbreviation) in a language the reader knows."""
    return _month(word) is not None


def make_date(y: int, m: int, d: int) -> date | None:
    try:
        return date(y, m, d)
    except ValueError:
        return None


def find_dates(text: str) -> list[tuple[int, date]]:
    """(position, date) for every date-looking token, in text order."""
    return [(start, d) for start, _, d in date_spans(text)]


def date_spans(text: str) -> list[tuple[int, int, date]]:
    """(start, end, date) for every date-looking token, in text order."""
    found: list[tuple[int, int, date]] = []
    taken: list[range] = []
    for pattern, kind in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() in r for r in taken):
                continue
            g = m.groups()
            parsed: date | None = None
            if kind == "ymd":
                parsed = make_date(int(g[0]), int(g[1]), int(g[2]))
            elif kind in ("dmy", "dmy?"):
                a, b = int(g[0]), int(g[1])
                # Slash dates are day-first unless that is impossible (US "12/31/2024").
                if kind == "dmy?" and b > 12 >= a:
                    a, b = b, a
                parsed = make_date(_year(g[2]), b, a)
            elif kind == "d_month_y":
                month = _month(g[1])
                parsed = make_date(int(g[2]), month, int(g[0])) if month else None
            else:
                month = _month(g[0])
                parsed = make_date(int(g[2]), month, int(g[1])) if month else None
            if parsed is not None:
                found.append((m.start(), m.end(), parsed))
                taken.append(range(m.start(), m.end()))
    return sorted(found, key=lambda x: x[0])


def first_date(text: str) -> date | None:
    dates = find_dates(text)
    return dates[0][1] if dates else None


_COMPACT_DATE = re.compile(r"^\W{0,3}((?:19|20)\d{2})(\d{2})(\d{2})(?!\d)")


def labelled_date(text: str) -> date | None:
    """The date after a date label, where "20260815" is a date too (never read without a label)."""
    if (found := first_date(text)) is not None:
        return found
    m = _COMPACT_DATE.match(text)
    return make_date(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


_ID_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-/._]*")
# A short letter prefix set apart from its digits: "INV 42", "inv.#0042", "F.#2024/7".
_PREFIXED_NUMBER = re.compile(r"[A-Za-z]{1,5}\.?(?: ?#| )\d[A-Za-z0-9\-/._]*")
# A further group of digits after a single space: "2025 29411".
_SPACED_GROUP = re.compile(r" \d+(?!\S)")


def first_identifier(text: str) -> str | None:
    m = re.match(r"\s*(?:\(\d{1,3}\)\s*)?[:#.\-–]?\s*(?:n[°º]\.?\s*|no\.?\s*|nr\.?\s*)?[:#\-–]?\s*", text, _I)
    rest = text[m.end() :] if m else text
    t = _ID_TOKEN.match(rest)
    if not t:
        return None
    value = t.group().rstrip("._-/")
    # A number written with spaces is still one number. Read token by token, "INV 42" gave no
    # digit (and the label's search went on down into the table, returning a quantity) and
    # "2025 29411" gave its first group only. Never joined into a date.
    end = t.end()
    if not re.search(r"\d", value) and (joined := _PREFIXED_NUMBER.match(rest)) is not None:
        end = joined.end()
    while (group := _SPACED_GROUP.match(rest, end)) is not None:
        end = group.end()
    longer = rest[:end].rstrip("._-/")
    if longer != value and first_date(longer) is None:
        value = longer
    if not re.search(r"\d", value) or first_date(value) == value:
        return None
    return value


VAT_VALUE = re.compile(r"\b([A-Z]{2,3})[ \-]?([0-9A-Z.\-]*\d[0-9A-Z.\-]*(?: [0-9A-Z.\-]*\d[0-9A-Z.\-]*)*)")
# The same typed in lower case ("de 123.456.789"); tried only when no upper-case id is there.
_VAT_VALUE_LOWER = re.compile(
    r"\b([a-z]{2})[ \-]?([0-9a-z.\-]*\d[0-9a-z.\-]*(?: [0-9a-z.\-]*\d[0-9a-z.\-]*)*)"
)


def vat_id_value(text: str) -> str | None:
    """A VAT id that starts with a VAT country prefix, read after a bare tax word."""
    value = vat_value(text)
    prefix = re.match(r"[A-Z]{2,3}", value or "")
    return value if prefix and {prefix.group(), prefix.group()[:2]} & VAT_COUNTRIES else None


def vat_value(text: str) -> str | None:
    for pattern in (VAT_VALUE, _VAT_VALUE_LOWER):
        for m in pattern.finditer(text):
            value = (m.group(1) + m.group(2).replace(" ", "")).rstrip(".-")
            alnum = re.sub(r"[^0-9A-Z]", "", value.upper())
            if 8 <= len(alnum) <= 16 and sum(ch.isdigit() for ch in alnum) >= 6:
                return value
    return None


# VAT-id country prefixes (EU, "EL" for Greece, UK, Northern Ireland, Switzerland, Norway).
VAT_COUNTRIES = frozenset(
    "AT BE BG CY CZ DE DK EE EL ES FI FR HR HU IE IT LT LU LV MT NL PL PT RO SE SI SK GB XI CH CHE NO".split()
)


# Eurozone and other countries whose VAT-id prefix names the currency they invoice in.
_EURO_VAT_PREFIXES = frozenset("AT BE CY DE EE EL ES FI FR GR HR IE IT LT LU LV MT NL PT SI SK".split())
_VAT_PREFIX_CURRENCY = {
    "GB": "GBP",
    "XI": "GBP",
    "CH": "CHF",
    "CHE": "CHF",
    "PL": "PLN",
    "CZ": "CZK",
    "DK": "DKK",
    "SE": "SEK",
    "NO": "NOK",
    "HU": "HUF",
    "RO": "RON",
}
# Countries that changed currency: the euro from this date, their old currency before it.
_EURO_SINCE = {"BG": (date(2026, 1, 1), "BGN")}


def currency_of_vat_id(vat_id: str, issued: date | None) -> str | None:
    """The currency of the VAT id's country on the invoice's date; None when that is ambiguous."""
    prefix = re.match(r"[A-Za-z]{2,3}", vat_id)
    if prefix is None:
        return None
    code = prefix.group().upper()
    if code[:2] in _EURO_VAT_PREFIXES:
        return "EUR"
    if code[:2] in _EURO_SINCE:
        since, before = _EURO_SINCE[code[:2]]
        return None if issued is None else ("EUR" if issued >= since else before)
    return _VAT_PREFIX_CURRENCY.get(code) or _VAT_PREFIX_CURRENCY.get(code[:2])
