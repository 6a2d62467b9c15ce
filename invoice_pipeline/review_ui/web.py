"""The review page's web core: what every page of it shares, as the store's `Database` is to its parts.

- `Ctx`: a request's reviewer and session (a logged-in one, or a transient one signed into
  cookies), made by `Web.context`;
- `Web.checked_form`: a POSTed form, refused (403) unless it carries the session's CSRF token;
- `Web.html` / `Web.finish` / `Web.error`: rendering (Jinja templates, escaped), the security
  headers and the cookies every answer carries;
- `signed_in`: the sign-in requirement, once. A page handler decorated with it runs only for a
  signed-in reviewer (anyone else is sent to /login), gets the request's `SignedIn` (the context,
  the reviewer, and for a POST the CSRF-checked form), and runs in a thread (it reads the
  database);
- `HostCheck`: the middleware that refuses a request whose Host is not one of the page's names.

The pages (`login`, `invoices`, `layouts`, `vendors`) are `Page`s over one `Web`; `app.py` wires
them and holds the routes.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from invoice_pipeline.domain.review import reason_code
from invoice_pipeline.engine.ingest import org_problem
from invoice_pipeline.engine.review import Actor
from invoice_pipeline.engine.reviewers import Reviewer
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.review_ui.auth import (
    AuthConfig,
    BrowserTokens,
    Session,
    Sessions,
    audit_name,
    csrf_ok,
    host_allowed,
    proxy_user,
)
from invoice_pipeline.terminal import printable

HERE = Path(__file__).resolve().parent
COOKIE = "invoice_review_session"
# A browser without a session: a random nonce its CSRF token is signed over, and its flash
# messages (BrowserTokens); no state on the server.
BROWSER_COOKIE = "invoice_review_browser"
FLASH_COOKIE = "invoice_review_flash"
MAX_FORM_BYTES = 64 * 1024
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
class Ctx:
    session: Session
    reviewer: Reviewer | None
    new_cookie: bool  # set the session cookie (a login)
    nonce: str = ""
    new_nonce: bool = False  # the browser came without its nonce cookie: set one
    had_flash_cookie: bool = False
    flash_shown: bool = False

    def flash(self, kind: str, message: str) -> None:
        """A message shown on the next page this browser sees ("done", "info", "error", "conflict")."""
        self.session.flash.append((kind, message))


@dataclass(frozen=True)
class SignedIn:
    """A signed-in reviewer's request, as `signed_in` hands it to a page."""

    ctx: Ctx
    reviewer: Reviewer
    # The POSTed form, its CSRF token checked ({} for a GET).
    form: dict[str, str]


class Web:
    """The store, who may sign in, the sessions, and the templates: one of each for every page."""

    def __init__(self, store: InvoiceStore, auth: AuthConfig) -> None:
        self.store = store
        self.auth = auth
        self.sessions = Sessions(auth.idle_seconds, auth.lifetime_seconds, auth.max_sessions)
        self.tokens = BrowserTokens()
        self.env = Environment(
            loader=FileSystemLoader(str(HERE / "templates")),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["p"] = printable
        self.env.filters["days"] = lambda age: f"{age.total_seconds() / 86400:.1f} d"
        self.env.filters["code"] = reason_code

    # -- answers -------------------------------------------------------------------------------------

    def html(self, template: str, ctx: Ctx, status: int = 200, **values: Any) -> Response:
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

    def redirect(self, ctx: Ctx | None, url: str) -> Response:
        """303 to `url` (after a POST, or to another page)."""
        return self.finish(RedirectResponse(url, 303), ctx)

    def error(self, ctx: Ctx | None, status: int, message: str) -> Response:
        return self.finish(PlainTextResponse(message, status), ctx)

    def _cookie(self, response: Response, name: str, value: str) -> None:
        response.set_cookie(
            name, value, httponly=True, samesite="strict", secure=self.auth.secure_cookies, path="/"
        )

    # -- who is asking -------------------------------------------------------------------------------

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

    async def signed_in_request(self, request: Request, *, limit: int, errors: str) -> SignedIn | Response:
        """The signed-in reviewer's request (for a POST, with its CSRF-checked form); a redirect
        to /login for anyone else, or the refusal."""
        got = self.context(request)
        if isinstance(got, Response):
            return got
        if got.reviewer is None:
            return self.redirect(got, "/login")
        if request.method != "POST":
            return SignedIn(got, got.reviewer, {})
        form = await self.checked_form(request, got, limit=limit, errors=errors)
        if isinstance(form, Response):
            return form
        return SignedIn(got, got.reviewer, form)

    def actor(self, reviewer: Reviewer) -> Actor:
        name = audit_name(self.auth, reviewer)
        # The engine checks the org again: a page bug cannot act beyond the reviewer's orgs.
        return Actor(name, f"{name}@{socket.gethostname()}:{os.getpid()}", reviewer.orgs)


class Page:
    """A part of the review page: its handlers over the shared `Web`."""

    def __init__(self, web: Web) -> None:
        self.web = web
        self.store = web.store


PageT = TypeVar("PageT", bound=Page)
Handler = Callable[[PageT, Request, SignedIn], Response]
Endpoint = Callable[[PageT, Request], Awaitable[Response]]


def signed_in(
    *, form_limit: int = MAX_FORM_BYTES, form_errors: str = "replace"
) -> Callable[[Handler[PageT]], Endpoint[PageT]]:
    """The sign-in requirement: the decorated handler runs only for a signed-in reviewer, in a
    thread (it is a blocking database call), with the request's `SignedIn`; a POST's form is
    read (at most `form_limit` bytes, decoded with `form_errors`) and its CSRF token checked
    first. Anyone else gets the redirect to /login or the refusal, and the handler never runs."""

    def decorate(handler: Handler[PageT]) -> Endpoint[PageT]:
        @functools.wraps(handler)
        async def endpoint(page: PageT, request: Request) -> Response:
            got = await page.web.signed_in_request(request, limit=form_limit, errors=form_errors)
            if isinstance(got, Response):
                return got
            response: Response = await run_in_threadpool(handler, page, request, got)
            return response

        return endpoint

    return decorate


def permitted_org(reviewer: Reviewer, org: str | None) -> str | None:
    """`org` when the reviewer may see it (one of their account's orgs, or any well-formed org id
    for a reviewer allowed every org), else None: a request only ever picks among the reviewer's
    own orgs."""
    if not org or org_problem(org) is not None or not reviewer.may_see(org):
        return None
    return org


def bounded_int(text: str | None, default: int, low: int, high: int) -> int:
    """A query parameter as an int within [low, high]; `default` when missing or not a number."""
    try:
        return max(low, min(high, int(text))) if text else default
    except ValueError:
        return default


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
