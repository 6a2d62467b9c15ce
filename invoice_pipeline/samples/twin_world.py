"""The invented world of the labelled duplicate benchmark (`twins`): its sellers (name, legal
form, VAT id), invoice numbers kept in parts (so a twin can write them another way), original
invoices drawn from them, and the documents a pair is made of, rendered as the product would
receive them.

Pure: no database and no files; seeded by the caller's random stream.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
from dataclasses import dataclass, replace

import pypdf

from .drawing import BUYERS, CURRENCY_BY_COUNTRY, LANG_BY_COUNTRY, SELLERS, random_lines
from .generator import BASE_FORMATS as FORMATS
from .render import Line, Party, SampleInvoice, render_invoice
from .vat_ids import valid_vat_id

EXTENSIONS = {"ubl": "xml", "cii": "xml", "json": "json", "pdf": "pdf", "facturx-pdf": "pdf"}


# -- documents ---------------------------------------------------------------------------------------


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


def random_number(rng: random.Random, year: int) -> Number:
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


class World:
    """The invented sellers and buyers pairs are drawn from, and the random stream that draws them."""

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
        number = random_number(rng, issue.year)
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
