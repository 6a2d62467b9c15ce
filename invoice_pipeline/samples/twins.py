"""A labelled duplicate benchmark: pairs of (original, other document) that are, or are not, one invoice.

Public accounts-payable tools publish no labelled duplicate set, so this module makes one from
invented invoices, seeded and reproducible. Every pair has a `kind`, a finer `variant` (which
perturbation, so a miss can be traced to its cause) and a label:

* twins, true duplicates: the same invoice re-sent (re-rendered, different bytes), rendered in
  another format, or with its number, VAT id or seller name written differently (OCR
  confusions, separators, prefixes, leading zeros, country prefix, legal form, case);
* look-alikes, NOT duplicates: the next number, the same number re-priced, the same amount a
  month later, the same number from another seller, a credit note reusing the number.

Pure: no database and no files. `TwinDocument.render()` gives the bytes the product would
receive, so a benchmark can run them through the real parsers; `decide_on_true_fields` runs the
matcher on the fields the documents were rendered from, which tells extraction misses apart
from matching misses.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal

import pypdf

from ..domain.matching import Match, MatchCandidate, find_match
from .drawing import BUYERS, CURRENCY_BY_COUNTRY, LANG_BY_COUNTRY, SELLERS, random_lines
from .generator import BASE_FORMATS as FORMATS
from .render import Line, Party, SampleInvoice, render_invoice
from .vat_ids import valid_vat_id

EXTENSIONS = {"ubl": "xml", "cii": "xml", "json": "json", "pdf": "pdf", "facturx-pdf": "pdf"}

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


# -- documents and pairs ------------------------------------------------------------------------


@dataclass(frozen=True)
class TwinDocument:
    """One document of a pair: the invoice it shows and how it is rendered.

    `resend` > 0 re-renders the same invoice with different bytes (a comment in XML, another
    indentation in JSON, a metadata stamp in PDFs): the ingest step keeps byte-identical files as
    one invoice, so a re-send must differ in bytes to reach duplicate detection at all.
    """

    invoice: SampleInvoice
    format: str
    lang: str = "en"
    pdf_style: int = 0
    resend: int = 0

    @property
    def extension(self) -> str:
        return EXTENSIONS[self.format]

    def render(self) -> bytes:
        raw = render_invoice(self.invoice, self.format, self.lang, pdf_style=self.pdf_style)
        return _resent(raw, self.format, self.resend) if self.resend else raw


def _resent(raw: bytes, fmt: str, copy: int) -> bytes:
    if fmt in ("ubl", "cii"):
        declaration, _, rest = raw.partition(b"\n")
        return declaration + f"\n<!-- re-sent, copy {copy} -->\n".encode() + rest
    if fmt == "json":
        return (json.dumps(json.loads(raw), indent=2 + copy, ensure_ascii=True) + "\n").encode()
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(raw)))
    writer.add_metadata({"/Keywords": f"re-sent, copy {copy}"})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


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


# -- the invented world ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Seller:
    """A seller split into the name without its legal form, the form, and the rest of the party."""

    base: str
    form: str
    country: str  # "US" for the sellers without a VAT id
    vat_id: str | None
    street: str
    postcode: str
    city: str

    def party(self, name: str | None = None, vat_id: str | None = None, *, keep_vat: bool = True) -> Party:
        return Party(
            name if name is not None else f"{self.base} {self.form}",
            (vat_id if vat_id is not None else self.vat_id) if keep_vat else None,
            self.street,
            self.postcode,
            self.city,
            self.country,
        )


def _vat_id(rng: random.Random, country: str) -> str | None:
    digits = "".join(rng.choice("0123456789") for _ in range(11))
    drawn = {  # the random digits as drawn; the check digits made valid (vat_ids.py)
        "DE": ("DE", digits[:9], "", ""),
        "GB": ("GB", digits[:9], "", ""),
        "FR": ("FR", digits[:11], "", ""),
        "NL": ("NL", digits[:9], "", "B01"),
        "NO": ("NO", digits[:9], "", "MVA"),
        "FI": ("FI", digits[:8], "", ""),
        "ES": ("ES", digits[:8], "B", ""),
    }.get(country)
    if drawn is None:
        return None
    prefix, number, lead, suffix = drawn
    return valid_vat_id(prefix, number, lead=lead, suffix=suffix)


def _sellers(rng: random.Random) -> tuple[Seller, ...]:
    out = []
    for name, country, street, postcode, city in SELLERS:
        base, _, form = name.rpartition(" ")
        cc = country or "US"
        out.append(Seller(base, form, cc, _vat_id(rng, cc), street, postcode, city))
    return tuple(out)


# Invoice number styles, each a prefix, what joins it to the digits, and digit groups.
@dataclass(frozen=True)
class Number:
    prefix: str
    joint: str
    groups: tuple[str, ...]
    seps: tuple[str, ...]

    @property
    def text(self) -> str:
        out = self.prefix + self.joint + self.groups[0]
        for sep, group in zip(self.seps, self.groups[1:], strict=True):
            out += sep + group
        return out

    def bumped(self, by: int) -> Number:
        """The number `by` further on, keeping the width of the last group."""
        last = self.groups[-1]
        return replace(self, groups=self.groups[:-1] + (f"{int(last) + by:0{len(last)}d}",))


def _random_number(rng: random.Random, year: int) -> Number:
    n = rng.randint(1, 99999)
    style = rng.randrange(6)
    if style == 0:
        return Number("INV", "-", (f"{n:05d}",), ())
    if style == 1:
        return Number("RE", "", (str(year), f"{n % 10000:04d}"), ("-",))
    if style == 2:
        return Number("F", "/", (str(year), f"{n:05d}"), ("/",))
    if style == 3:
        return Number("", "", (str(year), f"{n:05d}"), ("-",))
    if style == 4:
        return Number("", "", (f"{n:06d}",), ())
    return Number("INV", "", (f"{n:06d}",), ())


@dataclass(frozen=True)
class Base:
    """An original invoice before rendering, with its number kept in parts."""

    seller: Seller
    number: Number
    invoice: SampleInvoice


class _World:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.sellers = _sellers(rng)
        self.buyers = [Party(name, None, street, pc, city, cc) for name, street, pc, city, cc in BUYERS]

    def lines(self) -> tuple[Line, ...]:
        return random_lines(self.rng)

    def base(self, seller: Seller | None = None, *, with_vat: bool = True) -> Base:
        rng = self.rng
        seller = seller or rng.choice(self.sellers)
        issue = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 600))
        number = _random_number(rng, issue.year)
        inv = SampleInvoice(
            invoice_number=number.text,
            document_type="invoice",
            issue_date=issue,
            due_date=issue + dt.timedelta(days=rng.choice((14, 30, 45))),
            currency=CURRENCY_BY_COUNTRY.get(seller.country if seller.vat_id else None, "USD"),
            seller=seller.party(keep_vat=with_vat),
            buyer=rng.choice(self.buyers),
            lines=self.lines(),
            po_number=rng.choice((None, f"PO-{rng.randint(1000, 9999)}")),
        )
        return Base(seller, number, inv)

    def doc(self, inv: SampleInvoice, fmt: str | None = None, resend: int = 0) -> TwinDocument:
        return TwinDocument(
            inv,
            fmt or self.rng.choice(FORMATS),
            LANG_BY_COUNTRY.get(inv.seller.country, "en"),
            self.rng.randint(0, 1),
            resend,
        )


# -- twins ---------------------------------------------------------------------------------------

Made = tuple[str, str, TwinDocument, TwinDocument]  # (variant, detail, original, other)


def _exact_resend(w: _World, i: int) -> Made:
    b = w.base()
    fmt = FORMATS[i % len(FORMATS)]
    original = w.doc(b.invoice, fmt)
    # A re-send renders the same way (same language and PDF style), only its bytes differ.
    return fmt, f"{b.invoice.invoice_number} re-sent as {fmt}", original, replace(original, resend=1)


FORMAT_PAIRS = tuple((a, b) for a in FORMATS for b in FORMATS if a != b)


def _cross_format(w: _World, i: int) -> Made:
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


def _ocr_number(w: _World, i: int) -> Made:
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


def _number_format(w: _World, i: int) -> Made:
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


def _vat_format(w: _World, i: int) -> Made:
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


def _seller_name(w: _World, i: int) -> Made:
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


def _next_number(w: _World, i: int) -> Made:
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


def _repriced(w: _World, i: int) -> Made:
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


def _same_amount_other_month(w: _World, i: int) -> Made:
    b = w.base()
    inv = b.invoice
    shift = dt.timedelta(days=w.rng.randint(28, 35))
    while True:
        number = _random_number(w.rng, (inv.issue_date + shift).year)
        if number.text != b.number.text:
            break
    assert inv.due_date is not None
    other = replace(
        inv, invoice_number=number.text, issue_date=inv.issue_date + shift, due_date=inv.due_date + shift
    )
    detail = f"{inv.invoice_number} {inv.issue_date} -> {number.text} {other.issue_date}, total {inv.payable_total}"
    return "a month later", detail, w.doc(inv), w.doc(other)


def _same_number_other_seller(w: _World, i: int) -> Made:
    b = w.base()
    other_seller = w.rng.choice([s for s in w.sellers if s.base != b.seller.base])
    other = replace(b.invoice, seller=other_seller.party())
    both_vat = bool(b.seller.vat_id and other_seller.vat_id)
    variant = "both with VAT id" if both_vat else "a side without VAT id"
    detail = f"{b.invoice.invoice_number}: {b.invoice.seller.name} -> {other_seller.base} {other_seller.form}"
    return variant, detail, w.doc(b.invoice), w.doc(other)


def _credit_note(w: _World, i: int) -> Made:
    b = w.base()
    other = replace(b.invoice, document_type="credit_note")
    return (
        "same number and total",
        f"{b.invoice.invoice_number} invoice -> credit note",
        w.doc(b.invoice),
        w.doc(other),
    )


MAKERS: dict[str, Callable[[_World, int], Made]] = {
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
    w = _World(random.Random(f"duplicate-benchmark:{seed}:{kind}"))
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
