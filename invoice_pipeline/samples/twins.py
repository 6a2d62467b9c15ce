"""A labelled duplicate benchmark: pairs of (original, other document) that are, or are not, one invoice.

Public accounts-payable tools publish no labelled duplicate set, so this module makes one from
invented invoices, seeded and reproducible. Every pair has a `kind`, a finer `variant` (which
perturbation, so a miss can be traced to its cause) and a label:

* twins, true duplicates: the same invoice re-sent (re-rendered, different bytes), rendered in
  another format, or with its number, VAT id or seller name written differently (OCR
  confusions, separators, prefixes, leading zeros, country prefix, legal form, case);
* look-alikes, NOT duplicates: the next number, the same number re-priced, the same amount a
  month later, the same number from another seller, a credit note reusing the number.

Pure: no database and no files. The sellers, numbers and documents a pair is made of are
`twin_world`'s; `TwinDocument.render()` gives the bytes the product would receive, so a
benchmark can run them through the real parsers. `decide_on_true_fields` runs the matcher on
the fields the documents were rendered from, which tells extraction misses apart from matching
misses.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

from ..domain.matching import Match, MatchCandidate, find_match
from .generator import BASE_FORMATS as FORMATS
from .render import Line
from .twin_world import Number, Seller, TwinDocument, World, random_number

TWIN_KINDS: tuple[str, ...] = (
    "exact_resend",
    "cross_format",
    "ocr_number",
    "number_format",
    "vat_format",
    "seller_name",
)
LOOKALIKE_KINDS: tuple[str, ...] = (
    "next_number",
    "repriced",
    "same_amount_other_month",
    "same_number_other_seller",
    "credit_note",
)
KINDS: tuple[str, ...] = TWIN_KINDS + LOOKALIKE_KINDS

# Digits and the letters a scan or a typist confuses them with (both directions are generated).
OCR_DIGIT_TO_LETTER = {"0": "O", "1": "I", "8": "B", "5": "S"}
OCR_LETTER_TO_DIGIT = {v: k for k, v in OCR_DIGIT_TO_LETTER.items()}

# Legal forms a seller may add, by country (the first is the seller's usual one when unknown).
LEGAL_FORMS: dict[str, tuple[str, ...]] = {
    "DE": ("GmbH", "AG"),
    "GB": ("Ltd", "plc"),
    "FR": ("SARL", "S.A."),
    "NL": ("B.V.", "N.V."),
    "ES": ("S.L.", "S.A."),
    "NO": ("AS",),
    "FI": ("Oy",),
    "US": ("LLC", "Inc."),
}
# The same forms with dots added or removed.
DOTTED: dict[str, str] = {
    "GmbH": "G.m.b.H.",
    "AG": "A.G.",
    "Ltd": "Ltd.",
    "plc": "p.l.c.",
    "SARL": "S.A.R.L.",
    "B.V.": "BV",
    "BV": "B.V.",
    "N.V.": "NV",
    "S.L.": "SL",
    "S.A.": "SA",
    "AS": "A.S.",
    "Oy": "Oy.",
    "LLC": "L.L.C.",
    "Inc.": "Inc",
}
# The same forms spelt out, as they appear on letterheads and in registers.
SPELT_OUT: dict[tuple[str, str], str] = {
    ("DE", "GmbH"): "Gesellschaft mit beschränkter Haftung",
    ("DE", "AG"): "Aktiengesellschaft",
    ("GB", "Ltd"): "Limited",
    ("GB", "plc"): "Public Limited Company",
    ("FR", "SARL"): "Société à responsabilité limitée",
    ("FR", "S.A."): "Société Anonyme",
    ("NL", "B.V."): "Besloten Vennootschap",
    ("NL", "BV"): "Besloten Vennootschap",
    ("NL", "N.V."): "Naamloze Vennootschap",
    ("ES", "S.L."): "Sociedad Limitada",
    ("ES", "S.A."): "Sociedad Anónima",
    ("US", "LLC"): "Limited Liability Company",
    ("US", "Inc."): "Incorporated",
}


# -- pairs -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelledPair:
    """An original and another document, labelled: is the other one a duplicate of the original?"""

    pair_id: str
    kind: str
    duplicate: bool
    # The perturbation class within the kind ("digit->letter at a group start", "ubl->pdf", ...).
    variant: str
    # What changed, readable: "INV-00042 -> INV 42".
    detail: str
    original: TwinDocument
    other: TwinDocument


# -- twins ---------------------------------------------------------------------------------------

Made = tuple[str, str, TwinDocument, TwinDocument]  # (variant, detail, original, other)


def _exact_resend(w: World, i: int) -> Made:
    b = w.base()
    fmt = FORMATS[i % len(FORMATS)]
    original = w.doc(b.invoice, fmt)
    # A re-send renders the same way (same language and PDF style), only its bytes differ.
    return fmt, f"{b.invoice.invoice_number} re-sent as {fmt}", original, replace(original, resend=1)


FORMAT_PAIRS = tuple((a, b) for a in FORMATS for b in FORMATS if a != b)


def _cross_format(w: World, i: int) -> Made:
    b = w.base()
    a_fmt, b_fmt = FORMAT_PAIRS[i % len(FORMAT_PAIRS)]
    return (
        f"{a_fmt}->{b_fmt}",
        f"{b.invoice.invoice_number} as {a_fmt}, then as {b_fmt}",
        w.doc(b.invoice, a_fmt),
        w.doc(b.invoice, b_fmt),
    )


def ocr_substitutions(number: Number) -> list[tuple[int, str, str]]:
    """(position, replacement, class) for every character of the number an OCR could confuse."""
    starts = set()
    pos = len(number.prefix) + len(number.joint)
    for k, group in enumerate(number.groups):
        pos += len(number.seps[k - 1]) if k else 0
        starts.add(pos)
        pos += len(group)
    out = []
    for i, ch in enumerate(number.text):
        if i < len(number.prefix):
            if ch in OCR_LETTER_TO_DIGIT:
                out.append((i, OCR_LETTER_TO_DIGIT[ch], "letter->digit in the prefix"))
        elif ch in OCR_DIGIT_TO_LETTER:
            if i not in starts:
                cls = "digit->letter inside a group"
            elif ch == "0":
                cls = "digit->letter at a group start (a leading zero)"
            else:
                cls = "digit->letter at a group start"
            out.append((i, OCR_DIGIT_TO_LETTER[ch], cls))
    return out


def _ocr_number(w: World, i: int) -> Made:
    while True:
        b = w.base()
        options = ocr_substitutions(b.number)
        if options:
            break
    picked = w.rng.sample(options, min(len(options), 1 if w.rng.random() < 0.7 else 2))
    chars = list(b.number.text)
    for pos, repl, _ in picked:
        chars[pos] = repl
    number = "".join(chars)
    variant = " + ".join(sorted({cls for _, _, cls in picked}))
    other = replace(b.invoice, invoice_number=number)
    return variant, f"{b.invoice.invoice_number} -> {number}", w.doc(b.invoice), w.doc(other)


def _strip_zeros(group: str) -> str:
    return group.lstrip("0") or "0"


NUMBER_FORMAT_CHANGES = ("separator", "leading zeros", "prefix dropped", "prefix added", "lower case")


def _reformat(number: Number, change: str, rng: random.Random) -> Number | None:
    """The same number written another way, or None when `change` does not apply to it."""
    if change == "separator":
        if number.prefix and rng.random() < 0.6:
            joint = rng.choice([j for j in ("-", " ", "", "/", ".", "#", ".#", " #") if j != number.joint])
            return replace(number, joint=joint)
        if number.seps:
            # Separators between digit groups change, but never vanish: "2024-42" and "202442"
            # are different numbers.
            return replace(number, seps=tuple(rng.choice([s for s in "-/ ." if s != x]) for x in number.seps))
        return None
    if change == "leading zeros":
        stripped = tuple(_strip_zeros(g) for g in number.groups)
        if stripped != number.groups:
            return replace(number, groups=stripped)
        # Pad the last group instead ("INV-42" -> "INV-00042").
        return replace(number, groups=number.groups[:-1] + ("00" + number.groups[-1],))
    if change == "prefix dropped":
        if not number.prefix:
            return None
        return replace(number, prefix="", joint="")
    if change == "prefix added":
        if number.prefix:
            return None
        return replace(
            number, prefix=rng.choice(("INV", "Nr.", "RE", "No")), joint=rng.choice(("-", " ", ". "))
        )
    if change == "lower case":
        if not number.prefix:
            return None
        return replace(number, prefix=number.prefix.lower())
    raise ValueError(change)


def _number_format(w: World, i: int) -> Made:
    rng = w.rng
    while True:
        b = w.base()
        combined = rng.random() < 0.3
        changes = rng.sample(NUMBER_FORMAT_CHANGES, 3) if combined else [rng.choice(NUMBER_FORMAT_CHANGES)]
        number: Number | None = b.number
        applied: list[str] = []
        for change in changes:
            changed = _reformat(number, change, rng) if number is not None else None
            if changed is not None:
                number, applied = changed, applied + [change]
        if applied and number is not None and number.text != b.number.text:
            break
    variant = "combined" if len(applied) > 1 else applied[0]
    other = replace(b.invoice, invoice_number=number.text)
    return (
        variant,
        f"{b.invoice.invoice_number} -> {number.text} ({', '.join(applied)})",
        w.doc(b.invoice),
        w.doc(other),
    )


# How a VAT id is written: (country prefix kept, separator between groups of three, lower case).
VAT_WRITINGS: dict[str, tuple[bool, str, bool]] = {
    "no country prefix": (False, "", False),
    "spaces": (True, " ", False),
    "dots": (True, ".", False),
    "lower case": (True, "", True),
}
VAT_COMBINED: tuple[tuple[bool, str, bool], ...] = (
    (False, " ", False),
    (False, ".", False),
    (True, ".", True),
    (True, " ", True),
    (False, "", True),
)
VAT_CHANGES = (*VAT_WRITINGS, "combined")


def _write_vat(vat_id: str, prefix: bool, sep: str, lower: bool) -> str:
    national = vat_id[2:]
    if sep:
        national = sep.join(national[k : k + 3] for k in range(0, len(national), 3))
    out = (vat_id[:2] + (" " if sep == " " else "") + national) if prefix else national
    return out.lower() if lower else out


def _vat_format(w: World, i: int) -> Made:
    seller = w.rng.choice([s for s in w.sellers if s.vat_id])
    b = w.base(seller)
    assert seller.vat_id is not None
    change = VAT_CHANGES[i % len(VAT_CHANGES)]
    writing = VAT_WRITINGS[change] if change in VAT_WRITINGS else w.rng.choice(VAT_COMBINED)
    vat = _write_vat(seller.vat_id, *writing)
    other = replace(b.invoice, seller=seller.party(vat_id=vat))
    return change, f"{seller.vat_id} -> {vat}", w.doc(b.invoice), w.doc(other)


NAME_CHANGES = ("case", "punctuation", "legal form dropped", "legal form added", "legal form spelt out")


def _name_variant(seller: Seller, change: str, rng: random.Random) -> tuple[str, str]:
    """(original's name, other's name) for one kind of seller-name variation."""
    name = f"{seller.base} {seller.form}"
    if change == "case":
        return name, rng.choice([o for o in (name.upper(), name.lower(), name.title()) if o != name])
    if change == "punctuation":
        options = [f"{seller.base}, {seller.form}", f"{seller.base} {DOTTED.get(seller.form, seller.form)}"]
        if "&" in seller.base:
            options.append(name.replace(" & ", " and "))
        return name, rng.choice([o for o in options if o != name])
    if change == "legal form dropped":
        return name, seller.base
    if change == "legal form added":
        return seller.base, f"{seller.base} {rng.choice(LEGAL_FORMS[seller.country])}"
    if change == "legal form spelt out":
        long = SPELT_OUT.get((seller.country, seller.form))
        if long is None:
            form = next(f for f in LEGAL_FORMS[seller.country] if (seller.country, f) in SPELT_OUT)
            return f"{seller.base} {form}", f"{seller.base} {SPELT_OUT[(seller.country, form)]}"
        return name, f"{seller.base} {long}"
    raise ValueError(change)


def _seller_name(w: World, i: int) -> Made:
    change = NAME_CHANGES[i % len(NAME_CHANGES)]
    if change == "legal form spelt out":
        seller = w.rng.choice(
            [s for s in w.sellers if any((s.country, f) in SPELT_OUT for f in LEGAL_FORMS[s.country])]
        )
    else:
        seller = w.rng.choice(w.sellers)
    # Half the pairs carry no VAT id on either side: only then does the name decide who the
    # seller is (with VAT ids on both sides the names are not even compared).
    with_vat = seller.vat_id is not None and (i // len(NAME_CHANGES)) % 2 == 0
    b = w.base(seller, with_vat=with_vat)
    first, second = _name_variant(seller, change, w.rng)
    original = replace(b.invoice, seller=replace(b.invoice.seller, name=first))
    other = replace(b.invoice, seller=replace(b.invoice.seller, name=second))
    variant = f"{change}, {'with VAT id' if with_vat else 'name only'}"
    return variant, f"{first!r} -> {second!r}", w.doc(original), w.doc(other)


# -- look-alikes ---------------------------------------------------------------------------------


def _next_number(w: World, i: int) -> Made:
    b = w.base()
    by = w.rng.choice((1, 1, 1, 2, 10))
    number = b.number.bumped(by).text
    other = replace(b.invoice, invoice_number=number)
    variant = "next number" if by == 1 else f"number +{by}"
    return (
        variant,
        f"{b.invoice.invoice_number} -> {number}, same seller, date and amount",
        w.doc(b.invoice),
        w.doc(other),
    )


def _repriced(w: World, i: int) -> Made:
    rng = w.rng
    b = w.base()
    inv = b.invoice
    if rng.random() < 0.5:
        k = rng.randrange(len(inv.lines))
        line = inv.lines[k]
        price = (line.unit_price * Decimal(rng.choice((0.5, 0.9, 0.95, 1.05, 1.1, 2)))).quantize(
            Decimal("0.01")
        )
        if price == line.unit_price:
            price += Decimal("1.00")
        lines = inv.lines[:k] + (replace(line, unit_price=price),) + inv.lines[k + 1 :]
        variant = "unit price changed"
    else:
        lines = inv.lines + (
            Line("Additional item", Decimal(1), Decimal(rng.randint(100, 20000)) / 100, Decimal(19)),
        )
        variant = "line added"
    other = replace(inv, lines=lines)
    assert abs(other.payable_total - inv.payable_total) > Decimal("0.01")
    detail = f"{inv.invoice_number}: total {inv.payable_total} -> {other.payable_total}"
    return variant, detail, w.doc(inv), w.doc(other)


def _same_amount_other_month(w: World, i: int) -> Made:
    b = w.base()
    inv = b.invoice
    shift = dt.timedelta(days=w.rng.randint(28, 35))
    while True:
        number = random_number(w.rng, (inv.issue_date + shift).year)
        if number.text != b.number.text:
            break
    assert inv.due_date is not None
    other = replace(
        inv, invoice_number=number.text, issue_date=inv.issue_date + shift, due_date=inv.due_date + shift
    )
    detail = f"{inv.invoice_number} {inv.issue_date} -> {number.text} {other.issue_date}, total {inv.payable_total}"
    return "a month later", detail, w.doc(inv), w.doc(other)


def _same_number_other_seller(w: World, i: int) -> Made:
    b = w.base()
    other_seller = w.rng.choice([s for s in w.sellers if s.base != b.seller.base])
    other = replace(b.invoice, seller=other_seller.party())
    both_vat = bool(b.seller.vat_id and other_seller.vat_id)
    variant = "both with VAT id" if both_vat else "a side without VAT id"
    detail = f"{b.invoice.invoice_number}: {b.invoice.seller.name} -> {other_seller.base} {other_seller.form}"
    return variant, detail, w.doc(b.invoice), w.doc(other)


def _credit_note(w: World, i: int) -> Made:
    b = w.base()
    other = replace(b.invoice, document_type="credit_note")
    return (
        "same number and total",
        f"{b.invoice.invoice_number} invoice -> credit note",
        w.doc(b.invoice),
        w.doc(other),
    )


MAKERS: dict[str, Callable[[World, int], Made]] = {
    "exact_resend": _exact_resend,
    "cross_format": _cross_format,
    "ocr_number": _ocr_number,
    "number_format": _number_format,
    "vat_format": _vat_format,
    "seller_name": _seller_name,
    "next_number": _next_number,
    "repriced": _repriced,
    "same_amount_other_month": _same_amount_other_month,
    "same_number_other_seller": _same_number_other_seller,
    "credit_note": _credit_note,
}


def iter_pairs(kind: str, seed: int = 0) -> Iterator[LabelledPair]:
    """The endless, seeded stream of one kind's pairs; its first n are the same for any n."""
    # A string seed is hashed with SHA-512 by `random`, so the stream does not depend on
    # PYTHONHASHSEED, and each kind has its own stream: adding a kind changes no other.
    w = World(random.Random(f"duplicate-benchmark:{seed}:{kind}"))
    make = MAKERS[kind]
    i = 0
    while True:
        variant, detail, original, other = make(w, i)
        yield LabelledPair(f"{kind}-{i:04d}", kind, kind in TWIN_KINDS, variant, detail, original, other)
        i += 1


def generate_pairs(per_kind: int, seed: int = 0, kinds: Sequence[str] = KINDS) -> list[LabelledPair]:
    """`per_kind` labelled pairs of every kind, in kind order."""
    out: list[LabelledPair] = []
    for kind in kinds:
        stream = iter_pairs(kind, seed)
        out.extend(next(stream) for _ in range(per_kind))
    return out


# -- deciding a pair without documents -------------------------------------------------------------

ORIGINAL_ID = "original"
OTHER_ID = "other"


def decide_on_true_fields(pair: LabelledPair, org_id: str = "benchmark") -> Match | None:
    """The matcher on the fields the two documents were rendered from (no extraction involved)."""
    original = MatchCandidate.from_fields(ORIGINAL_ID, org_id, pair.original.invoice.to_fields())
    other = MatchCandidate.from_fields(OTHER_ID, org_id, pair.other.invoice.to_fields())
    return find_match(other, [original])
