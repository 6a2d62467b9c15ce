"""Vendor layouts in the loop: learnt from a person's decision, managed, exported and imported.

`learn_from_decision` runs after a person approved a page-read invoice (`engine.review.act`,
action approve; after a correction, it is the approval that teaches, from the approved values),
once that decision has committed; a correction saved teaches nothing by itself. It never changes the decision: learning is a consequence of it, and a failure to
learn is reported, not raised. It reads the invoice's stored page and its fields as the person
left them, and then, for that organisation and vendor:

* no layout of the vendor matches the page: a new version is learnt (the vendor may use two
  templates; the older one stays enabled until it stops matching anything or a person disables it);
* a matching layout reads what the person confirmed: it is confirmed (counted, not rewritten), and
  a version in shadow becomes active (a person approved an invoice read with it);
* a matching layout reads something else, or fewer fields than the page now teaches: a new
  version, and the old one is disabled as superseded by it.

The vendor is the one the registry confirms by the seller identifiers the person approved (or
the one the invoice's posting registers with them): the layout is keyed by one of its
identifiers, and it reads only pages whose vendor the registry confirms as that vendor (issue 54).
A version learnt from a person's approval is active at once: the vendor's next page is read with
it. One learnt by vouching for a posted invoice (`teach_layout`) and every imported one start in
shadow, until a person approves an invoice read with it. A rejection undoes what the rejected invoice taught
(`unlearn_quietly`). Layouts are per organisation: every read and write names the invoice's own org.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from uuid import UUID

from invoice_pipeline.documents.reading.layout_export import EXPORT_FORMAT, check_export
from invoice_pipeline.documents.reading.layouts import (
    FORMAT_VERSION,
    PAGE_FORMATS,
    Page,
    VendorLayout,
    contradictions,
    layout_of_vendor,
    learn_layout,
    page_of,
    read_with_layout,
    vendor_key_for,
)
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.identity import Vendor
from invoice_pipeline.domain.payment import confirmed_vendor, seller_identifiers
from invoice_pipeline.engine.store import InvoiceStore, LayoutRow, as_uuid

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Learnt:
    """What a decision taught: a new layout or version, a confirmation, or nothing and why."""

    invoice_id: UUID
    outcome: Literal["learnt", "new_version", "confirmed", "skipped"]
    detail: str
    layout_id: int | None = None
    version: int | None = None


def learn_from_decision(
    store: InvoiceStore, invoice_id: UUID | str, taught_by: str, *, approved: bool = False
) -> Learnt:
    """Learn (or confirm) the vendor's layout from a decided page-read invoice (see the module).
    `approved`: a person approved this invoice (`learn_quietly`), so a version learnt from it is
    active at once (issue 54); one learnt by vouching for a posted invoice starts in shadow."""
    invoice_id = as_uuid(invoice_id)

    def skipped(why: str) -> Learnt:
        return Learnt(invoice_id, "skipped", why)

    state = store.documents.invoice_state(invoice_id)
    extracted = store.documents.load_extracted_text(invoice_id)
    fields = store.documents.load_fields(invoice_id)
    if state is None or extracted is None or fields is None:
        return skipped("the invoice, its text or its fields are not stored")
    if extracted.format not in PAGE_FORMATS:
        return skipped(f"it was not read from a page ({extracted.format}): nothing to learn")
    boxes, _ = page_of(extracted)
    vendor = approved_vendor(store, state.org_id, fields)
    learnt = learn_layout(
        extracted.text,
        boxes,
        fields,
        org_id=state.org_id,
        vendor_key=vendor_key_for(fields, vendor),
        learnt_from=str(invoice_id),
        taught_by=taught_by,
    )
    if learnt is None:
        return skipped(
            "the approved invoice gives no valid VAT id or IBAN of the seller, by which the vendor "
            "registry could recognise the vendor's next pages"
        )
    if not learnt.rules:
        return skipped("no confirmed value was found on the page next to a label" + _untaught(learnt))
    page = Page.of(extracted.text, boxes)
    rows = [r for r in store.layouts.list_layouts(state.org_id) if layout_of_vendor(r.vendor_key, vendor)]
    for row in sorted(rows, key=lambda r: -r.version):
        read = read_with_layout(page, row.vendor_layout(), vendor)
        if not read.matched:
            continue
        wrong = contradictions(read, fields)
        more = sorted({r.field for r in learnt.rules} - set(read.values))
        if not wrong and not more:
            return _confirmed(store, row, invoice_id, taught_by)
        why = (
            f"{taught_by} decided {', '.join(wrong)} differently on invoice {invoice_id}"
            if wrong
            else f"invoice {invoice_id} also teaches {', '.join(more)}"
        )
        saved = store.layouts.save_layout(
            learnt, taught_by=taught_by, learnt_from=invoice_id, supersedes=row, why=why, active=approved
        )
        return Learnt(
            invoice_id,
            "new_version",
            f"supersedes layout {row.id} v{row.version}: {why}" + _untaught(learnt),
            saved.id,
            saved.version,
        )
    saved = store.layouts.save_layout(learnt, taught_by=taught_by, learnt_from=invoice_id, active=approved)
    return Learnt(
        invoice_id,
        "learnt",
        f"learnt {learnt.vendor_key} from invoice {invoice_id}" + _untaught(learnt),
        saved.id,
        saved.version,
    )


def _confirmed(store: InvoiceStore, row: LayoutRow, invoice_id: UUID, taught_by: str) -> Learnt:
    """A decision the layout `row` reads as decided: a confirmation, which activates a version in
    shadow; unless the decision is on the invoice the version was learnt from, which confirms
    nothing (issue 59: vouching twice for one invoice would end shadow mode). The store refuses
    that confirmation too (sql/queries/layouts.sql confirm_layout)."""
    if row.learnt_from == invoice_id:
        in_shadow = "; it stays in shadow until a person approves another invoice read with it"
        return Learnt(
            invoice_id,
            "skipped",
            f"layout {row.id} v{row.version} was learnt from this invoice, which confirms nothing"
            + (in_shadow if row.state == "shadow" else ""),
        )
    activated = store.layouts.confirm_layout(row.org_id, row.id, invoice_id=invoice_id, actor=taught_by)
    return Learnt(
        invoice_id,
        "confirmed",
        f"layout {row.id} v{row.version} read it as decided"
        + ("; it was in shadow and is now active" if activated else ""),
        row.id,
        row.version,
    )


def _untaught(layout: VendorLayout) -> str:
    """What the approved values taught nothing about, and why, for the person who taught it."""
    return f"; learnt nothing from {'; '.join(layout.not_learnt)}" if layout.not_learnt else ""


def approved_vendor(store: InvoiceStore, org_id: str, fields: InvoiceFields) -> Vendor:
    """The vendor an approved invoice is from: the one the registry confirms by the identifiers the
    person approved (`domain.payment.confirmed_vendor`), else the one its posting will register
    with them (not yet in the registry: vendor id 0)."""
    idents = seller_identifiers(fields)
    registry = store.vendors.vendors_named_by([(org_id, i) for i in idents]).get(org_id, [])
    profile = store.vendors.org_profiles([org_id])[org_id]
    known = confirmed_vendor(idents, registry, profile)
    return known or Vendor(0, org_id, fields.seller_name or "", fields.currency, tuple(idents))


def teach_layout(store: InvoiceStore, invoice_id: UUID | str, taught_by: str) -> Learnt:
    """A person vouches that a posted page-read invoice was read right: learn its vendor's layout
    from it, as from an approval. An invoice waiting for review is corrected or approved instead
    (which teaches too); one that was not posted was not read right, or not read at all."""
    invoice_id = as_uuid(invoice_id)
    state = store.documents.invoice_state(invoice_id)
    if state is None:
        return Learnt(invoice_id, "skipped", "no such invoice")
    if state.status == "needs_review":
        return Learnt(
            invoice_id, "skipped", "it waits for review: correct or approve it, which teaches its layout"
        )
    if state.status != "processed":
        return Learnt(
            invoice_id, "skipped", f"it is {state.status}, not posted: nothing confirmed its reading"
        )
    return learn_from_decision(store, invoice_id, taught_by)


def learn_quietly(store: InvoiceStore, invoice_id: UUID | str, taught_by: str) -> Learnt | None:
    """`learn_from_decision` after a person's approval that has committed (what it learns is active
    at once): a failure is logged, never raised."""
    try:
        learnt = learn_from_decision(store, invoice_id, taught_by, approved=True)
        log.info("vendor layout from invoice %s: %s (%s)", invoice_id, learnt.outcome, learnt.detail)
        return learnt
    except Exception:  # the decision stands whatever learning does
        log.exception("learning a vendor layout from invoice %s failed", invoice_id)
        return None


def unlearn_quietly(store: InvoiceStore, invoice_id: UUID | str, actor: str, why: str) -> list[str] | None:
    """After a rejection has committed: the versions the rejected invoice taught are disabled and
    the versions they superseded read again (`store.undo_taught_by`, recorded in
    vendor_layout_events). Since learning happens on approval only, an invoice teaches and is
    rejected only when it taught before this rule (by a correction) or was vouched for; the
    undo is what makes a rejection final either way. A failure is logged, never raised."""
    invoice_id = as_uuid(invoice_id)
    try:
        state = store.documents.invoice_state(invoice_id)
        if state is None:
            return None
        return store.layouts.undo_taught_by(state.org_id, invoice_id, actor, why)
    except Exception:  # the rejection stands whatever undoing does
        log.exception("undoing the vendor layouts invoice %s taught failed", invoice_id)
        return None


# -- export and import (docs/layouts.md) ---------------------------------------------------------


# Layouts one import takes at most (the schema's `maxItems` for `layouts`, checked by a test). An
# import locks each vendor (an advisory lock) until it commits; PostgreSQL's shared lock table
# holds ~6,400 by default (max_locks_per_transaction 64 x max_connections 100), shared by every
# session: 1,000 leaves room for everyone else.
MAX_IMPORT_LAYOUTS = 1000


def export_layouts(store: InvoiceStore, org_id: str, *, include_disabled: bool = False) -> dict[str, Any]:
    rows = store.layouts.list_layouts(org_id, include_disabled=include_disabled)
    return {
        "format": EXPORT_FORMAT,
        "format_version": FORMAT_VERSION,
        "org_id": org_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "layouts": [{"id": r.id, **r.vendor_layout().to_json()} for r in rows],
    }


def parse_export(data: Mapping[str, Any], org_id: str) -> list[VendorLayout]:
    """The layouts of an export, for `org_id` (whatever org they were exported from), once the
    whole document passed `vendor_layouts.schema.json` (ExportRefused, a ValueError, otherwise)."""
    check_export(data)
    return [VendorLayout.from_json(item, org_id=org_id) for item in data["layouts"]]


def import_layouts(store: InvoiceStore, data: Mapping[str, Any], org_id: str, actor: str) -> list[LayoutRow]:
    """Each enabled layout of an export becomes a new version of its vendor's layout in `org_id`:
    all of them or, when the document or the database refuses one, none."""
    parsed = parse_export(data, org_id)
    source = data.get("org_id")
    return store.layouts.import_layouts(
        [layout for layout in parsed if layout.enabled], taught_by=f"import by {actor} (from org {source})"
    )


def describe_rows(rows: Sequence[LayoutRow]) -> list[str]:
    """One line per layout, as `review layouts list` prints them."""
    return [
        f"{r.id:>5}  {r.org_id}  {r.vendor_key}  v{r.version}  "
        f"{(r.state + ' ') if r.enabled else ''}"
        f"{'enabled' if r.enabled else 'disabled: ' + (r.disabled_reason or '')}  "
        f"learnt from {r.learnt_from or '(imported)'} by {r.taught_by} at {r.taught_at:%Y-%m-%d %H:%M}  "
        f"confirmed {r.confirmations}x"
        for r in rows
    ]
