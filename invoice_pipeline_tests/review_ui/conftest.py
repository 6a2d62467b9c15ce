"""A real review page on a free loopback port (uvicorn in a thread), over the test database."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.applications import Starlette

from invoice_pipeline.engine.reviewers import Reviewer, hash_password
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.review_ui.app import create_app
from invoice_pipeline.review_ui.auth import AuthConfig
from invoice_pipeline.review_ui.web import BROWSER_COOKIE, COOKIE
from pipeline_support.helpers import serve_asgi


@dataclass
class ReviewServer:
    base_url: str
    store: InvoiceStore
    database_url: str


def serve(store: InvoiceStore, auth: AuthConfig, cache: Path) -> Iterator[str]:
    yield from serve_app(create_app(store, auth, cache))


def serve_app(app: Starlette) -> Iterator[str]:
    yield from serve_asgi(app)


@pytest.fixture
def review_server(database_url: str, store: InvoiceStore, tmp_path: Path) -> Iterator[ReviewServer]:
    for url in serve(store, AuthConfig(local_user="tester"), tmp_path / "cache"):
        yield ReviewServer(url, store, database_url)


PASSWORDS = {"alice": "alice-secret-1", "bob": "bob-secret-2"}


@pytest.fixture
def accounts_server(database_url: str, store: InvoiceStore, tmp_path: Path) -> Iterator[ReviewServer]:
    users = {name: Reviewer(name, None, hash_password(pw)) for name, pw in PASSWORDS.items()}
    for url in serve(store, AuthConfig(users=users), tmp_path / "cache"):
        yield ReviewServer(url, store, database_url)


class Client:
    """One browser-like HTTP client with its own cookie jar (its own session)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def has_browser_cookie(self) -> bool:
        """Whether the server gave this client the cookie its CSRF token is bound to (a session's,
        or in local mode the browser's)."""
        return any(c.name in (COOKIE, BROWSER_COOKIE) for c in self.cookies)

    def get(self, path: str) -> tuple[int, str]:
        try:
            with self.opener.open(self.base_url + path, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path: str, form: dict[str, str]) -> tuple[int, str]:
        data = urllib.parse.urlencode(form).encode()
        try:
            with self.opener.open(self.base_url + path, data=data, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def login(self, name: str) -> None:
        _, page = self.get("/login")
        status, _ = self.post(
            "/login", {"csrf": hidden(page, "csrf"), "name": name, "password": PASSWORDS[name]}
        )
        assert status == 200


def hidden(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no hidden {name} in the page"
    return found.group(1)
