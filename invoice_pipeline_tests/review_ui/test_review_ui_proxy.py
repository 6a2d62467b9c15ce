"""The review page behind a reverse proxy, and password guesses sent at once (issues 52, 53).

* The proxy's user header and X-Forwarded-For are believed only from a `--trusted-proxy` peer.
  Every other review-page test connects from 127.0.0.1, a trusted proxy by default, so these
  connect from 127.0.0.2 (another loopback address: the client socket is bound to it) while the
  page trusts only 127.0.0.1.
* X-Forwarded-For is read as one list over all its header lines, from the right: the client is
  the rightmost item that is no trusted proxy.
* A login reserves its throttle slot before its password is hashed: guesses sent at once get no
  more password checks than the same guesses one after another.

Each test talks to a real page over loopback HTTP on the test database.
"""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invoice_pipeline.engine.reviewers import AuthError, Reviewer, hash_password, load_users
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.review_ui.app import ReviewUi, create_app
from invoice_pipeline.review_ui.auth import (
    FREE_FAILURES,
    AuthConfig,
    LoginAttempt,
    LoginThrottle,
    forwarded_client,
)
from invoice_pipeline.review_ui.login import LOGIN_QUEUE, LOGIN_THREADS
from invoice_pipeline_tests.engine.review.helpers import held_invoice
from invoice_pipeline_tests.review_ui.conftest import PASSWORDS, Client, hidden, serve_app

PROXY = "127.0.0.1"  # the test's "reverse proxy": the address the page is reached from normally
OUTSIDER = "127.0.0.2"  # a client that is no trusted proxy
FORGED = "198.51.100.77"
# How many wrong passwords in a row an address may send before it must wait: the free ones,
# and the one that starts the backoff.
CHECKS_BEFORE_BACKOFF = FREE_FAILURES + 1


def running(store: InvoiceStore, auth: AuthConfig, cache: Path) -> Iterator[tuple[str, ReviewUi]]:
    app = create_app(store, auth, cache)
    for url in serve_app(app):
        yield url, app.state.review_ui


class From:
    """A browser-like client whose socket is bound to `source`: the page sees it as the peer.
    Keeps the cookies it is given; sends any header lines asked for, repeated names included."""

    def __init__(self, base_url: str, source: str) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.host, self.port = parsed.hostname or "", parsed.port or 80
        self.source = source
        self.cookies: dict[str, str] = {}

    def request(
        self,
        method: str,
        path: str,
        lines: Sequence[tuple[str, str]] = (),
        form: dict[str, str] | None = None,
    ) -> tuple[int, str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60, source_address=(self.source, 0))
        try:
            conn.putrequest(method, path, skip_host=True)
            conn.putheader("Host", f"127.0.0.1:{self.port}")
            if self.cookies:
                conn.putheader("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
            for name, value in lines:
                conn.putheader(name, value)
            body = urllib.parse.urlencode(form).encode() if form is not None else b""
            if form is not None:
                conn.putheader("Content-Type", "application/x-www-form-urlencoded")
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            for header, value in response.getheaders():
                if header.lower() == "set-cookie":
                    name, _, rest = value.partition("=")
                    self.cookies[name.strip()] = rest.split(";", 1)[0]
            return response.status, response.read().decode()
        finally:
            conn.close()

    def wrong_logins(self, count: int, lines: Sequence[tuple[str, str]] = ()) -> list[int]:
        """`count` logins as a name nobody has (only the address is throttled), their statuses."""
        _, page = self.request("GET", "/login", lines)
        csrf = hidden(page, "csrf")
        form = {"csrf": csrf, "name": "nobody", "password": "guess"}
        return [self.request("POST", "/login", lines, form)[0] for _ in range(count)]


def accounts(**kwargs: Any) -> AuthConfig:
    users = {name: Reviewer(name, None, hash_password(pw)) for name, pw in PASSWORDS.items()}
    return AuthConfig(users=users, **({"trusted_proxies": (PROXY,)} | kwargs))


# -- the peer must be a trusted proxy ----------------------------------------------------------------


def test_the_proxy_user_header_from_a_client_that_is_no_trusted_proxy_signs_nobody_in(
    store: InvoiceStore, tmp_path: Path
) -> None:
    invoice_id = held_invoice(store, "acme", "INV-PROXY1", ["negative_total: payable -50.00 EUR"])
    users_file = tmp_path / "users.json"
    users_file.write_text('{"carol": {"orgs": ["acme"]}}', encoding="utf-8")
    auth = AuthConfig(
        users=load_users(users_file, passwords=False),
        users_file=users_file,
        proxy_header="X-Remote-User",
        trusted_proxies=(PROXY,),
    )
    as_carol = [("X-Remote-User", "carol")]
    for url, _ in running(store, auth, tmp_path / "cache"):
        # Through the proxy: carol is signed in and sees her org's invoice.
        status, page = From(url, PROXY).request("GET", f"/invoice/{invoice_id}", as_carol)
        assert status == 200 and "INV-PROXY1" in page
        # The same header straight from another address: nobody is signed in.
        for path in ("/", f"/invoice/{invoice_id}"):
            status, page = From(url, OUTSIDER).request("GET", path, as_carol)
            assert status == 403, (path, status)
            assert "INV-PROXY1" not in page


def test_forwarded_for_from_a_client_that_is_no_trusted_proxy_is_ignored(
    store: InvoiceStore, tmp_path: Path
) -> None:
    for url, ui in running(store, accounts(forwarded_for=True), tmp_path / "cache"):
        statuses = From(url, OUTSIDER).wrong_logins(CHECKS_BEFORE_BACKOFF + 1, [("X-Forwarded-For", FORGED)])
        assert statuses == [401] * CHECKS_BEFORE_BACKOFF + [429]
        # The failures are the outsider's own address's, not the address it wrote.
        assert ui.login.throttle.wait(None, OUTSIDER) > 0
        assert ui.login.throttle.wait(None, FORGED) == 0


def test_a_trusted_proxys_forwarded_for_lines_name_the_rightmost_untrusted_address(
    store: InvoiceStore, tmp_path: Path
) -> None:
    client, chained_proxy = "198.51.100.20", "10.0.0.5"
    forged_first, forged_second = "203.0.113.66", "198.51.100.1"
    # The client wrote a line of its own; the proxies each appended on a line of their own.
    lines = [
        ("X-Forwarded-For", f"{forged_first}, {forged_second}"),
        ("X-Forwarded-For", f"{client}, {chained_proxy}"),
    ]
    auth = accounts(forwarded_for=True, trusted_proxies=(PROXY, chained_proxy))
    for url, ui in running(store, auth, tmp_path / "cache"):
        statuses = From(url, PROXY).wrong_logins(CHECKS_BEFORE_BACKOFF + 1, lines)
        assert statuses == [401] * CHECKS_BEFORE_BACKOFF + [429]
        assert ui.login.throttle.wait(None, client) > 0
        for other in (forged_first, forged_second, chained_proxy, PROXY):
            assert ui.login.throttle.wait(None, other) == 0, other


def test_forwarded_for_read_from_the_right() -> None:
    auth = AuthConfig(trusted_proxies=("127.0.0.1", "10.0.0.5", "::1"))
    assert forwarded_client(auth, []) is None
    assert forwarded_client(auth, ["192.0.2.9"]) == "192.0.2.9"
    assert forwarded_client(auth, ["192.0.2.1, 192.0.2.9, 10.0.0.5"]) == "192.0.2.9"
    assert forwarded_client(auth, ["192.0.2.1", "192.0.2.9", "10.0.0.5"]) == "192.0.2.9"
    # Every hop a trusted proxy: the leftmost.
    assert forwarded_client(auth, ["10.0.0.5, 127.0.0.1"]) == "10.0.0.5"
    # The hop to believe is no address: none (the peer is used).
    assert forwarded_client(auth, ["192.0.2.1, unknown, 10.0.0.5"]) is None
    # Addresses compared as addresses.
    assert forwarded_client(auth, ["192.0.2.9, 0:0::1"]) == "192.0.2.9"
    with pytest.raises(AuthError, match="not an IP address"):
        AuthConfig(trusted_proxies=("proxy.example.com",))


TRUSTED = ("10.0.0.5", "10.0.0.6", "127.0.0.1")
hop_text = st.one_of(
    st.ip_addresses().map(str),
    st.text(alphabet=st.characters(blacklist_characters=",\r\n"), max_size=20),
)


@given(
    forged=st.lists(hop_text, max_size=5),
    # An IPv4-mapped IPv6 address is its IPv4 one to the page: left out, not to be one of TRUSTED.
    client=st.ip_addresses()
    .filter(lambda a: getattr(a, "ipv4_mapped", None) is None and str(a) not in TRUSTED)
    .map(str),
    proxies=st.lists(st.sampled_from(TRUSTED), max_size=3),
    cuts=st.lists(st.integers(min_value=0, max_value=10), max_size=4),
)
def test_what_a_client_writes_into_forwarded_for_never_chooses_its_address(
    forged: list[str], client: str, proxies: list[str], cuts: list[int]
) -> None:
    """Whatever the client wrote on the left, and however the items are split over header lines,
    the address is the one the trusted proxies appended for it."""
    hops = [*forged, client, *proxies]
    bounds = sorted({0, len(hops), *(min(c, len(hops)) for c in cuts)})
    lines = [", ".join(hops[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]
    auth = AuthConfig(trusted_proxies=TRUSTED)
    assert forwarded_client(auth, lines) == str(ipaddress.ip_address(client))


# -- guesses sent at once --------------------------------------------------------------------------------


class ObservedPool(ThreadPoolExecutor):
    """The login pool, telling the test each time a password check is handed to it."""

    def __init__(self, handed: threading.Condition, count: list[int]) -> None:
        super().__init__(LOGIN_THREADS, thread_name_prefix="review-ui-login")
        self.handed = handed
        self.count = count

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self.handed:
            self.count[0] += 1
            self.handed.notify_all()
        return super().submit(fn, *args, **kwargs)


def test_guesses_sent_at_once_get_no_more_password_checks_than_one_after_another(
    database_url: str, store: InvoiceStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guesses = 12
    assert CHECKS_BEFORE_BACKOFF < guesses <= LOGIN_QUEUE  # well above the limit; none turned away as busy
    real_scrypt = hashlib.scrypt
    hashed = [0]
    release = threading.Event()

    def held_scrypt(*args: Any, **kwargs: Any) -> bytes:
        # No check finishes (so no failure is recorded) until every guess has been either
        # refused or handed to the pool: the guesses really are all in at once.
        with settled:
            hashed[0] += 1
        assert release.wait(60), "the test never released the password checks"
        return real_scrypt(*args, **kwargs)

    settled = threading.Condition()
    handed = [0]
    statuses: list[int] = []
    for url, ui in running(store, accounts(), tmp_path / "cache"):
        original_pool = ui.login.pool
        ui.login.pool = ObservedPool(settled, handed)
        original_pool.shutdown(wait=False)
        clients = [Client(url) for _ in range(guesses)]
        tokens = [hidden(c.get("/login")[1], "csrf") for c in clients]
        monkeypatch.setattr(hashlib, "scrypt", held_scrypt)
        start = threading.Barrier(guesses)

        def guess(client: Client, token: str, i: int, start: threading.Barrier = start) -> None:
            start.wait(30)
            status, _ = client.post("/login", {"csrf": token, "name": "alice", "password": f"guess-{i}"})
            with settled:
                statuses.append(status)
                settled.notify_all()

        threads = [
            threading.Thread(target=guess, args=(c, t, i))
            for i, (c, t) in enumerate(zip(clients, tokens, strict=True))
        ]
        for t in threads:
            t.start()
        try:
            with settled:
                assert settled.wait_for(lambda: len(statuses) + handed[0] == guesses, 60), (
                    f"{len(statuses)} answered and {handed[0]} checking of {guesses} guesses"
                )
        finally:
            release.set()
            for t in threads:
                t.join(60)
        monkeypatch.undo()
        ui.login.pool.shutdown(wait=True)
    assert handed[0] == CHECKS_BEFORE_BACKOFF, f"{handed[0]} password checks for {guesses} guesses at once"
    assert hashed[0] == CHECKS_BEFORE_BACKOFF
    assert sorted(statuses) == [401] * CHECKS_BEFORE_BACKOFF + [429] * (guesses - CHECKS_BEFORE_BACKOFF)


@given(steps=st.lists(st.booleans(), max_size=40))
def test_however_tries_and_failures_interleave_an_address_gets_at_most_the_free_checks_at_once(
    steps: list[bool],
) -> None:
    """With the clock still, each step either starts a try (True) or settles the oldest one under
    way as a wrong password (False): however they interleave, no more tries get a password check
    than one after another would."""
    throttle = LoginThrottle(clock=lambda: 1000.0)
    under_way: list[LoginAttempt] = []
    checked = 0
    for start in steps:
        if start:
            attempt = throttle.reserve("alice", "192.0.2.1")
            if isinstance(attempt, LoginAttempt):
                checked += 1
                under_way.append(attempt)
        elif under_way:
            throttle.failed(under_way.pop(0))
    assert checked <= CHECKS_BEFORE_BACKOFF
