"""A deterministic set of invented invoices with known outcomes, for tests and `make demo`."""

from __future__ import annotations

import csv
import io
import json
import random
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pypdf

from ..domain.fields import InvoiceFields
from ..domain.review import SUSPECTED_DUPLICATE
from . import review_cases
from .drawing import InvoiceDrawer
from .render import (
    Line,
    SampleInvoice,
    invoice_pdf,
    letter_pdf,
    render_invoice,
    ubl_xml,
)
from .scans import scan_invoice

MANIFEST_NAME = "manifest.json"

BASE_FORMATS = ("ubl", "cii", "json", "pdf", "facturx-pdf")


@dataclass(frozen=True)
class SampleFile:
    """One generated file and what the pipeline must do with it."""

    name: str
    path: Path
    format: str
    expected: InvoiceFields | None
    duplicate_of: str | None
    quarantine_code: str | None
    # "extract" (BadDocument) | "validate" (ValidationProblem: quarantined, or held for a person
    # when `review` says so) | None
    fails_at: str | None
    note: str
    # Valid, but held for a person (needs_review): the review reason code (domain/review.py).
    review: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "format": self.format,
            "expected": None if self.expected is None else _fields_json(self.expected),
            "duplicate_of": self.duplicate_of,
            "quarantine_code": self.quarantine_code,
            "fails_at": self.fails_at,
            "note": self.note,
            "review": self.review,
        }


@dataclass(frozen=True)
class SampleSet:
    out_dir: Path
    seed: int
    files: tuple[SampleFile, ...]

    def by_name(self, name: str) -> SampleFile:
        return next(f for f in self.files if f.name == name)

    @property
    def manifest_path(self) -> Path:
        return self.out_dir / MANIFEST_NAME

    def to_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "files": [f.to_json() for f in self.files]}

    def vendor_master_csv(self) -> str:
        """The sellers of the valid invoices as an ERP's vendor-master export would list them
        (`invoice-pipeline vendors import`): what a team has before its first invoice arrives."""
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["name", "vat_id", "iban", "currency"])
        vendors: dict[tuple[str, str], tuple[set[str], str]] = {}
        for f in self.files:
            e = f.expected
            # Every valid sample's seller but those a sample shows unconfirmed (a new vendor,
            # a changed account): the master knows whom the org has paid before.
            unconfirmed = f.review in ("vendor_unconfirmed", "bank_details_changed")
            if f.quarantine_code or unconfirmed or e is None or not e.seller_name:
                continue
            ibans, currency = vendors.setdefault(
                (e.seller_name, e.seller_vat_id or ""), (set(), e.currency or "")
            )
            if e.payee_iban:
                ibans.add(e.payee_iban)
        for (name, vat), (ibans, currency) in vendors.items():
            writer.writerow([name, vat, ";".join(sorted(ibans)), currency])
        return out.getvalue()


def _fields_json(fields: InvoiceFields) -> dict[str, Any]:
    data = fields.to_json()
    data.pop("sources", None)
    return data


class _Builder(InvoiceDrawer):
    """Draws invoices (InvoiceDrawer) and writes them, with what the pipeline must do with each."""

    def __init__(self, out_dir: Path, seed: int) -> None:
        self.out = out_dir
        super().__init__(seed)
        self.files: list[SampleFile] = []

    def render(self, inv: SampleInvoice, fmt: str) -> bytes:
        # The PDF style is drawn for PDFs only, so the rest of the seeded stream stays as it was.
        style = self.rng.randint(0, 1) if fmt == "pdf" else 0
        return render_invoice(inv, fmt, self.lang(inv), pdf_style=style)

    def add(
        self,
        stem: str,
        ext: str,
        content: bytes,
        fmt: str,
        *,
        expected: InvoiceFields | None = None,
        duplicate_of: str | None = None,
        code: str | None = None,
        fails_at: str | None = None,
        note: str = "",
        review: str | None = None,
    ) -> str:
        # Numbered names make directory order the intended arrival order.
        name = f"{len(self.files) + 1:03d}_{stem}.{ext}"
        path = self.out / name
        path.write_bytes(content)
        self.files.append(SampleFile(name, path, fmt, expected, duplicate_of, code, fails_at, note, review))
        return name

    def add_invoice(self, stem: str, inv: SampleInvoice, fmt: str, **kw: Any) -> str:
        ext = {"ubl": "xml", "cii": "xml", "json": "json", "pdf": "pdf", "facturx-pdf": "pdf"}[fmt]
        if fmt == "pdf" and not inv.seller.vat_id and not kw.get("duplicate_of"):
            # Read from the page with no VAT id printed, the seller cannot be confirmed by the
            # vendor registry (a name confirms nothing): a person sees it (docs/vendors.md).
            kw.setdefault("review", "vendor_unconfirmed")
        return self.add(stem, ext, self.render(inv, fmt), fmt, expected=inv.to_fields(), **kw)


def _reformat_number(number: str) -> str:
    """'INV-00042' -> 'INV 42': what a vendor's new billing system does to the same invoice."""
    prefix, _, digits = number.partition("-")
    return f"{prefix} {int(digits)}"


def generate_samples(
    out_dir: Path, *, count: int = 40, seed: int = 0, bad: bool = True, scans: bool = False
) -> SampleSet:
    """Write `count` distinct valid invoices plus duplicate, look-alike and (if `bad`) broken files.

    With `scans`, also two scans that need OCR (a few seconds each, so off by default): a scanned
    PDF of the first (XML) invoice, which must be found as its duplicate, and a skewed PNG photo
    of a new invoice.

    Everything is a function of `seed`, except timestamps the factur-x library and PDF
    encryption put into their output (content and expectations are identical).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    b = _Builder(out_dir, seed)
    base = _add_originals(b, count)
    if count >= 4:
        _add_resends(b, base)
        _add_look_alikes(b, base[3])
    _add_hostile_vendor(b)
    if scans and count >= 1:
        _add_scans(b, base[0])
    if bad:
        _add_bad_inputs(b)
    _add_review_cases(b)

    sample_set = SampleSet(out_dir, seed, tuple(b.files))
    sample_set.manifest_path.write_text(
        json.dumps(sample_set.to_json(), indent=2, ensure_ascii=False) + "\n", "utf-8"
    )
    return sample_set


# An original as written: its file name, the invoice drawn, and its format.
_Original = tuple[str, SampleInvoice, str]


def _add_originals(b: _Builder, count: int) -> list[_Original]:
    """`count` distinct valid invoices, the formats taking turns."""
    base: list[_Original] = []
    for i in range(count):
        fmt = BASE_FORMATS[i % len(BASE_FORMATS)]
        inv = b.invoice()
        base.append(
            (b.add_invoice(f"invoice_{fmt.replace('-pdf', '')}", inv, fmt, note="original"), inv, fmt)
        )
    return base


def _add_resends(b: _Builder, base: list[_Original]) -> None:
    """Duplicates of the first three originals: byte-identical, renumbered, in the other formats."""
    name0, inv0, fmt0 = base[0]
    b.add(
        "resent_identical",
        name0.rsplit(".", 1)[1],
        (b.out / name0).read_bytes(),
        fmt0,
        expected=inv0.to_fields(),
        duplicate_of=name0,
        note="byte-identical re-send",
    )
    name1, inv1, fmt1 = base[1]
    b.add_invoice(
        "resent_renumbered",
        replace(inv1, invoice_number=_reformat_number(inv1.invoice_number)),
        fmt1,
        duplicate_of=name1,
        note=f"same invoice, number reformatted {inv1.invoice_number} -> {_reformat_number(inv1.invoice_number)}",
    )
    name2, inv2, fmt2 = base[2]
    for other in ("ubl", "cii", "pdf"):
        if other != fmt2:
            b.add_invoice(
                f"copy_as_{other}",
                inv2,
                other,
                duplicate_of=name2,
                note=f"{fmt2} invoice re-sent as {other}",
            )


def _add_look_alikes(b: _Builder, original: _Original) -> None:
    """Invoices that look like `original` and are not duplicates of it, and a credit note as PDF;
    and its number with another total, held as a suspected duplicate of it (issue 58)."""
    name3, inv3, _ = original
    other_seller = next(s for s in b.sellers if s.name != inv3.seller.name and s.vat_id)
    b.add_invoice(
        "same_number_other_vendor",
        replace(b.invoice(seller=other_seller), invoice_number=inv3.invoice_number),
        "ubl",
        note="look-alike: same invoice number, different vendor",
    )
    b.add_invoice(
        "same_number_other_amount",
        replace(
            inv3, lines=inv3.lines + (Line("Additional item", Decimal(1), Decimal("99.90"), Decimal(19)),)
        ),
        "cii",
        duplicate_of=name3,
        review=SUSPECTED_DUPLICATE,
        note="same vendor and number, different total: one seller's number is one invoice unless a "
        "person says otherwise (issue 58), so held as a suspected duplicate, never posted",
    )
    b.add_invoice(
        "credit_note_same_number",
        replace(inv3, document_type="credit_note"),
        "ubl",
        note="credit note reusing the invoice number; not a duplicate",
    )
    b.add_invoice(
        "credit_note_pdf",
        replace(b.invoice(), document_type="credit_note", due_date=None),
        "pdf",
        note="credit note as PDF",
    )


def _add_hostile_vendor(b: _Builder) -> None:
    sql_vendor = replace(
        b.sellers[0], name="Robert'); DROP TABLE invoices; --\x07\x1b Supplies", vat_id=None, country="US"
    )
    b.add_invoice(
        "hostile_vendor_name",
        b.invoice(seller=sql_vendor, currency="USD"),
        "json",
        note="vendor name with SQL and control characters: must be stored verbatim and processed",
    )


def _add_scans(b: _Builder, original: _Original) -> None:
    name, inv, _ = original
    scan_rng = random.Random(b.rng.random())
    b.add(
        "scan_of_first_invoice",
        "pdf",
        scan_invoice(inv, "clean", scan_rng, lang=b.lang(inv)),
        "pdf",
        expected=inv.to_fields(),
        duplicate_of=name,
        note="a paper copy of the first invoice, scanned (image-only PDF, OCR)",
    )
    photo = b.invoice()
    b.add(
        "photo_invoice",
        "png",
        scan_invoice(photo, "skewed", scan_rng, lang=b.lang(photo), kind="png"),
        "image",
        expected=photo.to_fields(),
        note="a skewed photo of an invoice (PNG, OCR)",
    )


def _add_review_cases(b: _Builder) -> None:
    """Valid invoices a person must see (needs_review), last so earlier files keep their names."""
    french = next(s for s in b.sellers if s.country == "FR")
    avoir = b.invoice(seller=french)
    b.add(
        "avoir_as_invoice",
        "pdf",
        review_cases.avoir_basic_wl_pdf(avoir),
        "facturx-pdf",
        expected=review_cases.negative_invoice(avoir).to_fields(),
        review="negative_total",
        note="French avoir sent as an invoice (type 380, Factur-X BASIC-WL): held for review",
    )
    b.add_invoice(
        "due_before_issue",
        review_cases.due_before_issue(b.invoice()),
        "ubl",
        review="due_before_issue",
        note="due date before the issue date: held for review, not quarantined",
    )
    _add_who_is_paid_cases(b)


# Valid IBANs (ISO 13616 check digits) of the published examples, for the bank-details samples.
SAMPLE_IBANS = ("DE89370400440532013000", "GB82WEST12345698765432")


def _add_who_is_paid_cases(b: _Builder) -> None:
    """Who is paid (issue 37): a page from a seller the vendor master does not list, and an
    e-invoice asking to be paid into another account than the vendor's one on record."""
    newcomer = replace(
        b.sellers[-1], name="Kestrel Facility Services Ltd", vat_id="GB980780684", country="GB"
    )
    b.add_invoice(
        "new_vendor",
        b.invoice(seller=newcomer, currency="GBP"),
        "pdf",
        review="vendor_unconfirmed",
        note="a seller the vendor master does not list: held as vendor_unconfirmed until a person approves it",
    )
    payee = b.sellers[1]
    b.add_invoice(
        "invoice_with_iban",
        replace(b.invoice(seller=payee), payee_iban=SAMPLE_IBANS[0]),
        "json",
        note="original",
    )
    b.add_invoice(
        "changed_iban",
        replace(b.invoice(seller=payee), payee_iban=SAMPLE_IBANS[1]),
        "json",
        review="bank_details_changed",
        note="the same vendor asks to be paid into another account: held as bank_details_changed",
    )


def _add_bad_inputs(b: _Builder) -> None:
    def bad(stem: str, ext: str, content: bytes, fmt: str, code: str, note: str) -> None:
        b.add(stem, ext, content, fmt, code=code, fails_at="extract", note=note)

    def invalid(stem: str, inv: SampleInvoice, fmt: str, code: str, note: str) -> None:
        b.add_invoice(stem, inv, fmt, code=code, fails_at="validate", note=note)

    bad("empty", "pdf", b"", "pdf", "empty_file", "zero-byte upload")
    whole = invoice_pdf(b.invoice())
    bad("truncated", "pdf", whole[: len(whole) // 2], "pdf", "corrupt_pdf", "PDF cut off mid-transfer")

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(invoice_pdf(b.invoice()))))
    writer.encrypt(user_password="s3cret", owner_password="owner", algorithm="AES-128")
    buf = io.BytesIO()
    writer.write(buf)
    bad("encrypted", "pdf", buf.getvalue(), "pdf", "encrypted_pdf", "password-protected PDF")

    letter = letter_pdf(
        [
            "Dear customer,",
            "thank you for visiting our stand at the trade fair.",
            "We look forward to hearing from you.",
            "Kind regards",
        ]
    )
    bad("cover_letter", "pdf", letter, "pdf", "not_an_invoice", "PDF with text but no invoice content")

    xxe = (
        b'<?xml version="1.0"?>\n<!DOCTYPE Invoice [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>\n'
        b'<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" '
        b'xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:ID>&xxe;</cbc:ID></Invoice>\n'
    )
    bad("xxe", "xml", xxe, "ubl", "xml_entities_forbidden", "XML external entity pointing at a local file")
    order = (
        b'<?xml version="1.0" encoding="UTF-8"?>\n<Order xmlns="urn:oasis:names:specification:ubl:schema:xsd:Order-2" '
        b'xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2"><cbc:ID>PO-1</cbc:ID></Order>\n'
    )
    bad("purchase_order", "xml", order, "ubl", "unsupported_xml", "a UBL Order, not an invoice")
    bad_json = json.dumps({"invoice_number": 12345, "payable_total": "twelve", "colour": "blue"}).encode()
    bad(
        "bad_schema", "json", bad_json, "json", "json_schema", "JSON that does not follow invoice.schema.json"
    )
    latin1 = ubl_xml(b.invoice(seller=replace(b.sellers[2], name="Atelier Lumière SARL"))).replace(
        "Lumière".encode(), "Lumière".encode("latin-1")
    )
    bad("wrong_encoding", "xml", latin1, "ubl", "bad_encoding", "declares UTF-8 but contains Latin-1 bytes")

    # Net and tax stated, but no amount due and no grand total to form it from (BR-CO-16): not
    # valid, yet a person can read what is owed, so held for them, not quarantined (issue 58).
    b.add_invoice(
        "missing_total",
        b.invoice(omit_payable=True),
        "ubl",
        fails_at="validate",
        review="amount_due_unformed",
        note="no PayableAmount and no TaxInclusiveAmount: held for a person to type the amount due",
    )
    # Valid under EN 16931, so not broken: held for a person (review_cases.py).
    b.add_invoice(
        "negative_total",
        review_cases.negative_invoice(b.invoice()),
        "cii",
        review="negative_total",
        note="invoice (type 380) with a negative total: held for review, not quarantined",
    )
    invalid(
        "unknown_currency",
        b.invoice(currency="XYZ"),
        "json",
        "unknown_currency",
        "currency XYZ is not ISO 4217",
    )
    invalid(
        "impossible_date",
        b.invoice(issue_date_text="2023-02-30"),
        "ubl",
        "bad_date",
        "issue date 30 February",
    )
