"""Amounts on an invoice page: every labelled amount is a candidate, arithmetic picks the payable.

Labels name what an amount is (net, tax, gross, prepaid, due, rounding) in EN, DE, FR, NL, IT
and ES. A value stands right of its label on the same line ("Total HT   2.535,00 €"), or below
it in the same column (a totals table with a header row). The resolver then looks for the set
of printed amounts that satisfies net + tax = gross and gross + rounding - prepaid = due. The
payable total is the labelled amount due (else the gross, when nothing is prepaid); it is
*confirmed* only when such an equation held among distinct printed amounts. Anything else is
reported unconfirmed with the reason, and `domain.review` holds the invoice for a person.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from itertools import product
from typing import Literal

from ...domain.fields import AmountCandidate, AmountCheck, AmountRole, FieldSource
from ...domain.validation import KNOWN_CURRENCIES
from .words import PageGeometry, Segment, segments

# What a label says an amount is. "rounding" and "other" become role "other" in the contract.
Kind = Literal["due", "gross", "net", "tax", "prepaid", "rounding", "other"]

_I = re.IGNORECASE
CENT = Decimal("0.01")

# ---------------------------------------------------------------- numbers

# A number as printed: 1.234,56 / 1,234.56 / 1 234,56 / 1'234.56 / 1234.5; a sign before it
# (-, −, –), after it ("123,45-") or parentheses around it ("(123.45)").
NUMBER = re.compile(
    r"(?<![\w.,/'-])(?P<open>\()?(?P<sign>[-−–])?\s?(?:[€$£₹]\s?)?"
    r"(?P<num>\d{1,3}(?:(?:[.,'\u00a0\u202f]| (?=\d{3}\b))\d{3})+(?:[.,]\d{1,4})?|\d+(?:[.,]\d{1,4})?)"
    r"(?P<trail>-(?!\d))?(?P<close>\))?(?![\w%/]|[.,]\d|\s?%)"
)


def parse_number(raw: str) -> Decimal | None:
    """A printed number as a Decimal, whatever the thousands and decimal separators."""
    s = re.sub(r"[\s\u00a0\u202f']", "", raw)
    if "," in s and "." in s:
        dec = "," if s.rfind(",") > s.rfind(".") else "."
        s = s.replace("." if dec == "," else ",", "").replace(",", ".")
    elif "," in s or "." in s:
        sep = "," if "," in s else "."
        head, _, tail = s.rpartition(sep)
        # One separator followed by exactly three digits is a thousands separator ("1.234"),
        # except after a lone zero ("0.025" is a unit price).
        if s.count(sep) > 1 or (len(tail) == 3 and head.lstrip("-") not in ("", "0")):
            s = s.replace(sep, "")
        else:
            s = s.replace(sep, ".")
    try:
        return Decimal(s)
    except InvalidOperation:
        return None


@dataclass(frozen=True)
class PrintedNumber:
    start: int
    end: int
    value: Decimal


def numbers_in(text: str) -> list[PrintedNumber]:
    """Every number in `text` that is not a percentage, signed as printed."""
    out: list[PrintedNumber] = []
    for m in NUMBER.finditer(text):
        if bool(m.group("open")) != bool(m.group("close")) and m.group("close"):
            # "(19 %)" style closing bracket without an opening one belongs to the label.
            pass
        value = parse_number(m.group("num"))
        if value is None:
            continue
        negative = bool(m.group("sign") or m.group("trail") or (m.group("open") and m.group("close")))
        out.append(PrintedNumber(m.start(), m.end(), -value if negative else value))
    return out


# ---------------------------------------------------------------- labels

# Labels that look like amount labels but name an identifier or a rate: never an amount.
_NOT_AN_AMOUNT = re.compile(
    r"(?:vat|tax|tva|btw|iva|ust|mwst|umsatzsteuer)\s*[-.]?\s*(?:id|no\b|nr\b|num|number|reg|identif|satz|rate|code|%)"
    r"|taux|tax\s*rate|steuersatz|intracom|n[°º]\s*(?:de\s*)?tva|num[ée]ro\s*(?:de\s*)?tva|partita|p\.\s*iva"
    r"|id\s*tva|steuernummer|btw-?nummer|tax\s*point|\bnif\b|\bcif\b",
    _I,
)
_PREFIX = r"(?:[+=]\s*|plus\s+|zzgl\.?\s*|zuz[üu]gl(?:ich|\.)?\s*|dont\s+|davon\s+|incl(?:\.|uded)?\s+)?"
_END = r"(?![\w])"

# What an insurer's or a utility's invoice asks to be paid: the premium, the instalment
# ("Abschlag" alone is a markdown, "Abschlagsbetrag" the instalment due).
INSTALMENT_DUE = (
    r"premium\s*(?:due|payable)|zu\s*zahlende[rn]?\s*(?:betrag|beitrag|summe)|f[äa]lliger\s*(?:betrag|beitrag)"
    r"|abschlags(?:betrag|zahlung)|(?:cotisation|prime)\s*(?:ttc\s*)?[àa]\s*payer"
)

# (kind, pattern, strength), most specific first; matched at the start of a text segment.
LABELS: tuple[tuple[Kind, str, float], ...] = (
    (
        "other",
        r"gesamtbetrag\s*der\s*(?:zu|ab)schl|total\s*(?:allowances|charges)|remise|rabatt|skonto|discount|allowance|abschlag|zuschlag",
        0.5,
    ),
    (
        "rounding",
        r"rounding(?:\s*amount)?|rundung(?:sbetrag)?|arrondi|afronding|arrotondamento|redondeo",
        0.9,
    ),
    (
        "prepaid",
        r"prepaid(?:\s*amount)?|already\s*paid|amount\s*paid|paid\s*amount|payments?\s*received|deposit\s*paid|advance\s*payment"
        r"|(?:erhaltene\s*|geleistete\s*)?anzahlung(?:en)?|voraus(?:be)?zahl\w*(?:\s*betrag)?|vorausbezahlter\s*betrag|bereits\s*(?:be)?gezahlt\w*"
        r"|acomptes?(?:\s*vers[ée]s?)?|(?:montant\s*)?d[ée]j[àa]\s*(?:pay[ée]|vers[ée]|r[ée]gl[ée])|vooruitbetaald(?:\s*bedrag)?|reeds\s*betaald"
        r"|aanbetaling|anticipo|acconto|gi[àa]\s*pagato|ya\s*pagado|importe\s*pagado",
        0.9,
    ),
    (
        "due",
        r"(?:total\s*)?amount\s*due|total\s*due|balance\s*due|balance|amount\s*payable|total\s*payable|due\s*payable|payable\s*amount"
        r"|open\s*amount|outstanding(?:\s*(?:amount|balance))?|amount\s*to\s*pay|please\s*pay"
        r"|zahlbetrag|zu\s*zahlen(?:der\s*betrag)?|offener\s*betrag|restbetrag|noch\s*zu\s*zahlen|endbetrag\s*zu\s*zahlen"
        r"|net\s*[àa]\s*payer|montant\s*[àa]\s*payer|reste\s*[àa]\s*payer|total\s*[àa]\s*payer|solde\s*(?:[àa]\s*payer|d[ûu])?|montant\s*d[ûu]"
        r"|te\s*betalen(?:\s*bedrag)?|totaal\s*te\s*betalen|openstaand\s*bedrag|nog\s*te\s*betalen"
        r"|importe\s*a\s*pagar|total\s*a\s*pagar|importe\s*pendiente|saldo\s*pendiente"
        r"|totale\s*da\s*pagare|importo\s*da\s*pagare|netto\s*a\s*pagare|saldo\s*da\s*pagare|"
        + INSTALMENT_DUE,
        1.0,
    ),
    (
        "net",
        r"total\s*(?:net\s*)?ht(?:\s*net)?|montant\s*(?:total\s*)?ht|total\s*net(?:\s*ht)?|montant\s*total\s*net|total\s*hors\s*tax\w*"
        r"|net\s*total(?:\s*amount)?|total\s*net\s*amount|sub-?\s*total|net\s*amount|net\s*amout|total\s*excl\.?(?:uding)?\s*(?:vat|tax)"
        r"|total\s*before\s*tax|total\s*\(?excl\w*\.?(?:\s*(?:vat|tax))?\)?|amount\s*excl\w*\.?\s*(?:vat|tax)"
        r"|summe\s*netto|netto\s*summe|nettosumme|gesamt(?:betrag)?\s*netto|nettobetrag|netto\s*betrag|rechnungssumme\s*ohne\s*(?:ust|mwst)\.?"
        r"|warenwert|summe\s*waren|positionssumme|summe\s*positionen|line\s*total\s*amount|netto"
        r"|totaal\s*excl\.?(?:usief)?(?:\s*btw)?|subtotaal|netto\s*bedrag|bedrag\s*excl\.?(?:\s*btw)?"
        r"|totale\s*imponibile|imponibile|totale\s*netto|base\s*imponible|total\s*neto|importe\s*neto|subtotal",
        0.9,
    ),
    (
        "gross",
        r"total\s*ttc|montant\s*(?:total\s*)?ttc|montant\s*total\s*brut|total\s*brut|gross\s*total(?:\s*amount)?|total\s*gross"
        r"|invoice\s*total|grand\s*total|total\s*amount|total\s*incl\.?(?:uding)?\s*(?:vat|tax)|total\s*\(incl\w*\.?(?:\s*(?:vat|tax))?\)?"
        r"|gesamtbetrag(?:\s*brutto)?|rechnungsbetrag|rechnungssumme|bruttosumme|bruttobetrag|gesamtsumme|endbetrag|brutto"
        r"|summe\s*(?:inkl|incl)\.?\s*(?:ust|mwst)\.?|summe\s*brutto|total\s*brutto"
        r"|totaal\s*incl\.?(?:usief)?(?:\s*btw)?|totaalbedrag|factuurbedrag|totale\s*fattura|totale\s*documento|totale\s*ivato"
        r"|importe\s*total|total\s*factura|total\s*con\s*iva",
        0.85,
    ),
    (
        "tax",
        r"(?:vat|tax)\s*total|total\s*(?:vat|tax|iva|btw|mwst|ust|tva)|sales\s*tax|value\s*added\s*tax|taxe\s*sur\s*la\s*valeur\s*ajout[ée]e|impuesto\w*|vat\s*amount|tax\s*amount"
        r"|steuerbetrag|(?:mwst|ust)\.?\s*-?\s*betrag|summe\s*(?:ust|mwst)\.?|(?:ust|mwst)\.?\s*gesamt|umsatzsteuer\s*gesamt"
        r"|umsatzsteuer|mehrwertsteuer|mwst\.?|ust\.?|total\s*tva|montant\s*(?:de\s*la\s*)?tva|tva|totaal\s*btw|btw(?:\s*bedrag)?"
        r"|totale\s*iva|iva\s*total|importe\s*iva|cuota\s*iva|iva|imposta|vat|tax",
        0.85,
    ),
    ("gross", r"total|totaal|totale|summe|gesamt", 0.5),
)
_LABEL_PATTERNS: tuple[tuple[Kind, re.Pattern[str], float], ...] = tuple(
    (kind, re.compile(r"^\W{0,3}" + _PREFIX + r"(?:" + pattern + r")" + _END, _I), strength)
    for kind, pattern, strength in LABELS
)
_RATE = re.compile(r"\d+(?:[.,]\d+)?\s?%")
# A base amount inside a rate label: "(19.00% of €121.50)", "19% auf 100,00".
_BASE_WORD = re.compile(r"(?:of|auf|sur|su|de|van|on|from|von)\s*[€$£]?\s*$", _I)
# The page says no VAT is charged: net and gross may then be equal with no tax row.
EXEMPT = re.compile(
    r"§\s*19\s*ustg|kleinunternehmer|umsatzsteuerbefreit|steuerfrei|tva\s*non\s*applicable|293\s*b\s*du\s*cgi"
    r"|vat\s*exempt|exempt\s*from\s*vat|no\s*vat\s*(?:is\s*)?charged|reverse\s*charge|autoliquidation|btw\s*verlegd"
    r"|vrijgesteld\s*van\s*btw|esente\s*iva|exento\s*de\s*iva|inversi[oó]n\s*del\s*sujeto\s*pasivo",
    _I,
)


@dataclass(frozen=True)
class LabelMatch:
    kind: Kind
    strength: float
    end: int  # where the label ends in the segment text
    label: str
    rate_in_label: bool


def amount_label(text: str) -> LabelMatch | None:
    """What amount the segment's leading label names, if it names one."""
    if _NOT_AN_AMOUNT.match(text.strip()) or re.match(
        r"^\W{0,3}" + _PREFIX + _NOT_AN_AMOUNT.pattern, text, _I
    ):
        return None
    for kind, pattern, strength in _LABEL_PATTERNS:
        m = pattern.match(text)
        if m is None:
            continue
        after = text[m.end() :]
        # A label is followed by its value, a colon, a bracket or a currency, not by more prose.
        words = re.match(r"\s*(?:\([^)]*\)|[:\-=]|in\s+|en\s*euros?|[€$£]|\s)*", after)
        rest = after[words.end() if words else 0 :]
        code = re.match(r"[A-Z]{3}\b", rest)
        if code and code.group() in KNOWN_CURRENCIES:
            rest = rest[3:].lstrip(" :)")
        if rest and not NUMBER.match(rest) and re.match(r"[A-Za-zÀ-ÿ]{3,}", rest):
            continue
        label = text[: m.end()].strip(" :")
        return LabelMatch(kind, strength, m.end(), label, kind == "tax" and bool(_RATE.search(text)))
    return None


# ---------------------------------------------------------------- candidates on the page


@dataclass(frozen=True)
class Found:
    """One labelled amount on the page."""

    kind: Kind
    amount: Decimal
    label: str
    strength: float
    label_seg: Segment
    value_seg: Segment
    # A row of a per-rate breakdown (a rate in the label, or one of several rows under a
    # column header): summed to a tax total, never itself a total.
    rate_row: bool = False


# What may print beside an amount in its cell: a currency, as a symbol or a code.
_CURRENCY_ONLY = re.compile(r"[\s€$£₹]*(?:[A-Z]{3}|CHF|kr|zł|Kč|euros?)?[\s€$£₹]*", _I)


def _amount_only(seg: Segment) -> Decimal | None:
    """The amount when a segment is nothing but an amount (and a currency)."""
    found = numbers_in(seg.text)
    if len(found) != 1:
        return None
    rest = seg.text[: found[0].start] + seg.text[found[0].end :]
    return found[0].value if _CURRENCY_ONLY.fullmatch(rest) else None


def ends_in_amount(text: str) -> bool:
    """A segment whose last number ends it (but for a currency): an amount cell or
    "label 12.50", not a sentence with a number inside ("Registered No. 0441 - VAT ...")."""
    found = numbers_in(text)
    return bool(found) and _CURRENCY_ONLY.fullmatch(text[found[-1].end :]) is not None


def _value_after(text: str) -> Decimal | None:
    """The amount a label's own segment gives after it: the last one that is not a rate base."""
    best: Decimal | None = None
    for n in numbers_in(text):
        if _BASE_WORD.search(text[: n.start]):
            continue
        best = n.value
    return best


def find_amounts(text: str, geometry: PageGeometry | None = None) -> list[Found]:
    """Every labelled amount on the page, from same-line values and totals-table columns (the
    columns measured on the page where `geometry` knows the boxes)."""
    lines = segments(text)
    found: list[Found] = []
    pending: list[tuple[Segment, LabelMatch]] = []
    for row in lines:
        for k, seg in enumerate(row):
            match = amount_label(seg.text)
            if match is None:
                continue
            value = _value_after(seg.text[match.end :])
            value_seg = seg
            if value is None:
                for right in row[k + 1 :]:
                    if amount_label(right.text) is not None:
                        break
                    numbers = [
                        n for n in numbers_in(right.text) if not _BASE_WORD.search(right.text[: n.start])
                    ]
                    if numbers:
                        value, value_seg = numbers[-1].value, right
                        break
            if value is None:
                pending.append((seg, match))
                continue
            found.append(
                Found(match.kind, value, match.label, match.strength, seg, value_seg, match.rate_in_label)
            )
    found.extend(_column_values(lines, pending, geometry or PageGeometry(text, None)))
    return found


def _column_values(
    lines: list[list[Segment]], pending: list[tuple[Segment, LabelMatch]], geometry: PageGeometry
) -> list[Found]:
    """Values below header labels: a row of amounts under a row of labels, or a column."""
    out: list[Found] = []
    used: set[int] = set()
    for i, (seg, _) in enumerate(pending):
        if i in used:
            continue
        group = [
            j for j, (other, _) in enumerate(pending) if j not in used and 0 <= other.line - seg.line <= 2
        ]
        last = max(pending[j][0].line for j in group)
        for row in lines[last + 1 : last + 6]:
            values = [(s, _amount_only(s)) for s in row]
            if row and len(row) >= 2 and all(v is not None for _, v in values):
                if len(values) == len(group):
                    heads = sorted(group, key=lambda j: (pending[j][0].col, pending[j][0].line))
                    for j, (value_seg, value) in zip(heads, values, strict=True):
                        head, match = pending[j]
                        assert value is not None
                        out.append(Found(match.kind, value, match.label, match.strength, head, value_seg))
                        used.add(j)
                break
    for i, (seg, match) in enumerate(pending):
        if i in used:
            continue
        rows: list[tuple[Segment, Decimal]] = []
        for row in lines[seg.line + 1 : seg.line + 8]:
            hit = next(
                (
                    (s, v)
                    for s in row
                    if geometry.same_column(s, seg, 3) and (v := _amount_only(s)) is not None
                ),
                None,
            )
            if hit is None:
                if rows:
                    break
                continue
            rows.append(hit)
        for value_seg, value in rows:
            out.append(
                Found(
                    match.kind,
                    value,
                    match.label,
                    match.strength * 0.8,
                    seg,
                    value_seg,
                    rate_row=len(rows) > 1,
                )
            )
    return out


# ---------------------------------------------------------------- the resolver


@dataclass(frozen=True)
class Resolution:
    payable: Found | None
    net: Found | None
    tax: Decimal | None
    tax_found: Found | None
    check: AmountCheck


_ROLES: dict[Kind, AmountRole] = {
    "due": "due",
    "gross": "gross",
    "net": "net",
    "tax": "tax",
    "prepaid": "prepaid",
    "rounding": "other",
    "other": "other",
}


def _role(kind: Kind) -> AmountRole:
    return _ROLES[kind]


def _fmt(value: Decimal) -> str:
    return f"{value:.2f}"


@dataclass(frozen=True)
class _Tax:
    amount: Decimal
    found: Found | None
    what: str
    tolerance: Decimal


def resolve(found: Sequence[Found], *, exempt: bool, source_of: Callable[[Found], FieldSource]) -> Resolution:
    """The payable total the page's arithmetic supports, and whether it confirms it."""
    printed = _Printed.of(found, exempt, source_of)
    payable, targets, refusal = _payable(printed)
    if refusal is not None:
        return printed.unconfirmed(payable, refusal)
    assert payable is not None  # no refusal: a due or a gross amount was found
    taxes, refusal = _tax_options(printed)
    if refusal is not None:
        return printed.unconfirmed(payable, refusal)
    best = _first_closing_chain(printed, targets, taxes)
    if best is None:
        return printed.unconfirmed(payable, _why_unconfirmed(printed, payable, taxes))
    net, tax, rule = best
    return Resolution(
        payable,
        net,
        tax.amount if tax else Decimal("0.00"),
        tax.found if tax else None,
        AmountCheck(True, rule, printed.candidates),
    )


@dataclass(frozen=True)
class _Printed:
    """The page's labelled amounts by kind, as the resolver weighs them."""

    candidates: tuple[AmountCandidate, ...]
    dues: list[Found]
    grosses: list[Found]
    nets: list[Found]
    labelled_taxes: list[Found]  # tax totals with a label of their own (not per-rate rows)
    rate_rows: list[Found]
    prepaids: list[Found]  # the non-zero ones
    roundings: list[Found]
    exempt: bool  # the page says no VAT is charged

    @classmethod
    def of(cls, found: Sequence[Found], exempt: bool, source_of: Callable[[Found], FieldSource]) -> _Printed:
        def of(kind: Kind, rows: bool = False) -> list[Found]:
            return [f for f in found if f.kind == kind and f.rate_row == rows]

        return cls(
            candidates=tuple(AmountCandidate(_role(f.kind), f.amount, source_of(f)) for f in found),
            dues=of("due"),
            grosses=of("gross"),
            nets=of("net"),
            labelled_taxes=of("tax"),
            rate_rows=of("tax", rows=True),
            prepaids=[f for f in of("prepaid") if f.amount != 0],
            roundings=of("rounding"),
            exempt=exempt,
        )

    def unconfirmed(self, payable: Found | None, why: str) -> Resolution:
        """`payable` as the page labels it, not confirmed by its arithmetic, for `why`."""
        net = max(self.nets, key=lambda f: (f.strength, f.label_seg.line), default=None)
        tax = max(self.labelled_taxes, key=lambda f: (f.strength, f.label_seg.line), default=None)
        return Resolution(
            payable, net, tax.amount if tax else None, tax, AmountCheck(False, why, self.candidates)
        )


def _payable(printed: _Printed) -> tuple[Found | None, list[Found], str | None]:
    """Which printed amount would be paid: the amount due when one is labelled, else the gross.

    (payable, the amounts a chain must reach, why the page cannot confirm it or None)."""
    dues, grosses = printed.dues, printed.grosses
    if dues:
        strongest = max(f.strength for f in dues)
        top = [f for f in dues if f.strength == strongest]
        payable = max(top, key=lambda f: f.label_seg.line)
        if len({f.amount for f in top}) > 1:
            shown = ", ".join(_fmt(f.amount) for f in top)
            return payable, [], f"the page labels different amounts as due ({shown})"
        return payable, [payable], None
    if grosses:
        strongest = max(f.strength for f in grosses)
        top = [f for f in grosses if f.strength == strongest]
        payable = max(top, key=lambda f: (f.amount, f.label_seg.line))
        if printed.prepaids:
            amount = _fmt(printed.prepaids[0].amount)
            return payable, top, f"prepaid {amount} is printed but no amount due after it to check"
        return payable, top, None
    return None, [], "no amount labelled as due or as the gross total"


def _rate_row_taxes(rate_rows: Sequence[Found]) -> list[_Tax]:
    """The tax of each per-rate breakdown, summed on its own: the rows of one column under its
    header, or the rows that carry their rate in their own label. A table with a net column and a
    tax column under tax-ish headers holds two breakdowns, and only the tax column's can add up
    to the total."""
    breakdowns: dict[object, list[Found]] = {}
    for f in rate_rows:
        under_header = f.value_seg.line != f.label_seg.line
        breakdowns.setdefault(
            (f.label_seg.line, f.label_seg.index) if under_header else "own labels", []
        ).append(f)
    row_taxes = []
    for rows in breakdowns.values():
        total = sum((f.amount for f in rows), Decimal(0))
        shown = " + ".join(_fmt(f.amount) for f in rows)
        row_taxes.append(_Tax(total, None, f"tax rows {shown}", max(Decimal("0.02"), CENT * len(rows))))
    return row_taxes


def _tax_options(printed: _Printed) -> tuple[list[_Tax], str | None]:
    """The tax amounts a chain may use (labelled totals, then breakdowns that add up to one), or
    why the page's taxes or prepaid amounts contradict each other."""
    taxes = [_Tax(f.amount, f, f"tax {_fmt(f.amount)}", Decimal("0.02")) for f in printed.labelled_taxes]
    row_taxes = _rate_row_taxes(printed.rate_rows)
    if row_taxes and taxes:
        adding_up = [r for r in row_taxes if any(abs(t.amount - r.amount) <= r.tolerance for t in taxes)]
        if not adding_up:
            shown = "; ".join(r.what for r in row_taxes)
            return taxes, f"the per-rate {shown} do not add up to the tax total"
        row_taxes = adding_up
    taxes += row_taxes
    if len({f.amount for f in printed.prepaids}) > 1:
        return taxes, "the page prints different prepaid amounts"
    return taxes, None


def _gross_chains(printed: _Printed, target: Found) -> list[tuple[Found | None, str]]:
    """The grosses a payable amount is reached from, each with its rule's tail: for an amount due,
    gross + rounding - prepaid = due (or no gross, with nothing prepaid); a gross is its own."""
    if target.kind != "due":
        return [(target, "nothing prepaid")]
    chains: list[tuple[Found | None, str]] = []
    prepaid = printed.prepaids[0] if printed.prepaids else None
    for gross, rounding in product([*printed.grosses, None], [*printed.roundings, None]):
        if gross is None and (rounding is not None or prepaid is not None):
            continue
        if gross is None:
            chains.append((None, "nothing prepaid"))
            continue
        value = gross.amount + (rounding.amount if rounding else 0) - (prepaid.amount if prepaid else 0)
        if value != target.amount or gross.value_seg == target.value_seg:
            continue
        steps = f"gross {_fmt(gross.amount)}"
        if rounding is not None:
            steps += f" + rounding {_fmt(rounding.amount)}"
        if prepaid is not None:
            steps += f" - prepaid {_fmt(prepaid.amount)}"
        chains.append((gross, f"{steps} = due {_fmt(target.amount)}"))
    return chains


def _first_closing_chain(
    printed: _Printed, targets: Sequence[Found], taxes: Sequence[_Tax]
) -> tuple[Found, _Tax | None, str] | None:
    """The first net (+ tax) that adds up to a target through one of its chains, with its rule."""
    for target in targets:
        for gross, tail in _gross_chains(printed, target):
            for net, tax in product(printed.nets, [*taxes, None]):
                head = _net_plus_tax(printed, target, gross, net, tax)
                if head is not None:
                    return net, tax, f"{head}; {tail}"
    return None


def _net_plus_tax(
    printed: _Printed, target: Found, gross: Found | None, net: Found, tax: _Tax | None
) -> str | None:
    """The rule "net + tax = total" when these printed amounts make it, else None."""
    top_amount = gross.amount if gross is not None else target.amount
    top_name = "gross" if gross is not None else "due"
    if net.value_seg in (target.value_seg, gross.value_seg if gross else None) and tax is not None:
        return None
    if tax is None:
        # No tax row: only where the page says no VAT is charged, and net and the total are
        # separately printed.
        if not printed.exempt or net.amount != top_amount or net.value_seg == (gross or target).value_seg:
            return None
        return f"net {_fmt(net.amount)} = {top_name} {_fmt(top_amount)} (VAT exemption stated)"
    if tax.found is not None and tax.found.value_seg == net.value_seg:
        return None
    if abs(net.amount + tax.amount - top_amount) > tax.tolerance:
        return None
    # A printed tax of 0.00 is a statement like any other row (an intra-EU or export invoice):
    # net + 0.00 = total closes the chain. Only a missing tax row needs the page to say why (above).
    return f"net {_fmt(net.amount)} + {tax.what} = {top_name} {_fmt(top_amount)}"


def _why_unconfirmed(printed: _Printed, payable: Found, taxes: Sequence[_Tax]) -> str:
    """Why no chain closes: nothing to check against, or nothing that adds up."""
    if not printed.nets or (not taxes and not printed.exempt):
        what = "due" if payable.kind == "due" else "gross"
        return f"no net/tax found to check the {what} {_fmt(payable.amount)} against"
    why = f"no printed net + tax adds up to the {payable.kind} {_fmt(payable.amount)}"
    if printed.prepaids and payable.kind == "due":
        why += f" after prepaid {_fmt(printed.prepaids[0].amount)}"
    return why
