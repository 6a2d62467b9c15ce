"""Vendor layouts learnt from a person's decision, and reading a page with one. Pure: no database.

A `VendorLayout` says, for one organisation and one vendor, how that vendor's page is read:

* the vendor: its key (`vat:<id>` or `iban:<iban>`), one of the identifiers the vendor registry
  records for the vendor. A layout applies only to a page whose vendor the registry confirms (an
  identifier printed on the page that belongs to exactly one of the org's vendors and is not the
  org's own: `domain.payment.confirmed_vendor`) and only when that vendor records the key
  (`layout_of_vendor`): a different vendor's page never is, however alike the templates, and a
  page whose vendor is not confirmed is read template-free. (`name:` keys of earlier versions
  are kept but never apply: a name proves nothing.) A layout never says who the seller is: its
  `seller_name` / `seller_vat_id` are informational;
* a fingerprint: the stable words of the page (segments without digits) and their columns; a
  page matches when enough of them are there again, wherever the lines moved;
* per field, a `FieldRule`: the anchor text near the value (a label) and where the value stands
  relative to it: inside the anchor's segment after it (`same`), right of it on its line
  (`right`), or `dy` lines below it near its column (`below`). Positions are relative to the
  anchor, never to the page, so an invoice that grows by a line still reads.

`learn_layout` makes one from a page and the values a person confirmed; `read_with_layout` reads
a page with one (or says why it does not match); `fields_with_layouts` puts that together with
the template-free reading (`documents.text_fields`): a layout is tried first, a field it cannot
read keeps the template-free value and says so in its source, and a layout that no longer
matches its vendor's page falls back whole and says so. Amounts read with a layout are never
taken on the layout's word: the layout only says which printed amount is the net, the tax, the
gross, the prepaid and the due, and `reading.amounts.resolve` must still find the page's own
arithmetic among them (money fails closed).

The package's parts, each importing only those above it:

    model    the layout as data, the page, normalising
    match    whether a layout is for a page (vendor, organisation, fingerprint); values in a segment
    learn    a layout from a page and a person's confirmed values
    read     a page read with one layout; what it contradicts
    totals   the page's own amounts checked against what a layout placed
    merge    a layout's reading merged into the template-free one; shadow; stored texts
"""

from .learn import learn_layout
from .match import fingerprint_of, fingerprint_score, layout_for_org, layout_of_vendor, vendor_key_for
from .merge import PAGE_FORMATS, SHADOW_COMPARED, apply_layouts, fields_with_layouts, page_of, shadow_reading
from .model import (
    AMOUNT_ROLES,
    ANCHORED_FIELDS,
    FORMAT_VERSION,
    MATCH_THRESHOLD,
    FieldRule,
    Page,
    StableWord,
    VendorLayout,
    amount_roles,
    norm_id,
    norm_name,
    norm_text,
)
from .read import LayoutRead, ReadValue, Refused, contradictions, read_with_layout
from .totals import labels_disagreeing, unexplained_amounts

__all__ = [
    "AMOUNT_ROLES",
    "ANCHORED_FIELDS",
    "FORMAT_VERSION",
    "MATCH_THRESHOLD",
    "PAGE_FORMATS",
    "SHADOW_COMPARED",
    "FieldRule",
    "LayoutRead",
    "Page",
    "ReadValue",
    "Refused",
    "StableWord",
    "VendorLayout",
    "amount_roles",
    "apply_layouts",
    "contradictions",
    "fields_with_layouts",
    "fingerprint_of",
    "fingerprint_score",
    "labels_disagreeing",
    "layout_for_org",
    "layout_of_vendor",
    "learn_layout",
    "norm_id",
    "norm_name",
    "norm_text",
    "page_of",
    "read_with_layout",
    "shadow_reading",
    "unexplained_amounts",
    "vendor_key_for",
]
