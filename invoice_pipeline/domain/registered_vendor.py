"""What the vendor is known to be fills what its page cannot say (issue 54). Pure: no database.

For a page-read invoice whose vendor the registry confirms (`domain.payment.confirmed_vendor`:
an identifier printed on the page belongs to exactly one of the org's vendors):

* its registered name and VAT id are the seller's; the page's own reading is kept beside them,
  in the field's source (`registry:vendor #N ...`, reason "the page reads ..."). A registry that
  knows no VAT id of the vendor fills none: the page's stands;
* a contradiction is not filled over: when the page's seller VAT id is a valid one that is not
  the vendor's while the vendor has one on record (`contradiction`), the page names another
  seller. Nothing is filled, no layout reads the page (engine/stages.py), and the payment
  decision sees the page's reading and holds it (`vendor_identity_conflict`, domain/payment.py);
* a currency the page prints only as a sign several currencies share ("$", "kr";
  `reading.page_values.shared_currency_signs`) is the vendor's usual currency when a person
  approved its invoices in exactly one currency that sign can mean; otherwise it stays unread,
  and the invoice is held for a person.

What is filled is marked as the registry's in its source; nothing here touches an amount, a
date, the number or the IBAN to pay.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from .fields import FieldSource, InvoiceFields
from .identity import Vendor, vat_valid

REGISTRY_SOURCE = "registry"


def contradiction(fields: InvoiceFields, vendor: Vendor) -> str | None:
    """Why the page's own seller identity contradicts the confirmed vendor, or None."""
    vat = fields.seller_vat_id
    if not vat or not vat_valid(vat) or not vendor.of_kind("vat") or vendor.has("vat", vat):
        return None
    return (
        f"the page's seller VAT id {vat} is not that of vendor {vendor.name} (#{vendor.vendor_id}; "
        f"{', '.join(vendor.of_kind('vat'))})"
    )


def _page_reading(fields: InvoiceFields, name: str) -> str:
    value, source = getattr(fields, name), fields.sources.get(name)
    if value is None:
        why = source.reason if source is not None and source.reason else "not read"
        return f"the page's reading: none ({why})"
    return f"the page reads {value!r}" + (f" ({source.source})" if source is not None else "")


def with_registered_vendor(
    fields: InvoiceFields,
    vendor: Vendor | None,
    *,
    approved_currencies: Sequence[str] = (),
    shared_signs: Mapping[str, frozenset[str]] | None = None,
) -> InvoiceFields:
    """`fields` with what the confirmed `vendor` is known to be (see the module); unchanged for a
    structured invoice, an unconfirmed vendor or a contradiction."""
    if vendor is None or not fields.read_from_page or contradiction(fields, vendor) is not None:
        return fields
    label = f"{REGISTRY_SOURCE}:vendor #{vendor.vendor_id} {vendor.name}"
    changes: dict[str, object] = {}
    sources = dict(fields.sources)

    def fill(name: str, value: str, what: str) -> None:
        if getattr(fields, name) == value:
            return
        changes[name] = value
        sources[name] = FieldSource(f"{label}: {what}", 1.0, _page_reading(fields, name))

    fill("seller_name", vendor.name, "its registered name")
    vats = vendor.of_kind("vat")
    if len(vats) == 1 and not vendor.has("vat", fields.seller_vat_id):
        # No valid VAT id of another party stands there (that is a contradiction): none read, or
        # one whose check digits fail.
        fill("seller_vat_id", vats[0], "its registered VAT id")
    if fields.currency is None and shared_signs:
        meant = frozenset().union(*shared_signs.values())
        usual = sorted({c for c in approved_currencies if c in meant})
        if len(usual) == 1:
            signs = " and ".join(repr(s) for s in sorted(shared_signs))
            fill(
                "currency",
                usual[0],
                f"the currency of its invoices a person approved; the page prints only {signs}",
            )
    if not changes:
        return fields
    return replace(fields, **changes, sources=sources)  # type: ignore[arg-type]
