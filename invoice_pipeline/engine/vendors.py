"""The org's profile and vendor registry, as a team manages them (issue 37; docs/vendors.md).

* `read_vendor_csv`: the ERP's vendor master as CSV (one row per vendor; several VAT ids, tax
  numbers or IBANs in one cell separated by `;`). Every row is checked before anything is
  imported: a bad IBAN or a row without a name refuses the file and says which row and why.
* `vendors_of_pages`: the vendor the registry confirms for each page-read invoice, by the VAT ids
  and IBANs the page prints anywhere: its layouts read the page (issue 54).
* `org_profile_candidates`: names and VAT ids the org's posted structured e-invoices give for
  their buyer, proposed for its profile; a person adds the ones that are the org's own (anyone
  can send an e-invoice naming anyone as its buyer, so nothing is added by itself).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from uuid import UUID

from invoice_pipeline.documents.reading.seller_buyer import identifiers_for_the_registry
from invoice_pipeline.domain.identity import (
    Identifier,
    IdentifierKind,
    OrgProfile,
    Vendor,
    normalise,
)
from invoice_pipeline.domain.payment import confirmed_vendor
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


@dataclass(frozen=True)
class ProfileCandidate:
    """An identifier posted e-invoices gave for their buyer, and what a person needs to decide."""

    kind: IdentifierKind
    shown: str  # a name as the invoices wrote it most often; a VAT id in its compact form
    invoices: int  # how many posted e-invoices named it
    owner: str | None = None  # "vendor NAME (#ID)": a registered vendor has it; not proposed
    problem: str | None = None  # why it is no identifier (a VAT id that fails its check digits)


def org_profile_candidates(store: InvoiceStore, org_id: str) -> list[ProfileCandidate]:
    """The buyer names and VAT ids of the org's posted structured e-invoices that are not in its
    profile yet, most frequent first. Only proposed: adding one is a person's decision."""
    profile = store.vendors.org_profiles([org_id])[org_id]
    vendors = store.vendors.list_vendors(org_id)
    counts: dict[tuple[IdentifierKind, str], Counter[str]] = {}
    problems: dict[tuple[IdentifierKind, str], tuple[str, int]] = {}
    for name, vat, invoices in store.vendors.buyer_parties_of_posted_einvoices(org_id):
        named: tuple[tuple[IdentifierKind, str | None], ...] = (("name", name), ("vat", vat))
        for kind, raw in named:
            shown = (raw or "").strip()
            if not shown:
                continue
            try:
                value = normalise(kind, shown)
            except ValueError as exc:
                seen = problems.get((kind, shown), ("", 0))[1]
                problems[(kind, shown)] = (str(exc), seen + invoices)
                continue
            counts.setdefault((kind, value), Counter())[shown] += invoices
    out: list[ProfileCandidate] = []
    for (kind, value), writings in counts.items():
        if any(i.kind == kind and i.value == value for i in profile.identifiers):
            continue
        owner = next(
            (v for v in vendors if any(i.kind == kind and i.value == value for i in v.identifiers)), None
        )
        out.append(
            ProfileCandidate(
                kind,
                value if kind != "name" else sorted(writings.items(), key=lambda w: (-w[1], w[0]))[0][0],
                sum(writings.values()),
                f"vendor {owner.name} (#{owner.vendor_id})" if owner else None,
            )
        )
    out.extend(ProfileCandidate(kind, shown, n, problem=why) for (kind, shown), (why, n) in problems.items())
    return sorted(out, key=lambda c: (-c.invoices, c.kind, c.shown))


def describe_vendors(vendors: Iterable[Vendor]) -> list[str]:
    lines = []
    for vendor in vendors:
        ids = "; ".join(f"{i.kind} {i.shown}" for i in vendor.identifiers if i.kind != "name")
        lines.append(
            f"#{vendor.vendor_id}  {vendor.name}  [{ids or 'no identifier'}]"
            + (f"  currency {vendor.default_currency}" if vendor.default_currency else "")
        )
    return lines


def vendors_of_pages(
    store: InvoiceStore, pages: Mapping[UUID, tuple[str, str]], profiles: Mapping[str, OrgProfile]
) -> dict[UUID, Vendor | None]:
    """Per page-read invoice ((org, page text) by invoice), the vendor the registry confirms for it
    (`domain.payment.confirmed_vendor`, the rule that confirms who is paid): an identifier the page
    prints (anywhere but on the buyer's side: `identifiers_for_the_registry`) that belongs to
    exactly one of the org's vendors and is not the org's own. None when none or several vendors
    own what the page prints. One query for them all."""
    printed = {invoice_id: identifiers_for_the_registry(text) for invoice_id, (_, text) in pages.items()}
    registry = store.vendors.vendors_named_by(
        [(org, ident) for invoice_id, (org, _) in pages.items() for ident in printed[invoice_id]]
    )
    return {
        invoice_id: confirmed_vendor(printed[invoice_id], registry.get(org, ()), profiles[org])
        for invoice_id, (org, _) in pages.items()
    }
