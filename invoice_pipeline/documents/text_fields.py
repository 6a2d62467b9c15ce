"""Invoice fields from a PDF text layer (or OCR output) by label heuristics.

The text comes from `pdf.layout_text`: one line per visual line, with columns separated by at
least three spaces, so "label   value" and "label / value below" layouts can both be read.
Labels cover English, German and French (plus common Spanish/Italian/Dutch terms); values are
parsed with locale-tolerant rules. Every value gets a confidence below 1.0 because layout
heuristics can be fooled; a missing field says why.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import date
from decimal import Decimal
from typing import Any, Generic, TypeVar

from rapidfuzz import fuzz

from ..domain.fields import FieldSource, InvoiceFields
from ..domain.validation import KNOWN_CURRENCIES
from .collect import FieldCollector
from .ocr import MIN_FIELD_CONFIDENCE, OcrLayout
from .reading.amounts import EXEMPT, Found, find_amounts, parse_number, resolve
from .reading.parties import LEGAL_FORM, LEGAL_MARKERS, footer_lines, footer_seller
from .reading.words import PageGeometry, Segment, TextBoxes, segments, union

T = TypeVar("T")
_I = re.IGNORECASE


Seg = Segment


@dataclass(frozen=True)
class Hit(Generic[T]):
    value: T
    line: int
    label: str
    confidence: float
    # The line the value itself was read from, when it sits below its label.
    value_line: int | None = None
    # (line, segment index) of the label's and the value's segments, for the field's box.
    segs: tuple[tuple[int, int], ...] = ()

    @property
    def source(self) -> str:
        return f"pdf-text:line {self.line + 1}:{self.label!r}"


# Characters a value may stand off its label's (or its block's) column and still be in it.
COLUMN_SLACK = 6


class TextDoc:
    def __init__(self, text: str) -> None:
        self.lines: list[list[Seg]] = segments(text)

    def segs(self) -> Iterator[Seg]:
        for line in self.lines:
            yield from line

    def right_of(self, seg: Seg) -> list[Seg]:
        return [s for s in self.lines[seg.line] if s.col > seg.col]

    def below(self, seg: Seg, start: int, end: int, depth: int = 4) -> Iterator[Seg]:
        """Segments in the next lines that overlap the column span [start, end), nearest first."""
        centre = (start + end) / 2
        for i in range(seg.line + 1, min(seg.line + 1 + depth, len(self.lines))):
            near = [s for s in self.lines[i] if s.overlaps(start, end, COLUMN_SLACK)]
            yield from sorted(near, key=lambda s: abs((s.col + s.end) / 2 - centre))


# ---------------------------------------------------------------- value parsers

_AMOUNT = re.compile(
    r"(?<![\w.,/-])(?P<sign>[-−–])?\s?(?P<num>\d{1,3}(?:[.,'\u00a0\u202f ]\d{3})+(?:[.,]\d{1,4})?|\d+(?:[.,]\d{1,4})?)(?![\w%/]|[.,]\d)"
)
_SYMBOLS = {
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
_DOLLAR_PREFIXES = {
    "US$": "USD",
    "A$": "AUD",
    "AU$": "AUD",
    "C$": "CAD",
    "CA$": "CAD",
    "NZ$": "NZD",
    "HK$": "HKD",
    "S$": "SGD",
}


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str | None


def _currency_near(text: str, start: int, end: int) -> str | None:
    before, after = text[max(0, start - 5) : start], text[end : end + 5]
    for window in (after, before):
        m = re.search(r"\b([A-Z]{3})\b", window)
        if m and m.group(1) in KNOWN_CURRENCIES:
            return m.group(1)
        for prefix, code in _DOLLAR_PREFIXES.items():
            if prefix in window:
                return code
        for sym, code in _SYMBOLS.items():
            if sym in window:
                return code
    return None


def first_money(text: str) -> Money | None:
    for m in _AMOUNT.finditer(text):
        tail = text[m.end() : m.end() + 2]
        if tail.strip().startswith("%"):
            continue
        amount = parse_number(m.group("num"))
        if amount is None:
            continue
        if m.group("sign"):
            amount = -amount
        return Money(amount, _currency_near(text, m.start(), m.end()))
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

_MONTH_WORD = r"([A-Za-zÀ-ÿ]{3,10})\.?"
_DATE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<!\d)(\d{4})-(\d{1,2})-(\d{1,2})(?!\d)"), "ymd"),
    (re.compile(r"(?<!\d)(\d{4})/(\d{1,2})/(\d{1,2})(?!\d)"), "ymd"),
    (re.compile(r"(?<![\d.])(\d{1,2})\.\s?(\d{1,2})\.\s?(\d{4}|\d{2})(?![\d])"), "dmy"),
    (re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})/(\d{4}|\d{2})(?![\d/])"), "dmy?"),
    (re.compile(r"(?<![\d-])(\d{1,2})-(\d{1,2})-(\d{4})(?![\d-])"), "dmy"),
    # Spaces optional: OCR often reads "19 January 2024" as "19January2024" (the month must
    # still be a known month name).
    (re.compile(r"(?<!\d)(\d{1,2})\.?\s*" + _MONTH_WORD + r",?\s*(\d{4})(?!\d)"), "d_month_y"),
    (re.compile(_MONTH_WORD + r"\s*(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})(?!\d)"), "month_d_y"),
)


def _year(y: str) -> int:
    n = int(y)
    return n + 2000 if len(y) == 2 else n


def _month(word: str) -> int | None:
    return _MONTHS.get(word.lower())


def _mk(y: int, m: int, d: int) -> date | None:
    try:
        return date(y, m, d)
    except ValueError:
        return None


def find_dates(text: str) -> list[tuple[int, date]]:
    """(position, date) for every date-looking token, in text order."""
    found: list[tuple[int, date]] = []
    taken: list[range] = []
    for pattern, kind in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() in r for r in taken):
                continue
            g = m.groups()
            parsed: date | None = None
            if kind == "ymd":
                parsed = _mk(int(g[0]), int(g[1]), int(g[2]))
            elif kind in ("dmy", "dmy?"):
                a, b = int(g[0]), int(g[1])
                # Slash dates are day-first unless that is impossible (US "12/31/2024").
                if kind == "dmy?" and b > 12 >= a:
                    a, b = b, a
                parsed = _mk(_year(g[2]), b, a)
            elif kind == "d_month_y":
                month = _month(g[1])
                parsed = _mk(int(g[2]), month, int(g[0])) if month else None
            else:
                month = _month(g[0])
                parsed = _mk(int(g[2]), month, int(g[1])) if month else None
            if parsed is not None:
                found.append((m.start(), parsed))
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
    return _mk(int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


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


_VAT_VALUE = re.compile(r"\b([A-Z]{2,3})[ \-]?([0-9A-Z.\-]*\d[0-9A-Z.\-]*(?: [0-9A-Z.\-]*\d[0-9A-Z.\-]*)*)")
# The same typed in lower case ("de 123.456.789"); tried only when no upper-case id is there.
_VAT_VALUE_LOWER = re.compile(
    r"\b([a-z]{2})[ \-]?([0-9a-z.\-]*\d[0-9a-z.\-]*(?: [0-9a-z.\-]*\d[0-9a-z.\-]*)*)"
)


def vat_id_value(text: str) -> str | None:
    """A VAT id that starts with a VAT country prefix, read after a bare tax word."""
    value = vat_value(text)
    prefix = re.match(r"[A-Z]{2,3}", value or "")
    return value if prefix and {prefix.group(), prefix.group()[:2]} & _VAT_COUNTRIES else None


def vat_value(text: str) -> str | None:
    for pattern in (_VAT_VALUE, _VAT_VALUE_LOWER):
        for m in pattern.finditer(text):
            value = (m.group(1) + m.group(2).replace(" ", "")).rstrip(".-")
            alnum = re.sub(r"[^0-9A-Z]", "", value.upper())
            if 8 <= len(alnum) <= 16 and sum(ch.isdigit() for ch in alnum) >= 6:
                return value
    return None


# ---------------------------------------------------------------- labels

_NOT_THIS_DOC = re.compile(
    r"(original|related|referenced|corrected|preceding|ursprüngliche|bezug|vorherige)\W*$", _I
)

NUMBER_LABELS = (
    r"(?:invoice|bill|credit\s*note|debit\s*note)\s*(?:no\b\.?|nr\b\.?|number|num\b\.?|n[°º]|#|id\b)",
    r"(?:rechnungs|gutschrifts|beleg)-?\s*(?:nummer|nr\b\.?|no\b\.?)",
    r"(?:handels|gutschrifts?|korrektur|schluss|storno)?rechnung\s*(?:\(\d+\)\s*)?(?:nr\b\.?|no\b\.?|nummer|#)",
    r"(?:n[°º]|num[ée]ro|no\b\.?)\s*(?:de\s*)?(?:la\s*)?(?:facture|avoir)(?!\s*(?:associ|d['’]origine|initiale))",
    r"(?:facture|avoir)\s*(?:n[°º]|num[ée]ro|no\b\.?)",
    r"(?:factura|fattura|factuur|faktura)\s*(?:n[°º]|n\b\.?|no\b\.?|nr\b\.?|n[úu]mero|numero|nummer)",
)
NUMBER_HEADING = r"^(?:invoice|rechnung|facture|factura|fattura|factuur|credit\s*note|gutschrift|avoir)\b"
# A bare number marker ("N° FA-1", "Numero: X", "No. 42") means the invoice number only in the
# heading's block, where the heading says what it numbers.
_HEADING_ALONE = re.compile(NUMBER_HEADING + r"\W*$", _I)
_BARE_NUMBER = re.compile(
    r"^(?:n\.?[°º]|no\b\.?|n\.|nr\b\.?|#|num[ée]ro\b|number\b|nummer\b|n[úu]mero\b)\s*[:.]?\s*(?=\S)", _I
)
_HEADING_REACH = 3

ISSUE_DATE_LABELS = (
    r"(?:invoice|billing|issue|document)\s*date|date\s*of\s*(?:invoice|issue)|rechnungsdatum|belegdatum"
    r"|ausstellungsdatum|date\s*(?:de\s*(?:la\s*)?facture|d['’][ée]mission)(?!\s*associ)|fecha\s*(?:de\s*)?(?:factura|emisi[oó]n)"
    r"|data\s*(?:fattura|emissione)|factuurdatum|issued\s*(?:at|on)|dated",
    r"(?<![\w-])(?:date|datum|data|fecha)\b(?!\s*(?:de\s*|d['’]\s*|of\s*|di\s*|van\s*)?(?:livraison|prestation|d[ée]but|fin|commande"
    r"|[ée]ch[ée]ance|paiement|facture\s*associ|limite|r[èe]glement|exigibilit|impression|payment|delivery|supply|service"
    r"|order|print|pago|vencimiento|entrega|pagamento|scadenza|consegna|levering|betaling))",
)
# Dates that stamp the page itself, not the invoice: a format or stylesheet version, a print run.
_STAMP_CONTEXT = re.compile(
    r"version|stylesheet|\bstand\b|druck|gedruckt|print|impression|erstellt\s*mit|generated|created\s*(?:with|by)"
    r"|\bseite\b|\bpage\b",
    _I,
)
_ISSUE_EXCLUDE = re.compile(
    r"(due|delivery|deliver|order|liefer|leistungs|f[äa]llig|[ée]ch[ée]ance|livraison|service|payment|zahlungs|bestell"
    r"|d[ée]but|fin|period|zeitraum|birth|geburt)\W*\w*\W*$",
    _I,
)
DUE_DATE_LABELS = (
    r"due\s*date|date\s*due|payment\s*due|due\s*(?:on|by)|payable\s*(?:by|until|on\s*or\s*before)|pay\s*by"
    r"|remit\s*(?:until|by)|f[äa]llig(?:keit(?:sdatum)?|\s*am)|zahlbar\s*bis|zahlungsziel|date\s*d['’][ée]ch[ée]ance"
    r"|[ée]ch[ée]ance|vencimiento|scadenza|vervaldatum",
    r"zahlbar[^\n]{0,40}?\bbis|payable[^\n]{0,30}?\b(?:by|until)",
)


def fields_labelled(label: str) -> frozenset[str]:
    """What the dictionaries say a label names: "invoice_number", "issue_date", "due_date", or
    "other_date" (a delivery, service or order date: a date, and not the invoice's)."""
    out = {
        name
        for name, patterns in (
            ("invoice_number", NUMBER_LABELS),
            ("issue_date", ISSUE_DATE_LABELS),
            ("due_date", DUE_DATE_LABELS),
        )
        if any(re.search(p, label, _I) for p in patterns)
    }
    if _ISSUE_EXCLUDE.search(label + " "):
        out = (out - {"issue_date"}) | {"other_date"}
    return frozenset(out)


PAYABLE_LABELS = (
    r"amount\s*due|total\s*due|balance\s*due|amount\s*payable|total\s*payable|due\s*payable|payable\s*amount"
    r"|zahlbetrag|zu\s*zahlen(?:der\s*betrag)?|offener\s*betrag|net\s*[àa]\s*payer|montant\s*[àa]\s*payer|reste\s*[àa]\s*payer"
    r"|total\s*[àa]\s*payer|importe\s*a\s*pagar|totale\s*da\s*pagare|te\s*betalen",
    r"total\s*ttc|gesamtbetrag|rechnungsbetrag|bruttosumme|bruttobetrag|gesamtsumme|endbetrag|invoice\s*total"
    r"|grand\s*total|total\s*amount|total\s*incl\.?(?:uding)?\s*(?:vat|tax)|total\s*\(incl|total\s*brutto|summe\s*brutto",
)
VAT_LABELS = (
    r"(?:vat|tax)\s*-?\s*(?:id|no\b\.?|number|reg(?:istration)?\.?\s*(?:no\b\.?|number)?)|ust\.?\s*-?\s*id\.?\s*(?:-?\s*nr\.?)?"
    r"|ust-?idnr\.?|umsatzsteuer-?\s*id(?:entifikations)?(?:nummer|-nr\.?)?|uid(?:-nr\.?)?|n[°º]\s*(?:de\s*)?tva(?:\s*intracom\w*)?"
    r"|num[ée]ro\s*de\s*tva|tva\s*intracom\w*|p\.?\s*iva|partita\s*iva|nif|cif|btw(?:-?\s*(?:nr|nummer)\.?)?"
    r"|mwst\.?-?\s*nr\.?|n[°º]\s*intracom\w*|vat",
    # Bare tax words also head amounts ("TVA 123,54"): only a well-formed VAT id counts after them.
    r"tva|btw|iva|mwst|ust|moms|dph|dic",
)
# VAT-id country prefixes (EU, "EL" for Greece, UK, Northern Ireland, Switzerland, Norway).
_VAT_COUNTRIES = frozenset(
    "AT BE BG CY CZ DE DK EE EL ES FI FR HR HU IE IT LT LU LV MT NL PL PT RO SE SI SK GB XI CH CHE NO".split()
)
_BUYER_CONTEXT = re.compile(
    r"(your|ihre|customer|client|kunden|buyer|k[äa]ufer|acheteur|vos|bill\s*to)\W*\S*\W*$", _I
)
PO_LABELS = (
    r"(?:purchase\s*order|p\.?\s*o\.?(?!\s*box))\s*(?:no\b\.?|number|#|ref\b\.?)?|order\s*(?:no\b\.?|number|ref(?:erence)?|#)"
    r"|your\s*order|customer\s*order|ihre\s*bestellung|bestell(?:nummer|-?nr\.?|ung\s*nr\.?)|auftragsnummer"
    r"|n[°º]\s*(?:de\s*)?bon\s*de\s*commande|bon\s*de\s*commande|commande\s*n[°º]|n[úu]mero\s*de\s*pedido|ordine\s*n\.?",
)
CURRENCY_LABELS = r"(?:currency|w[äa]hrung|devise|moneda|valuta)\s*:?"
CREDIT_NOTE_HEADING = re.compile(
    r"^(?:credit\s*note|credit\s*memo|gutschrift|rechnungskorrektur|stornorechnung|avoir|nota\s*de\s*cr[ée]dito"
    r"|nota\s*di\s*credito|creditnota)\b",
    _I,
)
SELLER_ROLE = re.compile(
    r"^(?:seller|vendor|supplier|from|bill\s*from|verk[äa]ufer|lieferant|leistungserbringer|rechnungssteller|absender"
    r"|vendeur|fournisseur|[ée]metteur|proveedor|emisor|fornitore|cedente|leverancier|afzender)\s*(?::\s*(.*)|$)",
    _I,
)
BUYER_ROLE = re.compile(
    r"^(?:bill(?:ed)?\s*to|invoice\s*to|sold\s*to|customer|client|buyer|recipient"
    r"|k[äa]ufer(?:\s*/\s*leistungsempf[äa]nger)?|rechnungsempf[äa]nger|leistungsempf[äa]nger|kunde|empf[äa]nger"
    r"|adresse\s*du\s*client|destinataire|factur[ée]\s*[àa]|acheteur|cliente|comprador|destinatario|committente"
    r"|klant|afnemer|factuuradres|gefactureerd\s*aan)\s*(?::\s*(.*)|$)",
    _I,
)
NAME_SUBLABEL = re.compile(
    r"^(?:name|nom|firma|company|raison\s*sociale|nombre|ragione\s*sociale)\s*:\s*(.*)$", _I
)
_ANY_SUBLABEL = re.compile(r"^[\w .\-/]{2,30}:(?:\s|$)", _I)
_SENDER_SEPARATORS = re.compile(r"\s+[●•·|∙▪]\s+|\s+[-–]\s+")


# ---------------------------------------------------------------- search


def label_hits(
    doc: TextDoc,
    pattern: str,
    value_of: Callable[[str], T | None],
    *,
    below: bool = False,
    confidence: float = 0.85,
    exclude_before: re.Pattern[str] | None = None,
) -> Iterator[Hit[T]]:
    """Every value after (or right of, or under) a label matching `pattern`, in page order."""
    rx = re.compile(pattern, _I)
    for seg in doc.segs():
        for m in rx.finditer(seg.text):
            if m.start() > 0 and seg.text[m.start() - 1].isalnum():
                continue
            if m.end() < len(seg.text) and seg.text[m.end()].isalnum() and m.group()[-1].isalnum():
                continue  # "Po" inside "Positionssumme"
            prefix = seg.text[: m.start()]
            if exclude_before is not None and exclude_before.search(prefix):
                continue
            conf = confidence
            value = value_of(seg.text[m.end() :])
            value_seg = seg
            # A label inside a sentence ("... en indiquant le numéro de facture") heads no
            # column: what stands beside or below it is something else (a phone number).
            in_prose = len(_WORD.findall(prefix)) >= 2
            if value is None and not in_prose:
                for right in doc.right_of(seg)[:2]:
                    value = value_of(right.text)
                    if value is not None:
                        value_seg = right
                        break
            value_line: int | None = None
            if value is None and below and not in_prose:
                for under in doc.below(seg, seg.col + m.start(), seg.col + m.end()):
                    value = value_of(_under_slice(under, seg.col + m.start(), seg.col + m.end()))
                    if value is not None:
                        conf -= 0.1
                        value_line = under.line
                        value_seg = under
                        break
            if value is not None:
                where = ((seg.line, seg.index), (value_seg.line, value_seg.index))
                yield Hit(value, seg.line, m.group().strip(), conf, value_line, where)


_WORD = re.compile(r"[^\W\d_]{2,}")


def labelled(
    doc: TextDoc,
    labels: tuple[str, ...] | str,
    value_of: Callable[[str], T | None],
    *,
    below: bool = False,
    pick: str = "first",
    confidences: tuple[float, ...] = (0.85, 0.7, 0.6),
    exclude_before: re.Pattern[str] | None = None,
) -> Hit[T] | None:
    """The first (or last) value of the strongest label tier that yields one."""
    tiers = (labels,) if isinstance(labels, str) else labels
    for tier, pattern in enumerate(tiers):
        hits = label_hits(
            doc,
            pattern,
            value_of,
            below=below,
            confidence=confidences[min(tier, len(confidences) - 1)],
            exclude_before=exclude_before,
        )
        if pick == "first":
            if (hit := next(hits, None)) is not None:
                return hit
        elif found := list(hits):
            return found[-1]
    return None


def _under_slice(under: Seg, start: int, end: int) -> str:
    """The words of a segment below that sit under the label's columns (tables of totals)."""
    words = [(under.col + w.start(), under.col + w.end(), w.group()) for w in re.finditer(r"\S+", under.text)]
    picked = [w for w in words if w[0] < end + 2 and w[1] > start - 2]
    if not picked:
        return under.text
    # Keep a trailing currency code or symbol attached to the amount.
    last = words.index(picked[-1])
    if last + 1 < len(words) and not re.search(r"\d", words[last + 1][2]):
        picked.append(words[last + 1])
    return " ".join(w[2] for w in picked)


def _has_letters(text: str) -> bool:
    return sum(ch.isalpha() for ch in text) >= 2


def _clean_name(text: str) -> str | None:
    text = re.sub(r"\s+", " ", text).strip(" ,;:")
    return text if _has_letters(text) else None


def _looks_like_label(text: str) -> bool:
    return bool(_ANY_SUBLABEL.match(text)) or bool(re.match(r"^(?:nummer|number|no\.?|nr\.?)\b", text, _I))


def _sender_line(doc: TextDoc, limit: int) -> Seg | None:
    """The one-line return address above a window envelope address ("Acme GmbH · Street 1 · 12345 City")."""
    for seg in doc.segs():
        if seg.line >= limit:
            break
        parts = [p for p in _SENDER_SEPARATORS.split(seg.text) if p.strip()]
        if (
            len(parts) >= 3
            and _has_letters(parts[0])
            and any(re.search(r"\d", p) for p in parts[1:])
            and not LEGAL_MARKERS.search(seg.text)
        ):
            return seg
    return None


def _role_block_name(doc: TextDoc, role: re.Pattern[str], limit: int) -> Hit[str] | None:
    for seg in doc.segs():
        if seg.line >= limit:
            break
        m = role.match(seg.text)
        if not m:
            continue
        rest = (m.group(1) or "").strip()
        if rest:
            sub = NAME_SUBLABEL.match(rest)
            name = _clean_name(sub.group(1) if sub else rest)
            if name and not re.search(r"\d{3,}", name) and not _looks_like_label(rest):
                return Hit(name, seg.line, m.group().strip(), 0.7)
            continue  # "Customer: 4711" is a customer number, not a block heading
        candidates = list(doc.below(seg, seg.col, seg.col + max(len(seg.text), 12), depth=6))
        for cand in candidates:
            sub = NAME_SUBLABEL.match(cand.text)
            if not sub:
                continue
            value = sub.group(1) or " ".join(s.text for s in doc.right_of(cand)[:1])
            if name := _clean_name(value):
                return Hit(name, cand.line, seg.text, 0.75)
        for cand in candidates:
            if (
                abs(cand.col - seg.col) <= 6
                and not _looks_like_label(cand.text)
                and (name := _clean_name(cand.text))
            ):
                return Hit(name, cand.line, seg.text, 0.6)
    return None


def _name_below_sender(doc: TextDoc, sender: Seg) -> Hit[str] | None:
    for seg in doc.below(sender, sender.col, sender.col + 10, depth=3):
        if (
            abs(seg.col - sender.col) <= 8
            and not _looks_like_label(seg.text)
            and (name := _clean_name(seg.text))
        ):
            return Hit(name, seg.line, "address window", 0.7)
    return None


def _currency_hits(doc: TextDoc) -> tuple[Counter[str], dict[str, int]]:
    """How often each currency stands next to an amount, and the first line it does."""
    counts: Counter[str] = Counter()
    first_line: dict[str, int] = {}
    for seg in doc.segs():
        for m in _AMOUNT.finditer(seg.text):
            code = _currency_near(seg.text, m.start(), m.end())
            if code:
                counts[code] += 1
                first_line.setdefault(code, seg.line)
    return counts, first_line


def _compact(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in folded if ch.isalnum())


def _fullest_spelling(doc: TextDoc, hit: Hit[str], layout: OcrLayout | None) -> Hit[str]:
    """The same name where it was read best (OCR only).

    The recogniser drops spaces and misreads letters in small print ("BrightmoorOffice Supplies
    td" in a 7-point return address), while the letterhead prints the same name large. Among the
    places that spell nearly the same letters (the name was already chosen; only its spelling is
    looked for), the line read with the highest confidence wins, then the one with more spaces
    (the recogniser drops spaces, it does not add them).
    """
    target = _compact(hit.value)

    def rank(line: int, name: str) -> tuple[float, int]:
        confidence = layout.locate([line])[1] if layout is not None else 0.0
        return (confidence, name.count(" "))

    best, best_rank = hit, rank(hit.line, hit.value)
    for seg in doc.segs():
        for part in _SENDER_SEPARATORS.split(seg.text):
            name = _clean_name(part)
            if not name or fuzz.ratio(_compact(name), target) < 85:
                continue
            if (candidate := rank(seg.line, name)) > best_rank:
                best, best_rank = (
                    Hit(name, seg.line, f"{hit.label}, spelt as on this line", hit.confidence),
                    candidate,
                )
    return best


def fields_from_text(
    text: str,
    *,
    ocr: bool = False,
    ocr_layout: OcrLayout | None = None,
    boxes: TextBoxes | None = None,
) -> InvoiceFields:
    """The hand reader's fields, then (text PDFs) the ranker's choice for the fields it reads
    better leave-one-layout-out (issue 40; `reading.ranker`, docs/formats.md)."""
    fields = hand_fields_from_text(text, ocr=ocr, ocr_layout=ocr_layout, boxes=boxes)
    if ocr_layout is not None:
        return fields  # scans: the ranker is not measured on OCR output yet
    # Imported here, not at the top: the candidates read this module's label dictionaries.
    from .reading.ranker import ranked_fields, shipped_ranker

    return ranked_fields(fields, text, boxes, shipped_ranker())


def hand_fields_from_text(
    text: str,
    *,
    ocr: bool = False,
    ocr_layout: OcrLayout | None = None,
    boxes: TextBoxes | None = None,
) -> InvoiceFields:
    """Fields by label rules, amounts by the page's arithmetic (`reading.amounts`).

    With `ocr_layout` (an OCRed scan), each field's source is its page and its confidence the OCR
    score of the line(s) it was read from; below the threshold it is null. With `boxes` (a text
    PDF's segment boxes) each field also says where on its page it was read.
    """
    doc = TextDoc(text)
    geometry = PageGeometry(text, boxes)
    c = FieldCollector(default_reason="no labelled value found in the PDF text")
    scale = 0.8 if ocr else 1.0
    n_lines = len(doc.lines)
    top_limit = max(25, n_lines // 2)
    kind = "ocr" if ocr_layout else "pdf-text"

    def located(
        label: str, lines: list[int], segs: tuple[tuple[int, int], ...], confidence: float
    ) -> FieldSource:
        page = geometry.page(lines[0])
        box = union([geometry.box(line, index) for line, index in segs])
        return FieldSource(f"{kind}:page {page}:line {lines[-1] + 1}:{label!r}", confidence, None, page, box)

    def put(name: str, hit: Hit[Any] | None, reason: str) -> None:
        if hit is None:
            c.miss(name, FieldSource(kind, 0.0, reason))
            return
        lines = [hit.line] if hit.value_line is None else [hit.line, hit.value_line]
        if ocr_layout is not None:
            page, confidence = ocr_layout.locate(lines)
            where = replace(located(hit.label, lines, hit.segs, round(confidence, 3)), page=page)
            if confidence < MIN_FIELD_CONFIDENCE:
                # A misread digit scores low; a value we are not sure of is not offered as one.
                c.miss(
                    name,
                    replace(
                        where,
                        reason=f"OCR confidence {confidence:.2f} is below {MIN_FIELD_CONFIDENCE:.2f}; "
                        "not guessed: read it from the scan",
                    ),
                )
            else:
                c.put(name, hit.value, where)
        else:
            c.put(name, hit.value, located(hit.label, lines, hit.segs, round(hit.confidence * scale, 2)))

    number = labelled(doc, NUMBER_LABELS, first_identifier, below=True, exclude_before=_NOT_THIS_DOC)
    if number is None:
        number = labelled(doc, (NUMBER_HEADING,), first_identifier, confidences=(0.5,))
    if number is None:
        number = number_under_heading(doc)
    put("invoice_number", number, "no 'Invoice No' / 'Rechnungsnummer' / 'Facture n°' label with a value")

    credit = next((s for s in doc.segs() if s.line < top_limit and CREDIT_NOTE_HEADING.match(s.text)), None)
    if credit is not None:
        c.set(
            "document_type",
            "credit_note",
            f"pdf-text:line {credit.line + 1}:{credit.text[:30]!r}",
            0.7 * scale,
        )
    else:
        c.set("document_type", "invoice", "pdf-text:no credit-note heading", 0.6 * scale)

    issue = labelled(doc, ISSUE_DATE_LABELS, labelled_date, below=True, exclude_before=_ISSUE_EXCLUDE)
    if issue is None and number is not None:
        line_text = " ".join(s.text for s in doc.lines[number.line])
        if d := first_date(line_text):
            issue = Hit(d, number.line, "date on the invoice-number line", 0.6)
    issue = issue or date_under_heading(doc)
    if issue is None:
        for seg in doc.segs():
            if (
                _ISSUE_EXCLUDE.search(seg.text.split(":")[0] + " ")
                or re.search(r"f[äa]llig|due|bis\b|until", seg.text, _I)
                or _STAMP_CONTEXT.search(seg.text)
            ):
                continue
            if d := first_date(seg.text):
                issue = Hit(d, seg.line, "first date in the document", 0.4)
                break
    put("issue_date", issue, "no invoice date found")

    due = labelled(doc, DUE_DATE_LABELS, labelled_date, below=True)
    put("due_date", due, "no due date / payment term date found")

    found = find_amounts(text)

    def amount_hit(f: Found) -> Hit[Decimal]:
        lines = sorted({f.label_seg.line, f.value_seg.line})
        segs = ((f.label_seg.line, f.label_seg.index), (f.value_seg.line, f.value_seg.index))
        value_line = f.value_seg.line if f.value_seg.line != f.label_seg.line else None
        return Hit(f.amount, lines[0], f.label, round(0.9 * f.strength, 2), value_line, segs)

    def amount_source(f: Found) -> FieldSource:
        hit = amount_hit(f)
        lines = [hit.line] if hit.value_line is None else [hit.line, hit.value_line]
        confidence = ocr_layout.locate(lines)[1] if ocr_layout is not None else hit.confidence
        return located(f.label, lines, hit.segs, round(confidence, 3))

    resolution = resolve(found, exempt=EXEMPT.search(text) is not None, source_of=amount_source)
    put(
        "payable_total",
        None if resolution.payable is None else amount_hit(resolution.payable),
        "no amount labelled as due ('Amount due' / 'Zahlbetrag' / 'Net à payer') or as the gross total",
    )
    put(
        "net_total",
        None if resolution.net is None else amount_hit(resolution.net),
        "no net total on the page",
    )
    if resolution.tax_found is not None:
        put("tax_total", amount_hit(resolution.tax_found), "")
    elif resolution.tax is not None and resolution.check.confirmed:
        c.put("tax_total", resolution.tax, FieldSource(f"{kind}:{resolution.check.rule}", 0.8 * scale))
    else:
        put("tax_total", None, "no VAT/tax total on the page")
    payable = first_money_near(doc, resolution.payable)

    currency_hit: Hit[str] | None = labelled(
        doc,
        (CURRENCY_LABELS,),
        lambda t: next((m for m in re.findall(r"\b[A-Z]{3}\b", t) if m in KNOWN_CURRENCIES), None),
    )
    if currency_hit is None and payable is not None:
        currency_hit = payable
    if currency_hit is None:
        counts, first_line = _currency_hits(doc)
        if counts:
            code, _ = counts.most_common(1)[0]
            currency_hit = Hit(code, first_line[code], "most frequent currency next to amounts", 0.6)
    put("currency", currency_hit, "no currency code or symbol next to the amounts")

    seller, buyer, footer = parties(doc, top_limit, n_lines)
    if ocr and seller is not None:
        seller = _fullest_spelling(doc, seller, ocr_layout)
    put("seller_name", seller, "no sender line, seller block or company name with a legal form found")
    put("buyer_name", buyer, "no address window or 'Bill to' / 'Käufer' / 'Client' block found")

    vat = seller_vat(doc, seller, buyer, footer)
    put("seller_vat_id", vat, "no VAT id (e.g. 'VAT-ID: DE123456789') found")

    po = labelled(doc, PO_LABELS, first_identifier)
    put("po_number", po, "no purchase order reference found")
    if (
        currency_hit is None
        and vat is not None
        and (vat_currency := currency_of_vat_id(vat.value, issue.value if issue else None)) is not None
    ):
        # Last resort: the seller's VAT id says which country issued the invoice.
        c.put(
            "currency",
            vat_currency,
            FieldSource(f"{kind}:from seller VAT id country {vat.value[:2].upper()}", 0.5 * scale),
        )
    return replace(c.build(), amount_check=resolution.check)


def parties(doc: TextDoc, top_limit: int, n_lines: int) -> tuple[Hit[str] | None, Hit[str] | None, set[int]]:
    """Who issued the page and who it is addressed to, as the reader places them: the seller's
    name (sender line, seller block, legal footer, a company name with a legal form near the
    top), the buyer's (address window or buyer block), and the legal footer's lines."""
    sender = _sender_line(doc, top_limit)
    seller: Hit[str] | None = None
    if sender is not None:
        first = _clean_name(_SENDER_SEPARATORS.split(sender.text)[0])
        if first:
            seller = Hit(first, sender.line, "sender line", 0.8)
    seller = seller or _role_block_name(doc, SELLER_ROLE, n_lines)
    buyer = _name_below_sender(doc, sender) if sender is not None else None
    buyer = buyer or _role_block_name(doc, BUYER_ROLE, n_lines)
    footer = footer_lines(doc.lines)
    if seller is None and (owner := footer_seller(doc.lines, footer)) is not None:
        seller = Hit(owner.name, owner.line, "legal footer", 0.7 if owner.repeated else 0.55)
    if seller is None:
        for seg in doc.segs():
            if seg.line >= top_limit:
                break
            if (
                LEGAL_FORM.search(seg.text)
                and (buyer is None or seg.text != buyer.value)
                and not _looks_like_label(seg.text)
            ):
                if company := _clean_name(seg.text):
                    seller = Hit(company, seg.line, "company name with legal form", 0.5)
                    break
    return seller, buyer, footer


_CUSTOMER_REFERENCE = re.compile(
    r"^(?:kunden|customer|client|debitor|account)\s*-?\s*(?:nummer|nr|no|number|id|n[°º])|^(?:your|ihre|vos|votre)\b",
    _I,
)
_BLOCK_DEPTH = 8


def seller_vat(
    doc: TextDoc, seller: Hit[str] | None, buyer: Hit[str] | None, footer: set[int]
) -> Hit[str] | None:
    """The VAT id the seller owns when the page prints several (the buyer's is often there too).

    Ranked: in the legal footer, or in the seller's block, over one in the buyer's block or
    listed among the customer's references ("Kundennummer", "USt-IdNr." below it); then the
    label's strength; then page order.
    """
    candidates = _vat_candidates(doc, seller, buyer, footer)
    if not candidates:
        return None
    return max(candidates, key=lambda c: (c[0], c[1], -c[2].line))[2]


# A legal form in any case: what OCR makes of "B.V." or "GmbH" on a seller's own line.
_COMPANY_ANY_CASE = re.compile(LEGAL_FORM.pattern, re.IGNORECASE)


def seller_position_vat(text: str) -> str | None:
    """The VAT id printed in the seller's position (legal footer, seller block, a line naming the
    seller), letters and
    digits only; None when the page prints none there. One in the buyer's block, among the
    customer's references, or anywhere else does not say who the seller is: a vendor layout is
    bound to this (`reading.layouts`), never to a VAT id merely printed on the page."""
    doc = TextDoc(text)
    n_lines = len(doc.lines)
    seller, buyer, footer = parties(doc, max(25, n_lines // 2), n_lines)

    def on_sellers_line(hit: Hit[str]) -> bool:
        # "Halvorsen Metaalwerk B.V. - VAT Reg. No.: GB585738843": the seller names itself, as the
        # reader found it or as a company (OCR reads "B.v." as often as "B.V.").
        line = " ".join(s.text for s in doc.lines[hit.line])
        before = line[: max(0, line.find(hit.label))]
        return (seller is not None and seller.value in line) or (
            _COMPANY_ANY_CASE.search(before) is not None and (buyer is None or buyer.value not in before)
        )

    placed = [
        c
        for c in _vat_candidates(doc, seller, buyer, footer)
        # A line that names the seller is the seller's own, even right under the buyer's block
        # (which the block rule would take it for); never one among the customer's references.
        if c[0] > 0 or (on_sellers_line(c[2]) and not _among_customer_references(doc, c[2]))
    ]
    if not placed:
        return None
    best = max(placed, key=lambda c: (c[0], c[1], -c[2].line))[2]
    return re.sub(r"[^0-9A-Z]", "", best.value.upper())


def _vat_candidates(
    doc: TextDoc, seller: Hit[str] | None, buyer: Hit[str] | None, footer: set[int]
) -> list[tuple[int, int, Hit[str]]]:
    """Every labelled VAT id with its place score (footer +2, seller block +1, buyer block or
    customer references -2) and its label's tier."""
    candidates: list[tuple[int, int, Hit[str]]] = []
    for tier, (pattern, value_of) in enumerate(((VAT_LABELS[0], vat_value), (VAT_LABELS[1], vat_id_value))):
        for hit in label_hits(
            doc, pattern, value_of, confidence=(0.85, 0.6)[tier], exclude_before=_BUYER_CONTEXT
        ):
            score = 0
            if hit.line in footer:
                score += 2
            if seller is not None and _in_block(doc, seller, hit):
                score += 1
            if (buyer is not None and _in_block(doc, buyer, hit)) or _among_customer_references(doc, hit):
                score -= 2
            candidates.append((score, -tier, hit))
    return candidates


def _label_seg(doc: TextDoc, hit: Hit[Any]) -> Seg:
    return doc.lines[hit.line][hit.segs[0][1]] if hit.segs else doc.lines[hit.line][0]


def _in_block(doc: TextDoc, owner: Hit[str], hit: Hit[str]) -> bool:
    """`hit` sits a few lines under `owner`'s name, in the same column, in one run of lines."""
    if not owner.line <= hit.line <= owner.line + _BLOCK_DEPTH or not doc.lines[owner.line]:
        return False
    name_seg = next((s for s in doc.lines[owner.line] if owner.value in s.text), None)
    if name_seg is None:
        return False
    # The block runs down its column without a gap: a line with nothing there ends it.
    for line in range(owner.line + 1, hit.line):
        if not any(seg.overlaps(name_seg.col, name_seg.end, COLUMN_SLACK) for seg in doc.lines[line]):
            return False
    return _label_seg(doc, hit).overlaps(name_seg.col, name_seg.end, COLUMN_SLACK)


def _among_customer_references(doc: TextDoc, hit: Hit[str]) -> bool:
    label = _label_seg(doc, hit)
    return any(
        seg.overlaps(label.col, label.end, COLUMN_SLACK) and _CUSTOMER_REFERENCE.search(seg.text)
        for i in range(max(0, hit.line - 2), hit.line)
        for seg in doc.lines[i]
    )


def _heading_block(doc: TextDoc) -> Iterator[tuple[Seg, Seg]]:
    """(heading, segment) for the segments of the few lines under an "INVOICE" heading, near its column."""
    for head in doc.segs():
        if not _HEADING_ALONE.match(head.text):
            continue
        for i in range(head.line + 1, min(head.line + 1 + _HEADING_REACH, len(doc.lines))):
            for seg in doc.lines[i]:
                if seg.overlaps(head.col, head.end, 2 * COLUMN_SLACK):
                    yield head, seg


def number_under_heading(doc: TextDoc) -> Hit[str] | None:
    """ "FACTURE" alone, then within a few lines "N° FA-2026-0001" in the same column."""
    for head, seg in _heading_block(doc):
        if (m := _BARE_NUMBER.match(seg.text)) and (value := first_identifier(seg.text[m.end() :])):
            where = ((head.line, head.index), (seg.line, seg.index))
            return Hit(value, head.line, f"{head.text.strip()} / {m.group().strip()}", 0.6, seg.line, where)
    return None


def date_under_heading(doc: TextDoc) -> Hit[date] | None:
    """A date standing alone in the heading's block ("FACTURE / 20/09/2023 / nº 2023-6013")."""
    for head, seg in _heading_block(doc):
        dates = find_dates(seg.text)
        if len(dates) == 1 and not _has_letters(re.sub(_MONTH_WORD, "", seg.text)):
            where = ((head.line, head.index), (seg.line, seg.index))
            return Hit(dates[0][1], head.line, f"date under {head.text.strip()!r}", 0.6, seg.line, where)
    return None


def first_money_near(doc: TextDoc, found: Found | None) -> Hit[str] | None:
    """The currency printed with the payable amount (its value segment or its label)."""
    if found is None:
        return None
    for seg in (found.value_seg, found.label_seg):
        for m in _AMOUNT.finditer(seg.text):
            if code := _currency_near(seg.text, m.start(), m.end()):
                return Hit(code, seg.line, found.label, 0.85, None, ((seg.line, seg.index),))
    return None


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


def looks_like_invoice(text: str) -> bool:
    doc = TextDoc(text)
    return (
        labelled(doc, NUMBER_LABELS, first_identifier, below=True, exclude_before=_NOT_THIS_DOC) is not None
        or labelled(doc, PAYABLE_LABELS, first_money, below=True) is not None
        or any(f.kind in ("due", "gross") for f in find_amounts(text))
    )
