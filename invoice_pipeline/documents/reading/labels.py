"""Labels and the values after them: the label dictionaries (English, German, French, plus
common Spanish/Italian/Dutch terms), a page as lines of segments (`TextDoc`), and the search for
the value right of or below a label (`label_hits`, `labelled`).

The text comes from `pdf.layout_text`: one line per visual line, with columns separated by at
least three spaces, so "label   value" and "label / value below" layouts can both be read.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Generic, TypeVar

from .amounts import INSTALMENT_DUE, Found
from .page_values import AMOUNT, MONTH_WORD, currency_near, find_dates, first_identifier
from .words import Segment, segments

T = TypeVar("T")
_I = re.IGNORECASE


Seg = Segment


@dataclass(frozen=True)
class Hit(Generic[T]):
    """A value read off the page: the line of its label, the label, and how sure the rule is."""

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

    @property
    def lines(self) -> list[int]:
        """The lines the value was read from: its label's, and its own when it sits below."""
        return [self.line] if self.value_line is None else [self.line, self.value_line]


# Characters a value may stand off its label's (or its block's) column and still be in it.
COLUMN_SLACK = 6


class TextDoc:
    """A page as lines of segments (columns split where three spaces stand between them)."""

    def __init__(self, text: str, *, run_together: bool = False) -> None:
        self.lines: list[list[Seg]] = segments(text)
        # OCR output: the recogniser drops spaces between words ("acme.comVAT:", "TVAFR12…").
        self.run_together = run_together

    def joined(self, before: str, after: str) -> bool:
        """Whether two touching characters are two words run together by OCR: a small letter,
        then a capital or a digit."""
        return self.run_together and before.islower() and (after.isupper() or after.isdigit())

    def value_joined(self, after: str) -> bool:
        """Whether a label's value may touch it (OCR: "TVAFR12345678901", "InvoiceINV-7"):
        it starts with a capital or a digit, and `value_of` still has to accept it."""
        return self.run_together and (after.isupper() or after.isdigit())

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


NOT_THIS_DOC = re.compile(
    r"(original|related|referenced|corrected|preceding|ursprüngliche|bezug|vorherige)\W*$", _I
)

NUMBER_LABELS = (
    r"(?:invoice|bill|credit\s*note|debit\s*note|premium\s*notice)\s*(?:no\b\.?|nr\b\.?|number|num\b\.?|n[°º]|#|id\b)",
    r"(?:rechnungs|gutschrifts|beleg)-?\s*(?:nummer|nr\b\.?|no\b\.?)",
    # An insurer's premium invoice (Beitrags-, Prämienrechnung) and a partial one (Abschlags-,
    # Teilrechnung) are invoices too.
    r"(?:handels|gutschrifts?|korrektur|schluss|storno|abschlags|teil|beitrags|pr[äa]mien)?rechnung"
    r"\s*(?:\(\d+\)\s*)?(?:nr\b\.?|no\b\.?|nummer|#)",
    r"(?:n[°º]|num[ée]ro|no\b\.?)\s*(?:de\s*)?(?:la\s*)?(?:facture|avoir)(?!\s*(?:associ|d['’]origine|initiale))",
    r"(?:facture|avoir|avis\s*d['’]\s*[ée]ch[ée]ance)\s*(?:n[°º]|num[ée]ro|no\b\.?)",
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
STAMP_CONTEXT = re.compile(
    r"version|stylesheet|\bstand\b|druck|gedruckt|print|impression|erstellt\s*mit|generated|created\s*(?:with|by)"
    r"|\bseite\b|\bpage\b",
    _I,
)
ISSUE_EXCLUDE = re.compile(
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
    if ISSUE_EXCLUDE.search(label + " "):
        out = (out - {"issue_date"}) | {"other_date"}
    return frozenset(out)


PAYABLE_LABELS = (
    r"amount\s*due|total\s*due|balance\s*due|amount\s*payable|total\s*payable|due\s*payable|payable\s*amount"
    r"|zahlbetrag|zu\s*zahlen(?:der\s*betrag)?|offener\s*betrag|net\s*[àa]\s*payer|montant\s*[àa]\s*payer|reste\s*[àa]\s*payer"
    r"|total\s*[àa]\s*payer|importe\s*a\s*pagar|totale\s*da\s*pagare|te\s*betalen|" + INSTALMENT_DUE,
    r"total\s*ttc|gesamtbetrag|rechnungsbetrag|bruttosumme|bruttobetrag|gesamtsumme|endbetrag|invoice\s*total"
    r"|grand\s*total|total\s*amount|total\s*incl\.?(?:uding)?\s*(?:vat|tax)|total\s*\(incl|total\s*brutto|summe\s*brutto",
)
VAT_LABELS = (
    r"(?:vat|tax)\s*-?\s*(?:id|no\b\.?|number|reg(?:istration)?\.?\s*(?:no\b\.?|number)?)|ust\.?\s*-?\s*id\.?\s*(?:-?\s*nr\.?)?"
    r"|ust-?idnr\.?|umsatzsteuer-?\s*id(?:entifikations)?(?:nummer|-nr\.?)?|uid(?:-nr\.?)?|n[°º]\s*(?:de\s*)?tva(?:\s*intracom\w*)?"
    r"|num[ée]ro\s*de\s*tva|tva\s*intracom\w*|p\.?\s*iva|partita\s*iva|nif|cif|btw(?:-?\s*(?:nr|nummer)\.?)?"
    r"|mwst\.?-?\s*nr\.?|n[°º]?\s*intracom\w*|vat",
    # Bare tax words also head amounts ("TVA 123,54"): only a well-formed VAT id counts after them.
    r"tva|btw|iva|mwst|ust|moms|dph|dic",
)
BUYER_CONTEXT = re.compile(
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
SENDER_SEPARATORS = re.compile(r"\s+[●•·|∙▪]\s+|\s+[-–]\s+")


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
                if not doc.joined(seg.text[m.start() - 1], m.group()[0]):
                    continue
            if m.end() < len(seg.text) and seg.text[m.end()].isalnum() and m.group()[-1].isalnum():
                if not doc.value_joined(seg.text[m.end()]):
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


def has_letters(text: str) -> bool:
    return sum(ch.isalpha() for ch in text) >= 2


def currency_hits(doc: TextDoc) -> tuple[Counter[str], dict[str, int]]:
    """How often each currency stands next to an amount, and the first line it does."""
    counts: Counter[str] = Counter()
    first_line: dict[str, int] = {}
    for seg in doc.segs():
        for m in AMOUNT.finditer(seg.text):
            code = currency_near(seg.text, m.start(), m.end())
            if code:
                counts[code] += 1
                first_line.setdefault(code, seg.line)
    return counts, first_line


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
        if len(dates) == 1 and not has_letters(re.sub(MONTH_WORD, "", seg.text)):
            where = ((head.line, head.index), (seg.line, seg.index))
            return Hit(dates[0][1], head.line, f"date under {head.text.strip()!r}", 0.6, seg.line, where)
    return None


def first_money_near(doc: TextDoc, found: Found | None) -> Hit[str] | None:
    """The currency printed with the payable amount (its value segment or its label)."""
    if found is None:
        return None
    for seg in (found.value_seg, found.label_seg):
        for m in AMOUNT.finditer(seg.text):
            if code := currency_near(seg.text, m.start(), m.end()):
                return Hit(code, seg.line, found.label, 0.85, None, ((seg.line, seg.index),))
    return None
