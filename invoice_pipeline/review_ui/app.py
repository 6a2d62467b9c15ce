"""The review page: a small server-rendered Starlette app over the engine's review functions.

An adapter, like the Dagster one: every decision goes through the same engine function as the
CLI and the Launchpad (`engine.review.act`, `engine.corrections.correct_invoice`), under the
invoice's processing lock, fenced and audited with the reviewer's name. The page sends back the
version of the invoice it showed; an action whose invoice changed meanwhile is refused under
the lock and the page shows the invoice as it is now ("someone decided this meanwhile").

The vendor layouts of the reviewer's orgs are listed (`/layouts`, the same store read as
`review layouts list`), can be disabled (`store.disable_layout`, as `review layouts disable`),
exported (`/layouts/export`) and imported (`/layouts/import`) in the JSON of
`review layouts export|import` (`engine.layouts.export_layouts` / `import_layouts`).

No JavaScript: forms and links. Every POST carries the session's CSRF token.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode
from uuid import UUID

from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from invoice_pipeline.documents.reading.layout_export import parse_export_text
from invoice_pipeline.domain.corrected_invoices import CorrectionChoice
from invoice_pipeline.domain.corrections import CorrectionError, as_text
from invoice_pipeline.domain.doctypes import is_correction
from invoice_pipeline.domain.fields import FIELD_NAMES, InvoiceFields
from invoice_pipeline.domain.identity import IDENTIFIER_KINDS
from invoice_pipeline.domain.review import einvoice_warnings, reason_code
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.ingest import org_problem
from invoice_pipeline.engine.layouts import export_layouts, import_layouts
from invoice_pipeline.engine.metrics import exposition, registry_for
from invoice_pipeline.engine.review import DECIDED_MEANWHILE, REQUEUE_STATUSES, Actor, act, parse_age
from invoice_pipeline.engine.review_page_records import QueueFilter, ReviewInvoice
from invoice_pipeline.engine.review_records import Action, ActionOutcome
from invoice_pipeline.engine.store import InvoiceStore, LayoutRow
from invoice_pipeline.review_ui.auth import (
    LOCKOUT_FAILURES,
    LOCKOUT_SECONDS,
    AuthConfig,
    BrowserTokens,
    LoginAttempt,
    LoginThrottle,
    Reviewer,
    Session,
    Sessions,
    audit_name,
    authenticate,
    client_address,
    csrf_ok,
    host_allowed,
    log,
    proxy_user,
    unknown_user_hash,
)
from invoice_pipeline.review_ui.budget import BudgetConfig, RequestBudget, RequestBudgetMiddleware
from invoice_pipeline.review_ui.pages import DrawnBox, PageRefused, PageRenderer, drawn
from invoice_pipeline.terminal import printable, printable_json

HERE = Path(__file__).resolve().parent
COOKIE = "invoice_review_session"
# A browser without a session: a random nonce its CSRF token is signed over, and its flash
# messages (BrowserTokens); no state on the server.
BROWSER_COOKIE = "invoice_review_browser"
FLASH_COOKIE = "invoice_review_flash"
# Password checks (scrypt, ~16 MiB and ~50 ms of a core each) run in this many threads, off the
# event loop, leaving at least half the cores to everything else; beyond LOGIN_QUEUE waiting ones
# a login is told to come back (503).
LOGIN_THREADS = max(1, (os.cpu_count() or 2) // 2)
LOGIN_QUEUE = 16
# How much lower than the page's own threads the login threads run (a nice increment).
LOGIN_NICE = 10
PAGE_SIZE = 50
MAX_FORM_BYTES = 64 * 1024
# A layouts export pasted into the import form: its JSON, and the form that carries it (URL
# encoding at most triples a byte, plus room for the other fields).
MAX_IMPORT_BYTES = 2 * 1024 * 1024
MAX_IMPORT_FORM_BYTES = 3 * MAX_IMPORT_BYTES + MAX_FORM_BYTES
# An import refusal quotes the document's own values: at most this much of it is shown.
MAX_PROBLEM_CHARS = 300
MAX_PAGE_SIZE = 500
# A layout disabled from the page records at most this much of the reason given.
MAX_REASON_CHARS = 500
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
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        # Evidence boxes are positioned by style attributes (percentages of the page): those
        # are allowed, style elements and sheets from elsewhere are not, and scripts never.
        "default-src 'none'; img-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


@dataclass
class ReviewUi:
    store: InvoiceStore
    auth: AuthConfig
    renderer: PageRenderer
    sessions: Sessions = field(init=False)
    tokens: BrowserTokens = field(init=False)
    throttle: LoginThrottle = field(init=False)
    login_pool: ThreadPoolExecutor = field(init=False)
    env: Environment = field(init=False)
    _logins_waiting: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.sessions = Sessions(self.auth.idle_seconds, self.auth.lifetime_seconds, self.auth.max_sessions)
        self.tokens = BrowserTokens()
        self.throttle = LoginThrottle()
        self.login_pool = ThreadPoolExecutor(
            LOGIN_THREADS, thread_name_prefix="review-ui-login", initializer=_lower_priority
        )
        self.env = Environment(
            loader=FileSystemLoader(str(HERE / "templates")),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["p"] = printable
        self.env.filters["days"] = lambda age: f"{age.total_seconds() / 86400:.1f} d"
        self.env.filters["code"] = reason_code

    # -- plumbing ----------------------------------------------------------------------------------

    def html(self, request: Request, template: str, ctx: Ctx, status: int = 200, **values: Any) -> Response:
        flash, ctx.session.flash = ctx.session.flash, []
        ctx.flash_shown = True
        body = self.env.get_template(template).render(
            reviewer=ctx.reviewer,
            who=audit_name(self.auth, ctx.reviewer),
            mode=self.auth.mode,
            csrf=ctx.session.csrf,
            flash=flash,
            **values,
        )
        return self.finish(HTMLResponse(body, status), ctx)

    def finish(self, response: Response, ctx: Ctx | None) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if ctx is None:
            return response
        if ctx.new_cookie:
            self._cookie(response, COOKIE, ctx.session.sid)
        if ctx.new_nonce:
            self._cookie(response, BROWSER_COOKIE, ctx.nonce)
        # A browser without a session keeps its flash messages in a signed cookie.
        if ctx.session.transient and ctx.session.flash:
            self._cookie(response, FLASH_COOKIE, self.tokens.pack_flash(ctx.nonce, ctx.session.flash))
        elif ctx.had_flash_cookie and ctx.flash_shown:
            response.delete_cookie(FLASH_COOKIE, path="/")
        return response

    def _cookie(self, response: Response, name: str, value: str) -> None:
        response.set_cookie(
            name, value, httponly=True, samesite="strict", secure=self.auth.secure_cookies, path="/"
        )

    def error(self, ctx: Ctx | None, status: int, message: str) -> Response:
        return self.finish(PlainTextResponse(message, status), ctx)

    def context(self, request: Request) -> Ctx | Response:
        """The reviewer, and their session: the logged-in one (accounts mode), or else a
        transient one kept in signed cookies (nothing is stored for a request without a login).
        A response when the request may not be served."""
        nonce = request.cookies.get(BROWSER_COOKIE)
        new_nonce = not self.tokens.is_nonce(nonce)
        if nonce is None or new_nonce:
            nonce = self.tokens.new_nonce()
        session = None
        if self.auth.mode == "accounts":
            session = self.sessions.get(request.cookies.get(COOKIE), self.auth.account)
        reviewer: Reviewer | None = session.user if session is not None else None
        if self.auth.mode == "local":
            reviewer = Reviewer(self.auth.local_user)
        elif self.auth.mode == "proxy":
            client = request.client.host if request.client else None
            reviewer = proxy_user(self.auth, client, request.headers.get(self.auth.proxy_header or ""))
        had_flash = FLASH_COOKIE in request.cookies
        if session is None:
            now = time.monotonic()
            who = reviewer.name if reviewer is not None else ""
            flash = self.tokens.unpack_flash(nonce, request.cookies.get(FLASH_COOKIE))
            session = Session("", self.tokens.csrf(nonce, who), now, now, reviewer, flash, transient=True)
        ctx = Ctx(session, reviewer, False, nonce=nonce, new_nonce=new_nonce, had_flash_cookie=had_flash)
        if self.auth.mode == "proxy" and reviewer is None:
            return self.error(
                ctx,
                403,
                "this page is only served through the authenticating proxy, to people its users file lists",
            )
        return ctx

    async def checked_form(
        self, request: Request, ctx: Ctx, *, limit: int = MAX_FORM_BYTES, errors: str = "replace"
    ) -> dict[str, str] | Response:
        """The POSTed form, or 403 when its CSRF token is missing or not this session's.
        `errors` is how bytes that are not UTF-8 are decoded (see `_form`)."""
        values = await _form(request, limit, errors)
        if values is None:
            return self.error(ctx, 413, f"refused: the form is larger than {limit // 1024} KiB")
        token = values.get("csrf") or ""
        # compare_digest raises on non-ASCII text: such a token is simply not this session's.
        # A browser that came without its cookie cannot have a token of it.
        if ctx.new_nonce or not token.isascii() or not csrf_ok(ctx.session, token):
            return self.error(
                ctx,
                403,
                "refused: this form did not come from your review session (missing or stale CSRF "
                "token); reload the page and try again",
            )
        return values

    def actor(self, reviewer: Reviewer) -> Actor:
        name = audit_name(self.auth, reviewer)
        # The engine checks the org again: a page bug cannot act beyond the reviewer's orgs.
        return Actor(name, f"{name}@{socket.gethostname()}:{os.getpid()}", reviewer.orgs)

    def visible(self, reviewer: Reviewer, invoice_id: str) -> ReviewInvoice | None:
        try:
            inv = self.store.review_pages.review_invoice(UUID(invoice_id))
        except ValueError:
            return None
        return inv if inv is not None and reviewer.may_see(inv.org_id) else None

    # -- pages ---------------------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        got = self.context(request)
        if isinstance(got, Response):
            return got
        ctx = got
        if self.auth.mode != "accounts":
            return self.finish(RedirectResponse("/", 303), ctx)
        if request.method == "POST":
            form = await self.checked_form(request, ctx)
            if isinstance(form, Response):
                return form
            return await self._log_in(request, ctx, form.get("name", ""), form.get("password", ""))
        return self.html(request, "login.html", ctx, failed=False)

    async def _log_in(self, request: Request, ctx: Ctx, name: str, password: str) -> Response:
        """Throttled per account and address: a slot reserved before any hashing, refused while
        either waits; the password checked in the bounded login pool, never on the event loop."""
        address = client_address(self.auth, request)
        account = name if self.auth.account(name) is not None else None
        attempt = self.throttle.reserve(account, address)
        if not isinstance(attempt, LoginAttempt):
            response = self.html(request, "login.html", ctx, 429, failed=False, wait=int(attempt) + 1)
            response.headers["Retry-After"] = str(int(attempt) + 1)
            return response
        if self._logins_waiting >= LOGIN_QUEUE:
            self.throttle.released(attempt)
            return self.error(ctx, 503, "too many logins at once: try again in a moment")
        self._logins_waiting += 1
        reviewer: Reviewer | None = None
        try:
            loop = asyncio.get_running_loop()
            reviewer = await loop.run_in_executor(self.login_pool, authenticate, self.auth, name, password)
        finally:
            self._logins_waiting -= 1
            # Settled whatever happened: a check that did not finish counts as a failure.
            locked = self.throttle.failed(attempt) if reviewer is None else False
        if reviewer is None:
            if locked and account is not None:
                log.warning(
                    "review page: account %s locked for %g s after %d wrong passwords (last from %s)",
                    printable(account),
                    LOCKOUT_SECONDS,
                    LOCKOUT_FAILURES,
                    printable(address),
                )
                await run_in_threadpool(
                    self.store.review_pages.record_login_lockout,
                    account,
                    address,
                    LOCKOUT_FAILURES,
                    LOCKOUT_SECONDS,
                )
            return self.html(request, "login.html", ctx, 401, failed=True)
        self.throttle.succeeded(attempt)
        # A new session on login: no id from before becomes the logged-in one (fixation).
        self.sessions.drop(ctx.session.sid)
        ctx = Ctx(self.sessions.new(reviewer), reviewer, True, nonce=ctx.nonce, new_nonce=ctx.new_nonce)
        return self.finish(RedirectResponse("/", 303), ctx)

    async def logout(self, request: Request) -> Response:
        got = self.context(request)
        if isinstance(got, Response):
            return got
        form = await self.checked_form(request, got)
        if isinstance(form, Response):
            return form
        if not got.session.transient:
            self.sessions.drop(got.session.sid)
        response = RedirectResponse("/login" if self.auth.mode == "accounts" else "/", 303)
        response.delete_cookie(COOKIE, path="/")
        return self.finish(response, None)

    def _require(self, request: Request) -> Ctx | Response:
        got = self.context(request)
        if isinstance(got, Response):
            return got
        if got.reviewer is None:
            return self.finish(RedirectResponse("/login", 303), got)
        return got

    def queue(self, request: Request) -> Response:
        got = self._require(request)
        if isinstance(got, Response):
            return got
        ctx = got
        assert ctx.reviewer is not None
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
        limit = _int(q.get("limit"), PAGE_SIZE, 1, MAX_PAGE_SIZE)
        offset = _int(q.get("offset"), 0, 0, 10**9)
        orgs = ctx.reviewer.orgs
        flt = QueueFilter(orgs, q.get("org") or None, reason, older_than)
        page = self.store.review_pages.review_queue_page(flt, limit=limit, offset=offset)
        reasons = self.store.review_pages.review_reason_counts(QueueFilter(orgs, flt.org_id))
        org_counts = self.store.review_pages.review_org_counts(orgs)
        base = {k: v for k, v in (("org", flt.org_id), ("reason", reason), ("age", q.get("age"))) if v}

        def link(**changes: Any) -> str:
            params = {**base, "limit": limit, **changes}
            return "/?" + urlencode({k: v for k, v in params.items() if v not in (None, "")})

        return self.html(
            request,
            "queue.html",
            ctx,
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

    def invoice(self, request: Request) -> Response:
        got = self._require(request)
        if isinstance(got, Response):
            return got
        ctx = got
        assert ctx.reviewer is not None
        inv = self.visible(ctx.reviewer, request.path_params["invoice_id"])
        if inv is None:
            return self.error(ctx, 404, "no such invoice (or not one of your organisations')")
        original = self.visible(ctx.reviewer, str(inv.duplicate_of)) if inv.duplicate_of else None
        fields = InvoiceFields.from_json(inv.fields) if inv.fields else None
        theirs = InvoiceFields.from_json(original.fields) if original and original.fields else None
        differs = {
            name
            for name in FIELD_NAMES
            if fields is not None
            and theirs is not None
            and as_text(getattr(fields, name)) != as_text(getattr(theirs, name))
        }
        rows = [
            {
                "name": name,
                "value": as_text(getattr(fields, name)) if fields else None,
                "source": fields.sources.get(name) if fields else None,
                "original": as_text(getattr(theirs, name)) if theirs else None,
                "differs": name in differs,
            }
            for name in FIELD_NAMES
        ]
        actions = []
        if inv.status == "needs_review":
            # A corrected invoice is approved only as replacing or reversing the invoice it corrects.
            corrects = fields is not None and is_correction(fields)
            actions = [*(CORRECTION_APPROVALS if corrects else ["approve"]), "reject"]
            if inv.duplicate_status == "suspected":
                actions += ["not_duplicate", "confirm_duplicate"]
        if inv.status in REQUEUE_STATUSES:
            actions.append("requeue")
        check = fields.amount_check if fields else None
        return self.html(
            request,
            "invoice.html",
            ctx,
            inv=inv,
            rows=rows,
            check=check,
            einvoice_warnings=einvoice_warnings(fields) if fields else [],
            page_disagreements=fields.page_disagreements if fields else (),
            pages=self._pages(inv, fields, set(), "field"),
            original=original,
            original_pages=self._pages(original, theirs, differs, "differs") if original else [],
            differs=sorted(differs),
            history=self.store.review_pages.review_page_history(inv.invoice_id),
            jobs=self.store.claims.job_history(inv.invoice_id),
            version=self.store.review_pages.review_version(inv.invoice_id) or "",
            actions=actions,
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

    def page_image(self, request: Request) -> Response:
        got = self._require(request)
        if isinstance(got, Response):
            return got
        assert got.reviewer is not None
        inv = self.visible(got.reviewer, request.path_params["invoice_id"])
        if inv is None or not inv.sha256:
            return self.error(got, 404, "no such page")
        sha = inv.sha256
        try:
            image = self.renderer.png(
                sha, int(request.path_params["page"]), lambda: self.store.review_pages.document_content(sha)
            )
        except PageRefused as exc:
            return self.error(got, 422, str(exc))
        if image is None:
            return self.error(got, 404, "no such page")
        response = Response(image, media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})
        return self.finish(response, got)

    async def _form_post(
        self,
        request: Request,
        handle: Callable[[Ctx, dict[str, str]], Response],
        *,
        limit: int = MAX_FORM_BYTES,
        errors: str = "replace",
    ) -> Response:
        """A POST of a signed-in reviewer's form: session and CSRF checked, then `handle` (a
        blocking database call) in a thread."""
        got = self._require(request)
        if isinstance(got, Response):
            return got
        form = await self.checked_form(request, got, limit=limit, errors=errors)
        if isinstance(form, Response):
            return form
        return await _in_thread(handle, got, form)

    async def action(self, request: Request) -> Response:
        invoice_id = request.path_params["invoice_id"]
        return await self._form_post(request, lambda ctx, form: self._action(ctx, invoice_id, form))

    def _action(self, ctx: Ctx, invoice_id: str, form: dict[str, str]) -> Response:
        assert ctx.reviewer is not None
        inv = self.visible(ctx.reviewer, invoice_id)
        if inv is None:
            return self.error(ctx, 404, "no such invoice (or not one of your organisations')")
        back = RedirectResponse(f"/invoice/{inv.invoice_id}", 303)
        actor = self.actor(ctx.reviewer)
        version = form.get("version") or None
        kind = form.get("action", "")
        try:
            if kind == "correct":
                changes = {
                    name: form[f"f_{name}"].strip()
                    for name in FIELD_NAMES
                    if f"f_{name}" in form
                    and form[f"f_{name}"].strip() != form.get(f"was_{name}", "").strip()
                }
                if form.get("confirm_payable_total") and "payable_total" not in changes:
                    changes["payable_total"] = form.get("was_payable_total", "")
                if not changes:
                    ctx.session.flash.append(("info", "nothing to correct: no field was changed"))
                    return self.finish(back, ctx)
                outcome = _until_free(
                    lambda: correct_invoice(
                        self.store, inv.invoice_id, changes, actor, form.get("note"), expect_version=version
                    )
                )
            elif kind in CORRECTION_APPROVALS:
                outcome = _until_free(
                    lambda: act(
                        self.store,
                        "approve",
                        inv.invoice_id,
                        actor,
                        form.get("note") or None,
                        expect_version=version,
                        correction=CORRECTION_APPROVALS[kind],
                    )
                )
            elif kind in PAGE_ACTIONS:
                note = form.get("note") or None
                if kind == "reject" and not (note or "").strip():
                    ctx.session.flash.append(("error", "a rejection needs a reason"))
                    return self.finish(back, ctx)
                outcome = _until_free(
                    lambda: act(
                        self.store, PAGE_ACTIONS[kind], inv.invoice_id, actor, note, expect_version=version
                    )
                )
            else:
                return self.error(ctx, 400, "unknown action")
        except CorrectionError as exc:
            ctx.session.flash.append(("error", f"not corrected: {exc}"))
            return self.finish(back, ctx)
        # Refused because the invoice moved on (another reviewer, or a run) since the page was
        # shown: however the engine put it, the person is told that, and sees the new state.
        moved = (
            not outcome.done
            and version is not None
            and self.store.review_pages.review_version(inv.invoice_id) != version
        )
        ctx.session.flash.append(_flash(outcome, moved))
        return self.finish(back, ctx)

    # -- vendor layouts (docs/layouts.md) ------------------------------------------------------------

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

    @staticmethod
    def _permitted_org(reviewer: Reviewer, org: str | None) -> str | None:
        """`org` when the reviewer may see it (one of their account's orgs, or any well-formed
        org id for a reviewer allowed every org), else None: the request only ever picks among
        the reviewer's own orgs."""
        if not org or org_problem(org) is not None or not reviewer.may_see(org):
            return None
        return org

    def layouts(self, request: Request) -> Response:
        got = self._require(request)
        if isinstance(got, Response):
            return got
        return self._layouts_page(request, got, request.query_params.get("all") == "1")

    def _layouts_page(
        self, request: Request, ctx: Ctx, show_all: bool, status: int = 200, import_error: str | None = None
    ) -> Response:
        assert ctx.reviewer is not None
        rows = self._layout_rows(ctx.reviewer, show_all)
        items = []
        for row in rows:
            layout = row.vendor_layout()
            items.append(
                {"row": row, "seller": layout.seller_name, "fields": [r.field for r in layout.rules]}
            )
        # Export and import offer the reviewer's own orgs; a reviewer allowed every org is offered
        # those with a layout listed, and names any other in the forms.
        any_org = ctx.reviewer.orgs is None
        orgs = sorted({r.org_id for r in rows} if any_org else set(ctx.reviewer.orgs or ()))
        return self.html(
            request,
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

    def layouts_export(self, request: Request) -> Response:
        got = self._require(request)
        if isinstance(got, Response):
            return got
        ctx = got
        assert ctx.reviewer is not None
        org = self._permitted_org(ctx.reviewer, request.query_params.get("org"))
        if org is None:
            return self.error(ctx, 404, "no such organisation (or not one of yours)")
        data = export_layouts(self.store, org, include_disabled=request.query_params.get("all") == "1")
        # The text `review layouts export` writes.
        text = printable_json(data) + "\n"
        disposition = f'attachment; filename="{_export_filename(org)}"'
        response = Response(text, media_type="application/json", headers={"Content-Disposition": disposition})
        return self.finish(response, ctx)

    async def layouts_import(self, request: Request) -> Response:
        # Bytes that are not UTF-8 are kept (as surrogates) so that the import can refuse them
        # on the page instead of reading a changed document.
        return await self._form_post(
            request,
            lambda ctx, form: self._layouts_import(request, ctx, form),
            limit=MAX_IMPORT_FORM_BYTES,
            errors="surrogateescape",
        )

    def _layouts_import(self, request: Request, ctx: Ctx, form: dict[str, str]) -> Response:
        assert ctx.reviewer is not None
        org = self._permitted_org(ctx.reviewer, form.get("org"))
        if org is None:
            return self.error(ctx, 404, "no such organisation (or not one of yours): nothing imported")
        who = audit_name(self.auth, ctx.reviewer)
        try:
            # import_layouts reads the whole document before it stores the first layout, so a
            # refused one imports nothing.
            rows = import_layouts(self.store, _export_document(form.get("layouts_json", "")), org, who)
        except (ValueError, TypeError, KeyError) as exc:
            return self._layouts_page(request, ctx, False, 400, f"nothing imported: {_import_problem(exc)}")
        ids = ", ".join(str(row.id) for row in rows)
        ctx.session.flash.append(
            ("done", f"{len(rows)} layout(s) imported into org {org}" + (f": layouts {ids}" if ids else ""))
            if rows
            else ("info", f"nothing imported into org {org}: the export holds no enabled layout")
        )
        return self.finish(RedirectResponse("/layouts", 303), ctx)

    def layout(self, request: Request) -> Response:
        got = self._require(request)
        if isinstance(got, Response):
            return got
        ctx = got
        assert ctx.reviewer is not None
        row = self._visible_layout(ctx.reviewer, request.path_params["layout_id"])
        if row is None:
            return self.error(ctx, 404, "no such vendor layout (or not one of your organisations')")
        return self.html(request, "layout.html", ctx, row=row, layout=row.vendor_layout())

    async def layout_disable(self, request: Request) -> Response:
        layout_id = request.path_params["layout_id"]
        return await self._form_post(request, lambda ctx, form: self._layout_disable(ctx, layout_id, form))

    def _layout_disable(self, ctx: Ctx, layout_id: str, form: dict[str, str]) -> Response:
        assert ctx.reviewer is not None
        row = self._visible_layout(ctx.reviewer, layout_id)
        if row is None:
            return self.error(ctx, 404, "no such vendor layout (or not one of your organisations')")
        # Worded as `review layouts disable` words it, with the reviewer as the audit names them.
        given = form.get("reason", "").strip()[:MAX_REASON_CHARS]
        reason = f"disabled by {audit_name(self.auth, ctx.reviewer)}" + (f": {given}" if given else "")
        # The store refuses another org's layout too: the org is the layout's, checked above
        # against the reviewer's.
        if self.store.layouts.disable_layout(row.id, reason, row.org_id):
            ctx.session.flash.append(
                (
                    "done",
                    f"layout {row.id} disabled ({reason}); pages of its vendor are read template-free or by another layout",
                )
            )
        else:
            ctx.session.flash.append(("error", f"layout {row.id} is not enabled: nothing to disable"))
        return self.finish(RedirectResponse(f"/layouts/{row.id}", 303), ctx)

    def _vendor_orgs(self, request: Request, reviewer: Reviewer) -> list[str]:
        """The orgs the vendors page shows: the reviewer's own, or for a reviewer allowed every
        org, the one named in `?org=`."""
        if reviewer.orgs is not None:
            return sorted(reviewer.orgs)
        org = self._permitted_org(reviewer, request.query_params.get("org"))
        return [org] if org else []

    def vendors(self, request: Request) -> Response:
        got = self._require(request)
        if isinstance(got, Response):
            return got
        assert got.reviewer is not None
        orgs = self._vendor_orgs(request, got.reviewer)
        profiles = self.store.vendors.org_profiles(orgs)
        return self.html(
            request,
            "vendors.html",
            got,
            orgs=[
                {"org": org, "profile": profiles[org], "vendors": self.store.vendors.list_vendors(org)}
                for org in orgs
            ],
            any_org=got.reviewer.orgs is None,
            kinds=IDENTIFIER_KINDS,
        )

    async def org_profile_add(self, request: Request) -> Response:
        return await self._form_post(request, self._org_profile_add)

    def _org_profile_add(self, ctx: Ctx, form: dict[str, str]) -> Response:
        assert ctx.reviewer is not None
        org = self._permitted_org(ctx.reviewer, form.get("org"))
        if org is None:
            return self.error(ctx, 404, "no such organisation (or not one of yours)")
        kind, value = form.get("kind", ""), form.get("value", "").strip()[:MAX_REASON_CHARS]
        if kind not in IDENTIFIER_KINDS or not value:
            return self.error(ctx, 400, f"give a kind ({', '.join(IDENTIFIER_KINDS)}) and a value")
        try:
            added = self.store.vendors.add_org_identity(
                org,
                kind,
                value,
                source="set on the review page",
                added_by=audit_name(self.auth, ctx.reviewer),
            )
        except ValueError as exc:
            return self.error(ctx, 400, str(exc))
        ctx.session.flash.append(
            (
                "done",
                f"{org}: {kind} {value} "
                + ("added to its profile" if added else "was in its profile already"),
            )
        )
        return self.finish(RedirectResponse("/vendors?" + urlencode({"org": org}), 303), ctx)

    def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name != "review.css":
            return PlainTextResponse("not found", 404)
        return Response(
            (HERE / "static" / name).read_bytes(),
            media_type="text/css",
            headers={"Cache-Control": "max-age=3600"},
        )

    def metrics(self, request: Request) -> Response:
        """Prometheus metrics, the same as `invoice-pipeline metrics` serves (engine/metrics.py):
        totals across organisations, no invoice's data, and no login (a scraper has none)."""
        return Response(exposition(registry_for(self.store)), media_type=CONTENT_TYPE_LATEST)

    def routes(self) -> list[Route]:
        return [
            Route("/", self.queue),
            Route("/login", self.login, methods=["GET", "POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/invoice/{invoice_id}", self.invoice),
            Route("/invoice/{invoice_id}/page/{page:int}.png", self.page_image),
            Route("/invoice/{invoice_id}/action", self.action, methods=["POST"]),
            Route("/layouts", self.layouts),
            Route("/layouts/export", self.layouts_export),
            Route("/layouts/import", self.layouts_import, methods=["POST"]),
            Route("/layouts/{layout_id}", self.layout),
            Route("/layouts/{layout_id}/disable", self.layout_disable, methods=["POST"]),
            Route("/vendors", self.vendors),
            Route("/vendors/profile", self.org_profile_add, methods=["POST"]),
            Route("/static/{name}", self.static),
            Route("/healthz", lambda r: PlainTextResponse("ok")),
            Route("/metrics", self.metrics),
        ]


@dataclass
class Ctx:
    session: Session
    reviewer: Reviewer | None
    new_cookie: bool  # set the session cookie (a login)
    nonce: str = ""
    new_nonce: bool = False  # the browser came without its nonce cookie: set one
    had_flash_cookie: bool = False
    flash_shown: bool = False


class HostCheck:
    """400 for a request whose Host header is not one of the page's names (AuthConfig.host_names):
    a page served under another name that resolves to this server (DNS rebinding) could otherwise
    read its forms and post them as the local reviewer."""

    def __init__(self, app: ASGIApp, auth: AuthConfig) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), None)
            if not host_allowed(self.auth, host):
                response = PlainTextResponse(
                    "refused: this page is not served under that host name", 400, headers=SECURITY_HEADERS
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _form(request: Request, limit: int, errors: str) -> dict[str, str] | None:
    """An urlencoded form (the page sends nothing else); None when it is larger than `limit`.
    Bytes that are not UTF-8 are decoded with `errors` ("replace", or "surrogateescape" for a
    caller that refuses them)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    pairs = parse_qsl(body.decode("utf-8", errors=errors), keep_blank_values=True, errors=errors)
    return dict(pairs)


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


def _int(text: str | None, default: int, low: int, high: int) -> int:
    try:
        return max(low, min(high, int(text))) if text else default
    except ValueError:
        return default


async def _in_thread(fn: Any, *args: Any) -> Response:
    from starlette.concurrency import run_in_threadpool

    result: Response = await run_in_threadpool(fn, *args)
    return result


def _lower_priority() -> None:
    """A login thread yields the CPU to the event loop: password checks wait, pages do not.
    (Linux nice values are per thread; elsewhere, or without permission, it stays as it is.)"""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOGIN_NICE)
    except (AttributeError, OSError):
        pass


def _until_free(attempt: Any) -> ActionOutcome:
    """The action; while another reviewer or a run holds the invoice's lock, again a little later
    (their decision then shows up as "decided meanwhile"), up to BUSY_WAIT_SECONDS."""
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    while True:
        outcome: ActionOutcome = attempt()
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


def create_app(
    store: InvoiceStore,
    auth: AuthConfig,
    cache_dir: Path | None,
    renderer: PageRenderer | None = None,
    budget: RequestBudget | None = None,
) -> Starlette:
    unknown_user_hash()  # before the first login, so that one costs what every other does
    ui = ReviewUi(store, auth, renderer or PageRenderer(cache_dir))
    app = Starlette(routes=ui.routes())
    app.add_middleware(HostCheck, auth=auth)
    # Added last, so outermost: a request over its address's budget costs no Host check, no
    # session and no database read.
    budget = RequestBudget(BudgetConfig()) if budget is None else budget
    app.add_middleware(RequestBudgetMiddleware, auth=auth, budget=budget)
    app.state.review_ui = ui
    app.state.request_budget = budget
    return app
