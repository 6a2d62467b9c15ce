"""Every value of a key field's shape on a page, each with the evidence around it (issue 40).

The hand reader (`text_fields`) takes the first value after the strongest label. Here every
token sequence of the field's shape is a candidate, and what the page shows about it becomes
numeric features for the ranker (`reading.ranker`), from what `reading.page_view` sees of the
page: which labels stand left of it, before it in its own segment or above it in its column, and
how far; the label's language-independent role
(the dictionaries cover EN/DE/FR/NL/IT/ES); the segment's font size (the height of its box in
the text layer: pdfplumber's glyph size) relative to the page's largest and to its median; its
weight (the share of its characters in a bold font, kept beside the boxes; OCR words have none);
its line's rank among the letterhead lines (the largest text in the top band of the first page);
where it sits on the page (top band, bottom band: the legal footer); how often it repeats; and
whether the page's arithmetic (`amounts.resolve`) supports it. Only facts are hand rules here:
value formats, date validity, VAT-id country prefixes and checksums, currency codes, symbols and
names, and country names (a country alone is an address's last line, never a seller).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from ...domain.fields import FieldSource, InvoiceFields
from ...domain.validation import KNOWN_CURRENCIES
from .amounts import EXEMPT, Found, ends_in_amount, find_amounts, numbers_in, resolve
from .labels import (
    SENDER_SEPARATORS,
)
from .number_guard import PageNumbers, could_be_invoice_number
from .page_values import (
    AMOUNT,
    CURRENCY_SYMBOLS,
    DOLLAR_PREFIXES,
    VAT_COUNTRIES,
    VAT_VALUE,
    currency_of_vat_id,
    find_dates,
    first_identifier,
    make_date,
)
from .page_view import PageView, roles_of
from .parties import LEGAL_FORM, LEGAL_MARKERS
from .seller_buyer import clean_name, folded_letters, looks_like_label
from .words import Segment, TextBoxes

KEY_FIELDS = ("invoice_number", "issue_date", "payable_total", "currency", "seller_name", "seller_vat_id")
_I = re.IGNORECASE


@dataclass(frozen=True)
class Candidate:
    """One value a field could take, where it is printed, and the evidence for it."""

    field: str
    value: Any
    line: int
    index: int  # the segment on its line
    features: Mapping[str, float]


def _count(n: int) -> float:
    return math.log1p(max(0, n))


def _agrees(value: Any, reader: Any) -> float:
    return 1.0 if reader is not None and value == reader else 0.0


# ---------------------------------------------------------------- invoice number

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-/._]*[A-Za-z0-9]|\d")
_DECIMAL_AMOUNT = re.compile(r"[-+]?\d{1,3}(?:[.,' ]\d{3})*[.,]\d{2}")
_NUMBER_ROLES = (
    "number",
    "heading",
    "customer",
    "po",
    "vat",
    "date",
    "issue",
    "due",
    "payable",
    "amount",
    "legal",
)


def number_candidates(view: PageView) -> Iterator[Candidate]:
    """Every token that could be the invoice number; never one that is something else the page
    prints (a date, an amount, a VAT id, an IBAN, a postcode: `number_guard`), whatever its rank."""
    seen: set[tuple[str, int]] = set()
    printed = PageNumbers.of(view.text)
    counts: Counter[str] = Counter(_TOKEN.findall(view.flat))
    for seg in view.doc.segs():
        spans = [(m.start(), m.group()) for m in _TOKEN.finditer(seg.text)]
        # A number written with a space or after a short prefix ("INV 42"): as the hand reader reads it.
        for m in re.finditer(r"[:#]\s*|\s", seg.text):
            if (ident := first_identifier(seg.text[m.end() :])) is not None and " " in ident:
                spans.append((m.end(), ident))
        for start, token in spans:
            if not re.search(r"\d", token) or len(token) > 40 or (token, seg.line) in seen:
                continue
            if (
                find_dates(token)
                or _DECIMAL_AMOUNT.match(seg.text, start)  # an amount ("1.234,50"), or its first part
                or seg.text[start + len(token) :].startswith("%")
                or re.search(r"\d[.,']$", seg.text[:start]) is not None  # the decimals of an amount
                or not could_be_invoice_number(token, printed)
            ):
                continue
            seen.add((token, seg.line))
            digits = sum(ch.isdigit() for ch in token)
            features = {
                "len": min(len(token), 20) / 20,
                "digit_share": digits / len(token),
                "has_letters": 1.0 if re.search(r"[A-Za-z]", token) else 0.0,
                "has_separator": 1.0 if re.search(r"[-/._]", token) else 0.0,
                "short": 1.0 if len(token) <= 2 else 0.0,
                "repeats": _count(counts[token] - 1),
                **view.typography(seg),
                **view.labels(seg, seg.text[:start], _NUMBER_ROLES),
            }
            yield Candidate("invoice_number", token, seg.line, seg.index, features)


# ---------------------------------------------------------------- issue date

_COMPACT = re.compile(r"(?<!\d)((?:19|20)\d{2})(\d{2})(\d{2})(?!\d)")
_DATE_ROLES = ("issue", "date", "due", "other_date", "stamp", "number", "heading")


# A slash date whose two first numbers could both be a month: day-first ("04/01/2017" is 4 January
# in most of the world) or month-first (1 April in the US); both are candidates.
_SLASH = re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4})(?![\d/])")


def _dates_in(text: str) -> list[tuple[int, date, str]]:
    """(position, date, how it was read: plain, compact or month_first) for each date."""
    found = [(pos, d, "plain") for pos, d in find_dates(text)]
    for m in _COMPACT.finditer(text):
        d = make_date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        if d is not None and not any(p <= m.start() < p + 10 for p, _, _ in found):
            found.append((m.start(), d, "compact"))
    for m in _SLASH.finditer(text):
        a, b = int(m.group(1)), int(m.group(2))
        if a != b and a <= 12 and b <= 12 and (d := make_date(int(m.group(3)), a, b)) is not None:
            found.append((m.start(), d, "month_first"))
    return found


def _slash_order(view: PageView) -> tuple[float, float]:
    """Whether some slash date on the page can only be day-first, or only month-first."""
    day_first = month_first = 0.0
    for m in _SLASH.finditer(view.flat):
        a, b = int(m.group(1)), int(m.group(2))
        day_first = 1.0 if a > 12 >= b else day_first
        month_first = 1.0 if b > 12 >= a else month_first
    return day_first, month_first


def date_candidates(view: PageView) -> Iterator[Candidate]:
    every = [(seg, pos, d, how) for seg in view.doc.segs() for pos, d, how in _dates_in(seg.text)]
    counts = Counter(d for _, _, d, _ in every)
    ordered = sorted(set(counts))
    day_first, month_first = _slash_order(view)
    for rank, (seg, pos, d, how) in enumerate(every):
        features = {
            "compact": 1.0 if how == "compact" else 0.0,
            "month_first": 1.0 if how == "month_first" else 0.0,
            "page_day_first": day_first,
            "page_month_first": month_first,
            "page_order": min(rank, 10) / 10,
            "earliest": 1.0 if d == ordered[0] else 0.0,
            "latest": 1.0 if d == ordered[-1] else 0.0,
            "repeats": _count(counts[d] - 1),
            **view.typography(seg),
            **view.labels(seg, seg.text[:pos], _DATE_ROLES),
        }
        yield Candidate("issue_date", d, seg.line, seg.index, features)


# ---------------------------------------------------------------- payable total

_KINDS = ("due", "gross", "net", "tax", "prepaid", "rounding", "other")


def amount_candidates(view: PageView) -> Iterator[Candidate]:
    found = find_amounts(view.text, view.geometry)
    resolution = resolve(found, exempt=EXEMPT.search(view.text) is not None, source_of=_no_source)
    chosen = resolution.payable.amount if resolution.payable is not None else None
    largest = max((f.amount for f in found), default=Decimal(0))
    counts = Counter(f.amount for f in found)
    for f in found:
        seg = f.value_seg
        features = {
            **{f"kind_{k}": 1.0 if f.kind == k else 0.0 for k in _KINDS},
            "strength": f.strength,
            "rate_row": 1.0 if f.rate_row else 0.0,
            "arithmetic": 1.0 if f.amount == chosen else 0.0,
            "confirmed": 1.0 if f.amount == chosen and resolution.check.confirmed else 0.0,
            "largest": 1.0 if f.amount == largest else 0.0,
            "zero": 1.0 if f.amount == 0 else 0.0,
            "below_label": 1.0 if f.value_seg.line != f.label_seg.line else 0.0,
            "repeats": _count(counts[f.amount] - 1),
            **view.typography(seg),
        }
        yield Candidate("payable_total", f.amount, seg.line, seg.index, features)
    # Amounts no label names: a total printed in a cell beside words the dictionaries lack.
    labelled = {(f.value_seg.line, f.value_seg.index) for f in found}
    loose = [
        (seg, n.value)
        for seg in view.doc.segs()
        if (seg.line, seg.index) not in labelled and ends_in_amount(seg.text)
        for n in numbers_in(seg.text)[-1:]
        if n.value > 0
    ]
    loose_counts = Counter(v for _, v in loose)
    top = max((v for _, v in loose), default=Decimal(0))
    for seg, value in loose:
        features = {
            "unlabelled": 1.0,
            "arithmetic": 1.0 if value == chosen else 0.0,
            "largest": 1.0 if value >= max(top, largest) else 0.0,
            "repeats": _count(loose_counts[value] + counts[value] - 1),
            **view.typography(seg),
        }
        yield Candidate("payable_total", value, seg.line, seg.index, features)


def _no_source(_: Found) -> FieldSource:
    return FieldSource("", 0.0)


# ---------------------------------------------------------------- currency

# Names of currencies as pages print them (facts, not habits): the word and the code it means.
CURRENCY_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<!\w)euros?(?!\w)", _I), "EUR"),
    (re.compile(r"(?<!\w)(?:us\s*)?dollars?(?!\w)", _I), "USD"),
    (re.compile(r"(?<!\w)(?:rupees?|rs\.)(?!\w)", _I), "INR"),
    (re.compile(r"(?<!\w)pounds?\s*sterling(?!\w)", _I), "GBP"),
    (re.compile(r"(?<!\w)(?:schweizer\s*franken|francs?\s*suisses?|swiss\s*francs?)(?!\w)", _I), "CHF"),
    (re.compile(r"(?<!\w)(?:deutsche\s*mark|DM)(?!\w)"), "DEM"),
)
_ISO = re.compile(r"(?<![A-Za-z])([A-Z]{3})(?![A-Za-z])")


def _currency_mentions(text: str) -> Iterator[tuple[str, str, int]]:
    """(code, how it is written: iso/symbol/word, position) for each currency the text prints."""
    for m in _ISO.finditer(text):
        if m.group(1) in KNOWN_CURRENCIES:
            yield m.group(1), "iso", m.start()
    for prefix, code in DOLLAR_PREFIXES.items():
        for m in re.finditer(re.escape(prefix), text):
            yield code, "symbol", m.start()
    for sym, code in CURRENCY_SYMBOLS.items():
        for m in re.finditer(re.escape(sym), text):
            yield code, "symbol", m.start()
    for m in re.finditer(r"(?<![A-Z])\$", text):
        if not any(text[max(0, m.start() - 3) : m.start() + 1].endswith(p) for p in DOLLAR_PREFIXES):
            yield "USD", "dollar_sign", m.start()
    for rx, code in CURRENCY_WORDS:
        for m in rx.finditer(text):
            yield code, "word", m.start()


def currency_candidates(view: PageView, vat_currency: str | None) -> Iterator[Candidate]:
    stats: dict[str, Counter[str]] = {}
    where: dict[str, Segment] = {}
    for seg in view.doc.segs():
        amounts = bool(AMOUNT.search(seg.text))
        for code, how, pos in _currency_mentions(seg.text):
            c = stats.setdefault(code, Counter())
            c[how] += 1
            c["with_amount"] += amounts
            c["labelled"] += "currency" in roles_of(seg.text[:pos]) or bool(
                view.near(seg, frozenset(), "currency")["currency_left"]
            )
            c["payable"] += bool(view.roles[seg.line][seg.index] & {"payable"})
            where.setdefault(code, seg)
    total = sum(
        sum(v for k, v in c.items() if k in ("iso", "symbol", "dollar_sign", "word")) for c in stats.values()
    )
    for code, c in stats.items():
        mentions = c["iso"] + c["symbol"] + c["dollar_sign"] + c["word"]
        seg = where[code]
        features = {
            "iso": _count(c["iso"]),
            "symbol": _count(c["symbol"]),
            "dollar_sign": _count(c["dollar_sign"]),
            "word": _count(c["word"]),
            "share": mentions / total if total else 0.0,
            "with_amount": _count(c["with_amount"]),
            "labelled": 1.0 if c["labelled"] else 0.0,
            "on_payable_line": 1.0 if c["payable"] else 0.0,
            # The seller's VAT country may confirm a printed currency; it never adds one.
            "vat_country_agrees": 1.0 if vat_currency == code else 0.0,
            "first_y": view.position(seg)[1],
        }
        yield Candidate("currency", code, seg.line, seg.index, features)


# ---------------------------------------------------------------- seller name

_NAME_ROLES = ("seller", "buyer", "buyer_ref", "heading", "legal", "number", "vat")
_CONTACT = re.compile(r"@|www\.|https?:|\btel\b|\bfax\b|phone|t[ée]l[ée]phone|e-?mail|iban|bic\b", _I)
_NAME_ZONE = 0.45  # the top of the first page, where letterheads and address blocks are
_NAME_ZONE_LINES = 12  # and at least this many lines of it (a short page is all top)
# Country names as addresses end (facts: the countries whose VAT ids and languages the reader
# knows, in those languages), folded to letters: a country alone is an address line, no seller
# (as a feature it lost to the country printed twice on a domestic invoice: it is a fact, so a rule).
COUNTRY_NAMES = frozenset(
    folded_letters(name)
    for name in (
        "France|Germany|Deutschland|Allemagne|Alemania|Germania|Duitsland|Austria|Österreich|"
        "Autriche|Oostenrijk|Switzerland|Schweiz|Suisse|Svizzera|Suiza|Zwitserland|Belgium|"
        "Belgien|Belgique|België|Belgio|Bélgica|Netherlands|The Netherlands|Nederland|"
        "Niederlande|Pays-Bas|Paesi Bassi|Países Bajos|Luxembourg|Luxemburg|Lussemburgo|"
        "Luxemburgo|Italy|Italia|Italien|Italie|Italië|Spain|España|Spanien|Espagne|Spagna|"
        "Spanje|Portugal|Portogallo|Ireland|Irland|Irlande|Irlanda|United Kingdom|UK|"
        "Great Britain|England|Royaume-Uni|Vereinigtes Königreich|Regno Unito|Reino Unido|"
        "Verenigd Koninkrijk|USA|United States|United States of America|Vereinigte Staaten|"
        "États-Unis|Stati Uniti|Estados Unidos|India|Indien|Inde|Norway|Norge|Norwegen|Norvège|"
        "Sweden|Sverige|Schweden|Suède|Denmark|Danmark|Dänemark|Danemark|Finland|Suomi|Finnland|"
        "Finlande|Poland|Polska|Polen|Pologne|Czech Republic|Czechia|Tschechien|Greece|"
        "Griechenland|Grèce"
    ).split("|")
)


def name_candidates(view: PageView, buyer: Any) -> Iterator[Candidate]:
    seen: set[tuple[str, int]] = set()
    texts = Counter(folded_letters(s.text) for s in view.doc.segs())
    first_page_lines = sum(1 for i in range(view.n_lines) if view.geometry.page(i) == 1)
    rank_of_line: dict[int, int] = {}
    for seg in view.doc.segs():
        if seg.line < max(first_page_lines * _NAME_ZONE, _NAME_ZONE_LINES) or seg.line in view.footer:
            rank_of_line.setdefault(seg.line, len(rank_of_line))
    for seg in view.doc.segs():
        if seg.line not in rank_of_line:
            continue
        text = seg.text
        parts = list(enumerate(SENDER_SEPARATORS.split(text)))
        if ":" in text:
            parts.append((0, text.split(":", 1)[1]))
        named = [(k, part, clean_name(part), False) for k, part in parts]
        # "SA Acme (ACM)": the name may be written after its legal form, or be the name itself.
        named += [
            (k, part, clean_name(part[m.end() :]), True)
            for k, part, _, _ in list(named)
            if (m := re.match(r"\s*" + LEGAL_FORM.pattern + r"\s+", part)) is not None
        ]
        for k, part, name, stripped in named:
            compact = folded_letters(name or "")
            # A country alone is the last line of an address, never a company's name (a fact).
            if name is None or len(name) > 80 or (name, seg.line) in seen or compact in COUNTRY_NAMES:
                continue
            seen.add((name, seg.line))
            pos = text.find(part)
            letters = sum(ch.isalpha() for ch in name)
            features = {
                "legal_form_before": 1.0 if stripped else 0.0,
                "legal_form": 1.0 if LEGAL_FORM.search(name) else 0.0,
                "legal_marker": 1.0 if LEGAL_MARKERS.search(text) else 0.0,
                "digits": 1.0 if re.search(r"\d", name) else 0.0,
                "letter_share": letters / len(name),
                "words": min(len(name.split()), 8) / 8,
                "all_caps": 1.0 if name.isupper() else 0.0,
                "contact": 1.0 if _CONTACT.search(name) else 0.0,
                "label_like": 1.0 if looks_like_label(text) or roles_of(name) else 0.0,
                # The candidate itself reads as a label ("Date d'échéance"), not only its segment.
                "name_is_label": 1.0 if looks_like_label(name) or roles_of(name) else 0.0,
                "very_short": 1.0 if letters <= 3 else 0.0,
                "colon": 1.0 if ":" in text else 0.0,
                "part": min(k, 3) / 3,
                "whole_segment": 1.0 if name == clean_name(text) else 0.0,
                "line_rank": min(rank_of_line[seg.line], 20) / 20,
                "repeats": _count(sum(n for t, n in texts.items() if compact in t) - 1),
                "buyer": _agrees(name, buyer),
                **view.typography(seg),
                **view.labels(seg, text[:pos], _NAME_ROLES),
            }
            yield Candidate("seller_name", name, seg.line, seg.index, features)


# ---------------------------------------------------------------- seller VAT id


def vat_checksum(vat_id: str) -> bool | None:
    """Whether a VAT id's check digits hold, for the countries whose rule is public; else None."""
    country, body = vat_id[:2].upper(), re.sub(r"[^0-9A-Z]", "", vat_id[2:].upper())
    if country == "FR" and re.fullmatch(r"\d{11}", body):
        return int(body[:2]) == (12 + 3 * (int(body[2:]) % 97)) % 97
    if country == "DE" and re.fullmatch(r"\d{9}", body):
        product = 10
        for ch in body[:8]:
            s = (int(ch) + product) % 10 or 10
            product = (2 * s) % 11
        return (11 - product) % 10 == int(body[8])
    if country == "IT" and re.fullmatch(r"\d{11}", body):
        total = 0
        for i, ch in enumerate(body):
            d = int(ch) * (2 if i % 2 else 1)
            total += d - 9 if d > 9 else d
        return total % 10 == 0
    return None


_VAT_ROLES = ("vat", "tax_word", "buyer", "buyer_ref", "customer", "seller", "legal")


def vat_candidates(view: PageView, seller_line: int | None) -> Iterator[Candidate]:
    every: list[tuple[Segment, int, str]] = []
    for seg in view.doc.segs():
        # Every start, not only non-overlapping matches: "TVA FR81..." must also be read from "FR".
        for start in re.finditer(r"\b[A-Z]{2,3}(?=[ \-]?[0-9A-Z.\-]*\d)", seg.text):
            if (m := VAT_VALUE.match(seg.text, start.start())) is None:
                continue
            value = (m.group(1) + m.group(2).replace(" ", "")).rstrip(".-")
            alnum = re.sub(r"[^0-9A-Z]", "", value.upper())
            prefix = m.group(1)
            if (
                {prefix, prefix[:2]} & VAT_COUNTRIES
                and 8 <= len(alnum) <= 16
                and sum(ch.isdigit() for ch in alnum) >= 6
            ):
                every.append((seg, m.start(), value))
    counts = Counter(v for _, _, v in every)
    for seg, pos, value in every:
        checksum = vat_checksum(value)
        features = {
            "checksum_ok": 1.0 if checksum else 0.0,
            "checksum_fails": 1.0 if checksum is False else 0.0,
            "repeats": _count(counts[value] - 1),
            "near_seller": 1.0 if seller_line is not None and 0 <= seg.line - seller_line <= 8 else 0.0,
            **view.typography(seg),
            **view.labels(seg, seg.text[:pos], _VAT_ROLES),
        }
        yield Candidate("seller_vat_id", value, seg.line, seg.index, features)


# ---------------------------------------------------------------- all fields


def page_candidates(
    text: str, boxes: TextBoxes | None, reader: InvoiceFields, fields: Collection[str] = KEY_FIELDS
) -> dict[str, list[Candidate]]:
    """Every candidate of each of `fields`. Of the hand reader's fields (`reader`) only the buyer's
    name (a seller is not the buyer), the seller's line (its VAT id is near) and the seller's VAT
    country (it may confirm a printed currency) are used: never its choice for the field itself."""
    view = PageView(text, boxes)
    seller_source = reader.sources.get("seller_name")
    seller_line = _line_of(seller_source.source) if seller_source is not None else None
    vat_currency = (
        currency_of_vat_id(reader.seller_vat_id, reader.issue_date) if reader.seller_vat_id else None
    )
    makers: dict[str, Callable[[], Iterator[Candidate]]] = {
        "invoice_number": lambda: number_candidates(view),
        "issue_date": lambda: date_candidates(view),
        "payable_total": lambda: amount_candidates(view),
        "currency": lambda: currency_candidates(view, vat_currency),
        "seller_name": lambda: name_candidates(view, reader.buyer_name),
        "seller_vat_id": lambda: vat_candidates(view, seller_line),
    }
    return {name: list(makers[name]()) for name in fields}


def _line_of(source: str) -> int | None:
    m = re.search(r"line (\d+)", source)
    return int(m.group(1)) - 1 if m else None
