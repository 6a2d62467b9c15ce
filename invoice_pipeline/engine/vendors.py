"""The org's profile and vendor registry, as a team manages them (issue 37; docs/vendors.md).

* `read_vendor_csv`: the ERP's vendor master as CSV (one row per vendor; several VAT ids, tax
  numbers or IBANs in one cell separated by `;`). Every row is checked before anything is
  imported: a bad IBAN or a row without a name refuses the file and says which row and why.
* `seed_org_profile`: the org's own names and VAT ids, from the buyer party of its posted
  structured e-invoices (what its senders call it).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from invoice_pipeline.domain.identity import Identifier, IdentifierKind, Vendor, normalise
from invoice_pipeline.domain.validation import is_known_currency
from invoice_pipeline.engine.store import InvoiceStore, VendorImportRow

# Column names a vendor-master export uses for each identifier kind (case-insensitive).
CSV_COLUMNS: dict[str, IdentifierKind | None] = {
    "name": None,
    "vat_id": "vat",
    "vat_ids": "vat",
    "tax_number": "tax",
    "tax_numbers": "tax",
    "iban": "iban",
    "ibans": "iban",
    "currency": None,
    "default_currency": None,
}
MAX_CSV_BYTES = 8 * 1024 * 1024
MAX_CSV_ROWS = 50_000


class VendorFileError(ValueError):
    """A vendor file that cannot be imported; nothing was."""


def read_vendor_csv(text: str) -> list[VendorImportRow]:
    if len(text.encode()) > MAX_CSV_BYTES:
        raise VendorFileError(f"the file is over {MAX_CSV_BYTES} bytes; split it")
    reader = csv.DictReader(io.StringIO(text))
    columns = {c.strip().lower(): c for c in reader.fieldnames or ()}
    if "name" not in columns:
        raise VendorFileError("the first line must name the columns, with at least 'name'")
    unknown = sorted(set(columns) - set(CSV_COLUMNS))
    if unknown:
        raise VendorFileError(f"unknown column(s) {', '.join(unknown)}; known: {', '.join(CSV_COLUMNS)}")
    rows: list[VendorImportRow] = []
    for number, raw in enumerate(reader, start=2):
        if len(rows) >= MAX_CSV_ROWS:
            raise VendorFileError(f"more than {MAX_CSV_ROWS} vendors; split the file")
        cell = {key: (raw.get(original) or "").strip() for key, original in columns.items()}
        name = cell.get("name", "")
        if not name:
            raise VendorFileError(f"line {number}: a vendor needs a name")
        currency = cell.get("default_currency") or cell.get("currency") or None
        if currency is not None and not is_known_currency(currency):
            raise VendorFileError(f"line {number}: currency {currency!r} is not an ISO 4217 code")
        identifiers: list[Identifier] = []
        for key, kind in CSV_COLUMNS.items():
            if kind is None or not cell.get(key):
                continue
            for value in (v.strip() for v in cell[key].split(";")):
                if not value:
                    continue
                try:
                    identifiers.append(Identifier(kind, normalise(kind, value), value))
                except ValueError as exc:
                    raise VendorFileError(f"line {number} ({name}): {exc}") from None
        rows.append(VendorImportRow(name, tuple(dict.fromkeys(identifiers)), currency))
    return rows


def seed_org_profile(store: InvoiceStore, org_id: str, actor: str) -> list[Identifier]:
    """Add the buyer names and VAT ids of the org's posted e-invoices to its profile; returns what
    was new."""
    added: list[Identifier] = []
    for name, vat in store.vendors.buyer_parties_of_posted_einvoices(org_id):
        for kind, value in (("name", name), ("vat", vat)):
            if value and value.strip():
                ident = Identifier(kind, normalise(kind, value), value.strip())  # type: ignore[arg-type]
                if store.vendors.add_org_identity(
                    org_id, ident.kind, value, source="posted e-invoice buyer party", added_by=actor
                ):
                    added.append(ident)
    return added


def describe_vendors(vendors: Iterable[Vendor]) -> list[str]:
    lines = []
    for vendor in vendors:
        ids = "; ".join(f"{i.kind} {i.shown}" for i in vendor.identifiers if i.kind != "name")
        lines.append(
            f"#{vendor.vendor_id}  {vendor.name}  [{ids or 'no identifier'}]"
            + (f"  currency {vendor.default_currency}" if vendor.default_currency else "")
        )
    return lines
