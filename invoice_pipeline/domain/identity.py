"""Who is who on an invoice: the org's own identity, its vendors, and the identifiers that tie
an invoice to one of them. Pure: no database.

An accounts-payable team tells buyer from seller by knowing itself: its legal names, VAT ids,
tax numbers and IBANs are on every invoice it receives, in the buyer's block (and its IBAN on a
direct-debit notice). `OrgProfile` is that knowledge, and `without_own_identity` makes sure the
page reader never takes it for the seller's.

Who is paid is then *confirmed*, not guessed (`vendor_reasons`): a registered vendor of the org
must own an identifier the invoice gives in the seller's position (a VAT id or the IBAN to pay),
and the IBAN to pay must be one the vendor is known to have. A name proves nothing: anyone can
print one.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from .fields import FieldSource, InvoiceFields

IdentifierKind = Literal["name", "vat", "tax", "iban"]
IDENTIFIER_KINDS: tuple[IdentifierKind, ...] = ("name", "vat", "tax", "iban")

VENDOR_UNCONFIRMED = "vendor_unconfirmed"
BANK_DETAILS_CHANGED = "bank_details_changed"

# IBAN lengths by country would be a longer table; the mod-97 check (ISO 13616) already rejects
# a mistyped or misread IBAN with a probability of about 99 %.
_IBAN_SHAPE = re.compile(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}")
_IBAN_ON_PAGE = re.compile(
    r"(?<![A-Z0-9])([A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?)(?![A-Z0-9])"
)


def compact(value: str) -> str:
    """An identifier as letters and digits only, upper case: 'DE 123 456 789' -> 'DE123456789'."""
    return re.sub(r"[^0-9A-Z]", "", unicodedata.normalize("NFKC", value).upper())


def iban_valid(value: str) -> bool:
    """The ISO 13616 check: move the country and check digits to the end, letters to numbers, mod 97 = 1."""
    iban = compact(value)
    if not _IBAN_SHAPE.fullmatch(iban):
        return False
    digits = "".join(str(int(ch, 36)) for ch in iban[4:] + iban[:4])
    return int(digits) % 97 == 1


def norm_name(value: str) -> str:
    """A name for comparison: case, accents, punctuation and spacing do not matter."""
    folded = unicodedata.normalize("NFKD", value).casefold()
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return " ".join(re.sub(r"[^\w]+", " ", folded).split())


def normalise(kind: IdentifierKind, value: str) -> str:
    """The form an identifier is stored and compared in; ValueError for one that cannot be right."""
    if kind == "name":
        out = norm_name(value)
    else:
        out = compact(value)
        if kind == "iban" and not iban_valid(out):
            raise ValueError(f"{value!r} is not a valid IBAN (ISO 13616 check digits)")
    if not out:
        raise ValueError(f"an empty {kind} is no identifier")
    return out


def ibans_on_page(text: str) -> list[str]:
    """Every valid IBAN the page prints, in page order, once each."""
    found: list[str] = []
    for match in _IBAN_ON_PAGE.finditer(text.upper()):
        iban = compact(match.group(1))
        if iban_valid(iban) and iban not in found:
            found.append(iban)
    return found


@dataclass(frozen=True)
class Identifier:
    kind: IdentifierKind
    value: str  # normalised
    shown: str  # as given


class Identified:
    """Something known by identifiers (an org's own profile, a vendor): does it have this one?"""

    identifiers: tuple[Identifier, ...]

    def has(self, kind: IdentifierKind, value: str | None) -> bool:
        if not value:
            return False
        try:
            wanted = normalise(kind, value)
        except ValueError:
            return False
        return any(i.kind == kind and i.value == wanted for i in self.identifiers)

    def of_kind(self, kind: IdentifierKind) -> list[str]:
        return [i.shown for i in self.identifiers if i.kind == kind]


@dataclass(frozen=True)
class OrgProfile(Identified):
    """An organisation's own identity: it is the buyer on every invoice it receives."""

    org_id: str
    identifiers: tuple[Identifier, ...] = ()


def without_own_identity(fields: InvoiceFields, profile: OrgProfile, page_text: str | None) -> InvoiceFields:
    """Fields in which nothing of the org's own identity stands for the seller's.

    On a page, the org's VAT id or name read as the seller's is dropped (it is the buyer's), and
    the IBAN to pay is the page's first valid IBAN that is not the org's own (a direct-debit
    notice prints the org's account; the others printed are named in the evidence, and only the
    one paid into is checked against the vendor's known accounts). Structured invoices say who is who in their data; only a
    seller identity equal to the org's own is dropped there too, because paying oneself is
    always wrong.
    """
    changes: dict[str, object] = {}
    sources = dict(fields.sources)

    def drop(name: str, why: str) -> None:
        changes[name] = None
        previous = sources.get(name)
        sources[name] = FieldSource(previous.source if previous else "org profile", 0.0, why)

    if profile.has("vat", fields.seller_vat_id):
        drop(
            "seller_vat_id",
            f"the VAT id read as the seller's ({fields.seller_vat_id}) is the org's own: it is the buyer's",
        )
    if fields.seller_name and profile.has("name", fields.seller_name):
        drop(
            "seller_name",
            f"the name read as the seller's ({fields.seller_name}) is the org's own: the buyer's",
        )
    if fields.read_from_page and page_text is not None:
        read_by = "ocr" if any(s.source.startswith("ocr") for s in fields.sources.values()) else "pdf-text"
        theirs = [iban for iban in ibans_on_page(page_text) if not profile.has("iban", iban)]
        if theirs:
            changes["payee_iban"] = theirs[0]
            also = f"; the page also prints {', '.join(theirs[1:])}" if len(theirs) > 1 else ""
            sources["payee_iban"] = FieldSource(
                f"{read_by}: IBAN printed on the page",
                0.9,
                f"the first valid IBAN that is not the org's own{also}",
            )
        else:
            changes["payee_iban"] = None
            sources["payee_iban"] = FieldSource(
                read_by, 0.0, "no valid IBAN on the page other than the org's own"
            )
    elif profile.has("iban", fields.payee_iban):
        drop("payee_iban", f"the IBAN to pay ({fields.payee_iban}) is the org's own account")
    if not changes:
        return fields
    return replace(fields, **changes, sources=sources)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Vendor(Identified):
    """A vendor the org pays, with what identifies it and where that came from (store/vendors)."""

    vendor_id: int
    org_id: str
    name: str
    default_currency: str | None
    identifiers: tuple[Identifier, ...]


def invoice_identifiers(fields: InvoiceFields) -> list[Identifier]:
    """The identifiers an invoice gives in the seller's position, strongest first. The seller's
    VAT id is read from the seller's block or legal footer; the IBAN is the account to pay."""
    out: list[Identifier] = []
    for kind, value in (("vat", fields.seller_vat_id), ("iban", fields.payee_iban)):
        if value:
            try:
                out.append(Identifier(kind, normalise(kind, value), value))  # type: ignore[arg-type]
            except ValueError:
                continue
    return out


def matching_vendor(fields: InvoiceFields, vendors: Iterable[Vendor]) -> Vendor | None:
    """The registered vendor the invoice's seller-position identifiers name: its VAT id first, then
    the IBAN to pay. None when no identifier names one."""
    pool = list(vendors)
    for ident in invoice_identifiers(fields):
        for vendor in pool:
            if vendor.has(ident.kind, ident.value):
                return vendor
    return None


def vendor_reasons(
    fields: InvoiceFields, vendor: Vendor | None, *, registers_einvoice_vendors: bool
) -> list[str]:
    """Why who is paid is not confirmed; empty: the vendor is known and so is the account.

    * A page-read invoice is confirmed only by a registered vendor owning its seller VAT id or
      the IBAN it asks to be paid into. A structured e-invoice's seller is data the sender
      signed off; the org's policy says whether its first one registers the vendor by itself.
    * The IBAN to pay must be one the vendor is known to have, on every format.
    """
    if vendor is None:
        if (
            not fields.read_from_page
            and registers_einvoice_vendors
            and (fields.seller_vat_id or fields.seller_name)
        ):
            return []  # registered when it is posted (store/vendors.py), with its IBAN
        shown = ", ".join(f"{i.kind} {i.shown}" for i in invoice_identifiers(fields)) or "no VAT id or IBAN"
        return [
            f"{VENDOR_UNCONFIRMED}: the seller ({fields.seller_name or 'name not read'}; {shown}) is not a "
            "registered vendor of the org; check who sent it, then approve to register the vendor, or reject it"
        ]
    if fields.payee_iban and not vendor.has("iban", fields.payee_iban):
        known = ", ".join(vendor.of_kind("iban")) or "none on record"
        return [
            f"{BANK_DETAILS_CHANGED}: the invoice asks to be paid into {fields.payee_iban}, which is not an "
            f"account of vendor {vendor.name} (#{vendor.vendor_id}; known: {known}); confirm the change with the "
            "vendor by a channel you already know before approving"
        ]
    return []
