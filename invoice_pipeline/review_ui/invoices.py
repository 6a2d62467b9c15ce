"""The review queue and an invoice's page (`/`, `/invoice/{id}`): see, correct, decide.

Every decision goes through the same engine function as the CLI and the Launchpad
(`engine.review.act`, `engine.corrections.correct_invoice`), under the invoice's processing lock,
fenced and audited with the reviewer's name. The page sends back the version of the invoice it
showed; an action whose invoice changed meanwhile is refused under the lock and the page shows
the invoice as it is now ("someone decided this meanwhile").

The document's pages are drawn in the document sandbox (`documents.page_images`), with a box
where each field was read (`FieldSource.box`, PDF points of the upright page, origin top-left),
shown as percentages of the page's size so that they line up at any zoom.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from starlette.requests import Request
from starlette.responses import Response

from invoice_pipeline.documents.page_images import PageRefused, PageRenderer, PageSize
from invoice_pipeline.domain.corrected_invoices import CorrectionChoice
from invoice_pipeline.domain.corrections import CorrectionError, as_text
from invoice_pipeline.domain.doctypes import is_correction
from invoice_pipeline.domain.fields import FIELD_NAMES, InvoiceFields
from invoice_pipeline.domain.review import einvoice_warnings
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import DECIDED_MEANWHILE, REQUEUE_STATUSES, act, parse_age
from invoice_pipeline.engine.review_page_records import QueueFilter, ReviewInvoice
from invoice_pipeline.engine.review_records import Action, ActionOutcome
from invoice_pipeline.engine.reviewers import Reviewer
from invoice_pipeline.review_ui.web import Page, SignedIn, Web, bounded_int, signed_in

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# How long an action waits for another reviewer's (or a run's) lock before it reports "busy".
BUSY_WAIT_SECONDS = 5.0
PAGE_ACTIONS: dict[str, Action] = {
    "approve": "approve",
    "reject": "reject",
    "not_duplicate": "not_duplicate",
    "confirm_duplicate": "confirm_duplicate",
    "requeue": "requeue",
}
# A corrected invoice's two approvals (domain/corrected_invoices.py).
CORRECTION_APPROVALS: dict[str, CorrectionChoice] = {
    "approve_replace": "replace",
    "approve_reverse": "reverse",
}


class InvoicesPage(Page):
    def __init__(self, web: Web, renderer: PageRenderer) -> None:
        super().__init__(web)
        self.renderer = renderer

    def visible(self, reviewer: Reviewer, invoice_id: str) -> ReviewInvoice | None:
        try:
            inv = self.store.review_pages.review_invoice(UUID(invoice_id))
        except ValueError:
            return None
        return inv if inv is not None and reviewer.may_see(inv.org_id) else None

    @signed_in()
    def queue(self, request: Request, who: SignedIn) -> Response:
        q = request.query_params
        problems: list[str] = []
        older_than: timedelta | None = None
        if q.get("age"):
            try:
                older_than = parse_age(q["age"])
            except ValueError as exc:
                problems.append(str(exc))
        reason = q.get("reason") or None
        if reason is not None and not reason.replace("_", "").isalnum():
            problems.append("reason must be a reason code")
            reason = None
        limit = bounded_int(q.get("limit"), PAGE_SIZE, 1, MAX_PAGE_SIZE)
        offset = bounded_int(q.get("offset"), 0, 0, 10**9)
        orgs = who.reviewer.orgs
        flt = QueueFilter(orgs, q.get("org") or None, reason, older_than)
        page = self.store.review_pages.review_queue_page(flt, limit=limit, offset=offset)
        reasons = self.store.review_pages.review_reason_counts(QueueFilter(orgs, flt.org_id))
        org_counts = self.store.review_pages.review_org_counts(orgs)
        base = {k: v for k, v in (("org", flt.org_id), ("reason", reason), ("age", q.get("age"))) if v}

        def link(**changes: Any) -> str:
            params = {**base, "limit": limit, **changes}
            return "/?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})

        return self.web.html(
            "queue.html",
            who.ctx,
            page=page,
            reasons=reasons,
            orgs=org_counts,
            flt=flt,
            age=q.get("age", ""),
            problems=problems,
            link=link,
            prev_link=link(offset=max(0, offset - limit)) if offset > 0 else None,
            next_link=link(offset=offset + limit) if offset + limit < page.total else None,
        )

    @signed_in()
    def invoice(self, request: Request, who: SignedIn) -> Response:
        inv = self.visible(who.reviewer, request.path_params["invoice_id"])
        if inv is None:
            return self.web.error(who.ctx, 404, "no such invoice (or not one of your organisations')")
        original = self.visible(who.reviewer, str(inv.duplicate_of)) if inv.duplicate_of else None
        fields = InvoiceFields.from_json(inv.fields) if inv.fields else None
        theirs = InvoiceFields.from_json(original.fields) if original and original.fields else None
        differs = {
            name
            for name in FIELD_NAMES
            if fields is not None
            and theirs is not None
            and as_text(getattr(fields, name)) != as_text(getattr(theirs, name))
        }
        return self.web.html(
            "invoice.html",
            who.ctx,
            inv=inv,
            rows=field_rows(fields, theirs, differs),
            check=fields.amount_check if fields else None,
            einvoice_warnings=einvoice_warnings(fields) if fields else [],
            page_disagreements=fields.page_disagreements if fields else (),
            pages=self._pages(inv, fields, set(), "field"),
            original=original,
            original_pages=self._pages(original, theirs, differs, "differs") if original else [],
            differs=sorted(differs),
            history=self.store.review_pages.review_page_history(inv.invoice_id),
            jobs=self.store.claims.job_history(inv.invoice_id),
            version=self.store.review_pages.review_version(inv.invoice_id) or "",
            actions=available_actions(inv, fields),
            can_correct=inv.status == "needs_review" and fields is not None,
            field_names=FIELD_NAMES,
            posting=self.store.documents.load_ledger_posting(inv.invoice_id)
            if inv.posted_amount is not None
            else None,
        )

    def _pages(
        self, inv: ReviewInvoice, fields: InvoiceFields | None, marked: set[str], kind: str
    ) -> list[dict[str, Any]]:
        if not inv.sha256:
            return []
        sha = inv.sha256
        sizes = self.renderer.sizes(sha, lambda: self.store.review_pages.document_content(sha))
        boxes: dict[int, list[DrawnBox]] = {n: [] for n in range(1, len(sizes) + 1)}

        def add(label: str, title: str, box_kind: str, page: int | None, box: Any) -> None:
            if page is not None and box is not None and page in boxes:
                boxes[page].append(drawn(label, title, box_kind, box, sizes[page - 1]))

        if fields is not None:
            for name in FIELD_NAMES:
                source = fields.sources.get(name)
                if source is not None:
                    value = as_text(getattr(fields, name))
                    add(
                        name,
                        f"{name}: {value} ({source.source})",
                        kind if name in marked or kind == "field" else "field",
                        source.page,
                        source.box,
                    )
            for d in fields.page_disagreements:
                # Where the page prints a key field differently from the XML (issue 55).
                add(
                    f"page {d.field}",
                    f"the page prints {d.field} {d.page_value}; the XML says {d.xml_value}",
                    "differs",
                    d.page,
                    d.box,
                )
            for c in fields.amount_check.candidates if fields.amount_check else ():
                add(
                    f"{c.role} {c.amount}",
                    f"amount found: {c.role} {c.amount} ({c.source.source})",
                    "candidate",
                    c.source.page,
                    c.source.box,
                )
        return [
            {
                "number": n,
                "size": size,
                "boxes": boxes[n],
                "url": f"/invoice/{inv.invoice_id}/page/{n}.png",
                "refused": self.renderer.refused(sha, n, size),
            }
            for n, size in enumerate(sizes, start=1)
        ]

    @signed_in()
    def page_image(self, request: Request, who: SignedIn) -> Response:
        inv = self.visible(who.reviewer, request.path_params["invoice_id"])
        if inv is None or not inv.sha256:
            return self.web.error(who.ctx, 404, "no such page")
        sha = inv.sha256
        try:
            image = self.renderer.png(
                sha, int(request.path_params["page"]), lambda: self.store.review_pages.document_content(sha)
            )
        except PageRefused as exc:
            return self.web.error(who.ctx, 422, str(exc))
        if image is None:
            return self.web.error(who.ctx, 404, "no such page")
        response = Response(image, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})
        return self.web.finish(response, who.ctx)

    @signed_in()
    def action(self, request: Request, who: SignedIn) -> Response:
        ctx, form = who.ctx, who.form
        inv = self.visible(who.reviewer, request.path_params["invoice_id"])
        if inv is None:
            return self.web.error(ctx, 404, "no such invoice (or not one of your organisations')")
        back = f"/invoice/{inv.invoice_id}"
        actor = self.web.actor(who.reviewer)
        version = form.get("version") or None
        kind = form.get("action", "")
        note = form.get("note") or None
        attempt: Callable[[], ActionOutcome]
        if kind == "correct":
            changes = corrected_fields(form)
            if not changes:
                ctx.flash("info", "nothing to correct: no field was changed")
                return self.web.redirect(ctx, back)

            def attempt() -> ActionOutcome:
                return correct_invoice(
                    self.store, inv.invoice_id, changes, actor, form.get("note"), expect_version=version
                )

        elif kind in CORRECTION_APPROVALS:

            def attempt() -> ActionOutcome:
                choice = CORRECTION_APPROVALS[kind]
                return act(
                    self.store,
                    "approve",
                    inv.invoice_id,
                    actor,
                    note,
                    expect_version=version,
                    correction=choice,
                )

        elif kind in PAGE_ACTIONS:
            if kind == "reject" and not (note or "").strip():
                ctx.flash("error", "a rejection needs a reason")
                return self.web.redirect(ctx, back)

            def attempt() -> ActionOutcome:
                return act(
                    self.store, PAGE_ACTIONS[kind], inv.invoice_id, actor, note, expect_version=version
                )

        else:
            return self.web.error(ctx, 400, "unknown action")
        try:
            outcome = _until_free(attempt)
        except CorrectionError as exc:
            ctx.flash("error", f"not corrected: {exc}")
            return self.web.redirect(ctx, back)
        # Refused because the invoice moved on (another reviewer, or a run) since the page was
        # shown: however the engine put it, the person is told that, and sees the new state.
        moved = (
            not outcome.done
            and version is not None
            and self.store.review_pages.review_version(inv.invoice_id) != version
        )
        ctx.flash(*_flash(outcome, moved))
        return self.web.redirect(ctx, back)


def highlight_css() -> str:
    """/static/fields.css: the box of the field under the cursor, or whose correction input has the
    focus, stands out on the page (without JavaScript: `:has()`, a selector per field name)."""
    selectors = ",\n".join(
        f'.workbench:has(#field-{name}:hover, #field-{name}:focus-within) .box[data-field="{name}"]'
        for name in FIELD_NAMES
    )
    return f"{selectors} {{\n  outline: 3px solid #f29900; outline-offset: 1px; background: #f2990040; z-index: 2;\n}}\n"


def field_rows(
    fields: InvoiceFields | None, theirs: InvoiceFields | None, differs: set[str]
) -> list[dict[str, Any]]:
    """The fields table: each field's value, where it was read, and the suspected original's."""
    return [
        {
            "name": name,
            "value": as_text(getattr(fields, name)) if fields else None,
            "source": fields.sources.get(name) if fields else None,
            "original": as_text(getattr(theirs, name)) if theirs else None,
            "differs": name in differs,
        }
        for name in FIELD_NAMES
    ]


def available_actions(inv: ReviewInvoice, fields: InvoiceFields | None) -> list[str]:
    actions: list[str] = []
    if inv.status == "needs_review":
        # A corrected invoice is approved only as replacing or reversing the invoice it corrects.
        corrects = fields is not None and is_correction(fields)
        actions = [*(CORRECTION_APPROVALS if corrects else ["approve"]), "reject"]
        if inv.duplicate_status == "suspected":
            actions += ["not_duplicate", "confirm_duplicate"]
    if inv.status in REQUEUE_STATUSES:
        actions.append("requeue")
    return actions


def corrected_fields(form: dict[str, str]) -> dict[str, str]:
    """The fields the correction form changes: each `f_<name>` that differs from the `was_<name>`
    the page showed; a payable total confirmed as read counts as a change to itself."""
    changes = {
        name: form[f"f_{name}"].strip()
        for name in FIELD_NAMES
        if f"f_{name}" in form and form[f"f_{name}"].strip() != form.get(f"was_{name}", "").strip()
    }
    if form.get("confirm_payable_total") and "payable_total" not in changes:
        changes["payable_total"] = form.get("was_payable_total", "")
    return changes


def _until_free(attempt: Callable[[], ActionOutcome]) -> ActionOutcome:
    """The action; while another reviewer or a run holds the invoice's lock, again a little later
    (their decision then shows up as "decided meanwhile"), up to BUSY_WAIT_SECONDS."""
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    while True:
        outcome = attempt()
        if outcome.done or not outcome.message.startswith("busy:") or time.monotonic() > deadline:
            return outcome
        time.sleep(0.1)


def _flash(outcome: ActionOutcome, moved: bool) -> tuple[str, str]:
    if outcome.done:
        return "done", f"{outcome.action.replace('_', ' ')}: {outcome.message}"
    if moved or outcome.message == DECIDED_MEANWHILE:
        return "conflict", (
            "Someone decided this meanwhile: your "
            f"{outcome.action.replace('_', ' ')} was not applied. This is the invoice as it is now."
        )
    return "error", f"{outcome.action.replace('_', ' ')} refused: {outcome.message}"


@dataclass(frozen=True)
class DrawnBox:
    """A box on a page, as CSS percentages of the page."""

    label: str
    title: str
    kind: str  # "field", "candidate", "differs"
    left: float
    top: float
    width: float
    height: float


def drawn(
    label: str, title: str, kind: str, box: tuple[float, float, float, float], size: PageSize
) -> DrawnBox:
    x0, top, x1, bottom = box
    pad = 1.5  # points around the words
    left = max(0.0, (min(x0, x1) - pad) / size.width * 100)
    up = max(0.0, (min(top, bottom) - pad) / size.height * 100)
    width = min(100.0 - left, (abs(x1 - x0) + 2 * pad) / size.width * 100)
    height = min(100.0 - up, (abs(bottom - top) + 2 * pad) / size.height * 100)
    return DrawnBox(label, title, kind, round(left, 3), round(up, 3), round(width, 3), round(height, 3))
