"""The vendor layouts of the reviewer's orgs (`/layouts`), as `invoice-pipeline review layouts` has them.

Listed (the same store read as `review layouts list`), disabled (`store.layouts.disable_layout`,
as `review layouts disable`), exported (`/layouts/export`) and imported (`/layouts/import`) in the
JSON of `review layouts export|import` (`engine.layouts.export_layouts` / `import_layouts`).
See docs/layouts.md.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from invoice_pipeline.documents.reading.layout_export import parse_export_text
from invoice_pipeline.engine.layouts import export_layouts, import_layouts
from invoice_pipeline.engine.reviewers import Reviewer
from invoice_pipeline.engine.store import LayoutRow
from invoice_pipeline.review_ui.auth import audit_name
from invoice_pipeline.review_ui.web import MAX_FORM_BYTES, Ctx, Page, SignedIn, permitted_org, signed_in
from invoice_pipeline.terminal import printable_json

# A layouts export pasted into the import form: its JSON, and the form that carries it (URL
# encoding at most triples a byte, plus room for the other fields).
MAX_IMPORT_BYTES = 2 * 1024 * 1024
MAX_IMPORT_FORM_BYTES = 3 * MAX_IMPORT_BYTES + MAX_FORM_BYTES
# An import refusal quotes the document's own values: at most this much of it is shown.
MAX_PROBLEM_CHARS = 300
# A layout disabled from the page records at most this much of the reason given.
MAX_REASON_CHARS = 500
NO_SUCH_LAYOUT = "no such vendor layout (or not one of your organisations')"


class LayoutsPage(Page):
    def _layout_rows(self, reviewer: Reviewer, include_disabled: bool) -> list[LayoutRow]:
        """The layouts of the reviewer's own orgs (every org's only when the reviewer may see
        every org), through the same store read as `review layouts list`."""
        if reviewer.orgs is None:
            return self.store.layouts.list_layouts(None, include_disabled=include_disabled)
        rows = [
            row
            for org in sorted(set(reviewer.orgs))
            for row in self.store.layouts.list_layouts(org, include_disabled=include_disabled)
        ]
        return [row for row in rows if reviewer.may_see(row.org_id)]

    def _visible_layout(self, reviewer: Reviewer, layout_id: str) -> LayoutRow | None:
        try:
            number = int(layout_id)
        except ValueError:
            return None
        if not 1 <= number < 2**63:
            return None
        row = self.store.layouts.layout_row(number)
        return row if row is not None and reviewer.may_see(row.org_id) else None

    @signed_in()
    def layouts(self, request: Request, who: SignedIn) -> Response:
        return self._layouts_page(who.ctx, who.reviewer, request.query_params.get("all") == "1")

    def _layouts_page(
        self, ctx: Ctx, reviewer: Reviewer, show_all: bool, status: int = 200, import_error: str | None = None
    ) -> Response:
        rows = self._layout_rows(reviewer, show_all)
        items = []
        for row in rows:
            layout = row.vendor_layout()
            items.append(
                {"row": row, "seller": layout.seller_name, "fields": [r.field for r in layout.rules]}
            )
        # Export and import offer the reviewer's own orgs; a reviewer allowed every org is offered
        # those with a layout listed, and names any other in the forms.
        any_org = reviewer.orgs is None
        orgs = sorted({r.org_id for r in rows} if any_org else set(reviewer.orgs or ()))
        return self.web.html(
            "layouts.html",
            ctx,
            status,
            items=items,
            show_all=show_all,
            orgs=orgs,
            any_org=any_org,
            import_error=import_error,
            max_import_mib=MAX_IMPORT_BYTES // (1024 * 1024),
        )

    @signed_in()
    def layouts_export(self, request: Request, who: SignedIn) -> Response:
        org = permitted_org(who.reviewer, request.query_params.get("org"))
        if org is None:
            return self.web.error(who.ctx, 404, "no such organisation (or not one of yours)")
        data = export_layouts(self.store, org, include_disabled=request.query_params.get("all") == "1")
        # The text `review layouts export` writes.
        text = printable_json(data) + "\n"
        disposition = f'attachment; filename="{_export_filename(org)}"'
        response = Response(text, media_type="application/json", headers={"Content-Disposition": disposition})
        return self.web.finish(response, who.ctx)

    # Bytes that are not UTF-8 are kept (as surrogates) so that the import can refuse them on the
    # page instead of reading a changed document.
    @signed_in(form_limit=MAX_IMPORT_FORM_BYTES, form_errors="surrogateescape")
    def layouts_import(self, request: Request, who: SignedIn) -> Response:
        ctx, form = who.ctx, who.form
        org = permitted_org(who.reviewer, form.get("org"))
        if org is None:
            return self.web.error(ctx, 404, "no such organisation (or not one of yours): nothing imported")
        by = audit_name(self.web.auth, who.reviewer)
        try:
            # import_layouts reads the whole document before it stores the first layout, so a
            # refused one imports nothing.
            rows = import_layouts(self.store, _export_document(form.get("layouts_json", "")), org, by)
        except (ValueError, TypeError, KeyError) as exc:
            return self._layouts_page(
                ctx, who.reviewer, False, 400, f"nothing imported: {_import_problem(exc)}"
            )
        ids = ", ".join(str(row.id) for row in rows)
        if rows:
            ctx.flash(
                "done", f"{len(rows)} layout(s) imported into org {org}" + (f": layouts {ids}" if ids else "")
            )
        else:
            ctx.flash("info", f"nothing imported into org {org}: the export holds no enabled layout")
        return self.web.redirect(ctx, "/layouts")

    @signed_in()
    def layout(self, request: Request, who: SignedIn) -> Response:
        row = self._visible_layout(who.reviewer, request.path_params["layout_id"])
        if row is None:
            return self.web.error(who.ctx, 404, NO_SUCH_LAYOUT)
        return self.web.html("layout.html", who.ctx, row=row, layout=row.vendor_layout())

    @signed_in()
    def layout_disable(self, request: Request, who: SignedIn) -> Response:
        ctx = who.ctx
        row = self._visible_layout(who.reviewer, request.path_params["layout_id"])
        if row is None:
            return self.web.error(ctx, 404, NO_SUCH_LAYOUT)
        # Worded as `review layouts disable` words it, with the reviewer as the audit names them.
        given = who.form.get("reason", "").strip()[:MAX_REASON_CHARS]
        reason = f"disabled by {audit_name(self.web.auth, who.reviewer)}" + (f": {given}" if given else "")
        # The store refuses another org's layout too: the org is the layout's, checked above
        # against the reviewer's.
        if self.store.layouts.disable_layout(row.id, reason, row.org_id):
            ctx.flash(
                "done",
                f"layout {row.id} disabled ({reason}); pages of its vendor are read template-free or by another layout",
            )
        else:
            ctx.flash("error", f"layout {row.id} is not enabled: nothing to disable")
        return self.web.redirect(ctx, f"/layouts/{row.id}")


def _export_filename(org: str) -> str:
    """A download name safe in a header and on any file system, whatever the org id holds."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", org).strip("._")[:64]
    return f"layouts-{safe or 'org'}.json"


def _export_document(text: str) -> dict[str, Any]:
    """The pasted export as JSON; ValueError saying why it cannot be one."""
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("the export is not UTF-8 text") from None
    if len(raw) > MAX_IMPORT_BYTES:
        raise ValueError(f"the export is larger than {MAX_IMPORT_BYTES // (1024 * 1024)} MiB")
    if not text.strip():
        raise ValueError("no export was pasted")
    # The command line's parser (guards, then the schema in import_layouts): one check for both.
    return parse_export_text(text)


def _import_problem(exc: Exception) -> str:
    """Why `import_layouts` refused a document, for the person who pasted it."""
    if isinstance(exc, KeyError):
        why = f"a layout or rule lacks the key {exc}"
    elif isinstance(exc, TypeError):
        why = f"not in the export format of docs/layouts.md ({exc})"
    else:
        why = str(exc)
    return why if len(why) <= MAX_PROBLEM_CHARS else why[:MAX_PROBLEM_CHARS] + "…"
