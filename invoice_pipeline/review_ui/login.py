"""Signing in and out (`/login`, `/logout`): accounts mode's passwords, throttled and off the event loop.

In local and proxy mode nobody logs in here (the operating system user, or the proxy, says who
is reviewing): `/login` leads back to the queue.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from invoice_pipeline.engine.reviewers import Reviewer
from invoice_pipeline.review_ui.auth import (
    LOCKOUT_FAILURES,
    LOCKOUT_SECONDS,
    LoginAttempt,
    LoginThrottle,
    authenticate,
    client_address,
    log,
)
from invoice_pipeline.review_ui.web import COOKIE, Ctx, Page, Web
from invoice_pipeline.terminal import printable

# Password checks (scrypt, ~16 MiB and ~50 ms of a core each) run in this many threads, off the
# event loop, leaving at least half the cores to everything else; beyond LOGIN_QUEUE waiting ones
# a login is told to come back (503).
LOGIN_THREADS = max(1, (os.cpu_count() or 2) // 2)
LOGIN_QUEUE = 16
# How much lower than the page's own threads the login threads run (a nice increment).
LOGIN_NICE = 10


class LoginPage(Page):
    def __init__(self, web: Web) -> None:
        super().__init__(web)
        self.throttle = LoginThrottle()
        self.pool = ThreadPoolExecutor(
            LOGIN_THREADS, thread_name_prefix="review-ui-login", initializer=_lower_priority
        )
        # Logins whose password is being checked or waits for a thread of `pool`.
        self.waiting = 0

    async def login(self, request: Request) -> Response:
        got = self.web.context(request)
        if isinstance(got, Response):
            return got
        ctx = got
        if self.web.auth.mode != "accounts":
            return self.web.redirect(ctx, "/")
        if request.method == "POST":
            form = await self.web.checked_form(request, ctx)
            if isinstance(form, Response):
                return form
            return await self._log_in(request, ctx, form.get("name", ""), form.get("password", ""))
        return self.web.html("login.html", ctx, failed=False)

    async def _log_in(self, request: Request, ctx: Ctx, name: str, password: str) -> Response:
        """Throttled per account and address: a slot reserved before any hashing, refused while
        either waits; the password checked in the bounded login pool, never on the event loop."""
        auth, web = self.web.auth, self.web
        address = client_address(auth, request)
        account = name if auth.account(name) is not None else None
        attempt = self.throttle.reserve(account, address)
        if not isinstance(attempt, LoginAttempt):
            response = web.html("login.html", ctx, 429, failed=False, wait=int(attempt) + 1)
            response.headers["Retry-After"] = str(int(attempt) + 1)
            return response
        if self.waiting >= LOGIN_QUEUE:
            self.throttle.released(attempt)
            return web.error(ctx, 503, "too many logins at once: try again in a moment")
        self.waiting += 1
        reviewer: Reviewer | None = None
        try:
            loop = asyncio.get_running_loop()
            reviewer = await loop.run_in_executor(self.pool, authenticate, auth, name, password)
        finally:
            self.waiting -= 1
            # Settled whatever happened: a check that did not finish counts as a failure.
            locked = self.throttle.failed(attempt) if reviewer is None else False
        if reviewer is None:
            if locked and account is not None:
                await self._locked(account, address)
            return web.html("login.html", ctx, 401, failed=True)
        self.throttle.succeeded(attempt)
        # A new session on login: no id from before becomes the logged-in one (fixation).
        web.sessions.drop(ctx.session.sid)
        ctx = Ctx(web.sessions.new(reviewer), reviewer, True, nonce=ctx.nonce, new_nonce=ctx.new_nonce)
        return web.redirect(ctx, "/")

    async def _locked(self, account: str, address: str) -> None:
        """An account just locked: logged, and recorded in `review_login_lockouts`."""
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

    async def logout(self, request: Request) -> Response:
        got = self.web.context(request)
        if isinstance(got, Response):
            return got
        form = await self.web.checked_form(request, got)
        if isinstance(form, Response):
            return form
        if not got.session.transient:
            self.web.sessions.drop(got.session.sid)
        response = RedirectResponse("/login" if self.web.auth.mode == "accounts" else "/", 303)
        response.delete_cookie(COOKIE, path="/")
        return self.web.finish(response, None)


def _lower_priority() -> None:
    """A login thread yields the CPU to the event loop: password checks wait, pages do not.
    (Linux nice values are per thread; elsewhere, or without permission, it stays as it is.)"""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOGIN_NICE)
    except (AttributeError, OSError):
        pass
