"""The review page under attack: DNS rebinding, session floods, password guessing, and org
scoping that must fail closed (issue 41). Each test talks to a real page over loopback HTTP on
the test database."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from invoice_pipeline.cli import main
from invoice_pipeline.documents.page_images import PageRenderer
from invoice_pipeline.documents.sandbox import Sandbox, SandboxLimits
from invoice_pipeline.engine.reviewers import Reviewer, hash_password, load_users
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.review_ui.app import ReviewUi, create_app
from invoice_pipeline.review_ui.auth import (
    LOCKOUT_FAILURES,
    LOCKOUT_SECONDS,
    MAX_BACKOFF_SECONDS,
    AuthConfig,
    Sessions,
)
from invoice_pipeline.review_ui.login import LOGIN_THREADS
from invoice_pipeline_tests.engine.review.helpers import held_invoice, sql
from invoice_pipeline_tests.review_ui.conftest import PASSWORDS, Client, hidden, serve_app


def raw(
    base_url: str, method: str, path: str, headers: dict[str, str], body: str = "", timeout: float = 30
) -> tuple[int, str]:
    """One request with exactly these headers (a browser on a rebound name sends its own Host)."""
    parsed = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=timeout)
    try:
        conn.request(method, path, body=body.encode() or None, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def running(store: InvoiceStore, auth: AuthConfig, cache: Path) -> Iterator[tuple[str, ReviewUi]]:
    app = create_app(store, auth, cache)
    for url in serve_app(app):
        yield url, app.state.review_ui


def write_users(path: Path, accounts: dict[str, dict[str, Any]]) -> None:
    path.write_text(json.dumps(accounts), encoding="utf-8")


# -- the Host check (DNS rebinding) ---------------------------------------------------------------


def test_a_rebound_host_name_is_refused_and_cannot_approve(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    inv = held_invoice(store, "acme", "INV-DNS1", ["negative_total: payable -50.00 EUR"])
    for url, _ in running(store, AuthConfig(local_user="tester"), tmp_path / "cache"):
        port = urllib.parse.urlsplit(url).port
        # Loopback's names are the page's own.
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST"):
            status, _ = raw(url, "GET", "/", {"Host": host})
            assert status == 200, host
        # The attacker's page, its name rebound to 127.0.0.1, cannot read a form ...
        for host in (f"attacker.example:{port}", "attacker.example", "127.0.0.1.attacker.example", ""):
            status, body = raw(url, "GET", f"/invoice/{inv}", {"Host": host})
            assert status == 400, host
            assert "csrf" not in body
        # ... nor post one, even with a real token and cookie taken from the page.
        victim = Client(url)
        _, page = victim.get(f"/invoice/{inv}")
        cookies = "; ".join(f"{c.name}={c.value}" for c in victim.cookies)
        form = urllib.parse.urlencode(
            {"csrf": hidden(page, "csrf"), "version": hidden(page, "version"), "action": "approve"}
        )
        status, _ = raw(
            url,
            "POST",
            f"/invoice/{inv}/action",
            {
                "Host": f"attacker.example:{port}",
                "Cookie": cookies,
                "Content-Type": "application/x-www-form-urlencoded",
            },
            form,
        )
        assert status == 400
    assert sql(database_url, "SELECT status FROM invoices WHERE id = %s", (inv,)) == [("needs_review",)]
    assert sql(database_url, "SELECT count(*) FROM review_actions WHERE invoice_id = %s", (inv,)) == [(0,)]


def test_configured_host_names_are_served(store: InvoiceStore, tmp_path: Path) -> None:
    auth = AuthConfig(local_user="tester", allowed_hosts=("review.example.com",))
    for url, _ in running(store, auth, tmp_path / "cache"):
        assert raw(url, "GET", "/healthz", {"Host": "review.example.com"})[0] == 200
        assert raw(url, "GET", "/healthz", {"Host": "other.example.com"})[0] == 400


# -- sessions: made at login only, bounded, dropped when the account changes ---------------------------


def test_anonymous_requests_leave_no_session_behind(store: InvoiceStore, tmp_path: Path) -> None:
    users = {name: Reviewer(name, None, hash_password(pw)) for name, pw in PASSWORDS.items()}
    for url, ui in running(store, AuthConfig(users=users), tmp_path / "cache"):
        for i in range(300):
            client = Client(url)
            assert "Log in" in client.get("/login" if i % 2 else "/")[1]
        assert len(ui.web.sessions) == 0
        # A login makes one, and only one.
        Client(url).login("alice")
        assert len(ui.web.sessions) == 1
    for url, ui in running(store, AuthConfig(local_user="tester"), tmp_path / "cache2"):
        for _ in range(300):
            assert Client(url).get("/")[0] == 200
        assert len(ui.web.sessions) == 0


def test_sessions_are_bounded_the_least_recently_seen_going_first() -> None:
    sessions = Sessions(idle_seconds=600, lifetime_seconds=3600, max_sessions=3)
    alice = Reviewer("alice", None, "scrypt$x")

    def account(name: str) -> Reviewer | None:
        return alice if name == "alice" else None

    made = [sessions.new(alice) for _ in range(3)]
    assert sessions.get(made[0].sid, account) is made[0]  # seen again: now the most recent
    later = [sessions.new(alice) for _ in range(2)]
    assert len(sessions) == 3
    assert sessions.get(made[1].sid, account) is None and sessions.get(made[2].sid, account) is None
    assert all(sessions.get(s.sid, account) is s for s in (made[0], *later))


def test_a_changed_users_file_ends_the_sessions_it_changed(store: InvoiceStore, tmp_path: Path) -> None:
    inv = held_invoice(store, "acme", "INV-REVOKE", ["negative_total: payable -50.00 EUR"])
    users_file = tmp_path / "users.json"
    accounts = {
        "alice": {"password": hash_password(PASSWORDS["alice"]), "orgs": ["acme"]},
        "bob": {"password": hash_password(PASSWORDS["bob"]), "orgs": ["acme"]},
    }
    write_users(users_file, accounts)
    auth = AuthConfig(users=load_users(users_file), users_file=users_file)
    for url, ui in running(store, auth, tmp_path / "cache"):
        alice, bob = Client(url), Client(url)
        alice.login("alice")
        bob.login("bob")
        assert alice.get(f"/invoice/{inv}")[0] == 200 and bob.get(f"/invoice/{inv}")[0] == 200
        # alice's acme is revoked, bob's entry stays as it was.
        write_users(users_file, {**accounts, "alice": {**accounts["alice"], "orgs": ["globex"]}})
        status, page = alice.get(f"/invoice/{inv}")
        assert "Log in" in page, (status, page[:200])
        assert bob.get(f"/invoice/{inv}")[0] == 200
        assert len(ui.web.sessions) == 1
        # Removed from the file: out at once.
        write_users(users_file, {"alice": accounts["alice"]})
        assert "Log in" in bob.get(f"/invoice/{inv}")[1]
        assert len(ui.web.sessions) == 0


# -- orgs fail closed -------------------------------------------------------------------------------


def test_proxy_names_missing_from_the_users_file_get_403(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    acme = held_invoice(store, "acme", "INV-PX1", ["negative_total: payable -50.00 EUR"])
    globex = held_invoice(store, "globex", "INV-PX2", ["negative_total: payable -50.00 EUR"])
    users_file = tmp_path / "users.json"
    write_users(users_file, {"carol": {"orgs": ["acme"]}})
    auth = AuthConfig(
        users=load_users(users_file, passwords=False), users_file=users_file, proxy_header="X-Remote-User"
    )
    for url, _ in running(store, auth, tmp_path / "cache"):
        port = urllib.parse.urlsplit(url).port
        for path in ("/", f"/invoice/{acme}", f"/invoice/{globex}", "/layouts"):
            status, body = raw(url, "GET", path, {"Host": f"127.0.0.1:{port}", "X-Remote-User": "mallory"})
            assert status == 403, path
            assert "INV-PX" not in body
        as_carol = {"Host": f"127.0.0.1:{port}", "X-Remote-User": "carol"}
        assert raw(url, "GET", f"/invoice/{acme}", as_carol)[0] == 200
        assert raw(url, "GET", f"/invoice/{globex}", as_carol)[0] == 404
    # The command refuses proxy mode without a users file to say who may act on what.
    assert main(["review-ui", "--proxy-header", "X-Remote-User", "--port", "1"]) == 2


def test_an_account_with_no_orgs_sees_no_org(store: InvoiceStore, tmp_path: Path) -> None:
    held_invoice(store, "acme", "INV-NOORG1", ["negative_total: payable -50.00 EUR"])
    held_invoice(store, "globex-secret-org", "INV-NOORG2", ["negative_total: payable -50.00 EUR"])
    users = {"alice": Reviewer("alice", (), hash_password(PASSWORDS["alice"]))}
    for url, _ in running(store, AuthConfig(users=users), tmp_path / "cache"):
        alice = Client(url)
        alice.login("alice")
        status, page = alice.get("/")
        assert status == 200
        assert "globex-secret-org" not in page and "INV-NOORG" not in page
        assert "acme" not in page


# -- login throttling, and scrypt off the event loop -------------------------------------------------------


def test_password_guessing_is_throttled_and_locks_the_account(
    database_url: str, store: InvoiceStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    users = {name: Reviewer(name, None, hash_password(pw)) for name, pw in PASSWORDS.items()}
    caplog.set_level(logging.WARNING, logger="invoice_pipeline.review_ui.security")
    for url, ui in running(store, AuthConfig(users=users), tmp_path / "cache"):
        guesser = Client(url)
        _, page = guesser.get("/login")
        csrf = hidden(page, "csrf")
        statuses = [
            guesser.post("/login", {"csrf": csrf, "name": "alice", "password": f"guess-{i}"})[0]
            for i in range(40)
        ]
        assert statuses[:3] == [401, 401, 401]
        assert 429 in statuses  # backing off: refused without a password check
        # The right password, now, from this address: still refused.
        status, page = guesser.post("/login", {"csrf": csrf, "name": "alice", "password": PASSWORDS["alice"]})
        assert status == 429 and "try again" in page
        assert len(ui.web.sessions) == 0
        # Another name from the same address is throttled too (the address backs off).
        status, _ = guesser.post("/login", {"csrf": csrf, "name": "bob", "password": PASSWORDS["bob"]})
        assert status == 429
        # Enough failures lock the account, and say so in the log. The throttle's clock is moved
        # past each backoff instead of waiting it out.
        now = [time.monotonic()]

        def moved_clock(now: list[float] = now) -> float:
            return now[0]

        ui.login.throttle.clock = moved_clock
        for i in range(LOCKOUT_FAILURES):
            now[0] += MAX_BACKOFF_SECONDS + 1
            status, _ = guesser.post("/login", {"csrf": csrf, "name": "alice", "password": f"again-{i}"})
            assert status == 401
            if any("account alice locked" in r.getMessage() for r in caplog.records):
                break
        else:
            pytest.fail(f"{LOCKOUT_FAILURES} more wrong passwords did not lock the account")
        now[0] += MAX_BACKOFF_SECONDS + 1  # every backoff is over; the lockout is not
        # The right password from another browser, the address's own backoff over: still locked.
        elsewhere = Client(url)
        status, page = elsewhere.post(
            "/login",
            {
                "csrf": hidden(elsewhere.get("/login")[1], "csrf"),
                "name": "alice",
                "password": PASSWORDS["alice"],
            },
        )
        assert status == 429 and len(ui.web.sessions) == 0
        assert ui.login.throttle.wait("alice", "198.51.100.7") > 0  # from any address
        # On the record, beyond the log (sql/0017).
        assert sql(
            database_url,
            "SELECT reviewer, client_address, failures, locked_until - locked_at FROM review_login_lockouts",
        ) == [("alice", "127.0.0.1", LOCKOUT_FAILURES, timedelta(seconds=LOCKOUT_SECONDS))]
        # bob, who did nothing wrong, logs in once this address's backoff is over.
        Client(url).login("bob")
        assert len(ui.web.sessions) == 1


def test_password_checks_run_off_the_event_loop_in_a_bounded_pool(
    store: InvoiceStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = {name: Reviewer(name, None, hash_password(pw)) for name, pw in PASSWORDS.items()}
    real_scrypt = hashlib.scrypt
    inside = threading.Condition()
    state = {"inside": 0, "most": 0}
    release = threading.Event()
    threads: list[str] = []

    def held_scrypt(*args: Any, **kwargs: Any) -> bytes:
        with inside:
            state["inside"] += 1
            state["most"] = max(state["most"], state["inside"])
            threads.append(threading.current_thread().name)
            inside.notify_all()
        release.wait(300)  # a fail-safe far beyond the test's own waits: released by the test
        with inside:
            state["inside"] -= 1
        return real_scrypt(*args, **kwargs)

    for url, ui in running(store, AuthConfig(users=users), tmp_path / "cache"):
        clients = [Client(url) for _ in range(4)]
        tokens = [hidden(c.get("/login")[1], "csrf") for c in clients]
        monkeypatch.setattr(hashlib, "scrypt", held_scrypt)
        results: list[int] = []

        def log_in(client: Client, token: str, results: list[int] = results) -> None:
            results.append(client.post("/login", {"csrf": token, "name": "alice", "password": "wrong"})[0])

        posts = [threading.Thread(target=log_in, args=pair) for pair in zip(clients, tokens, strict=True)]
        for t in posts:
            t.start()
        # Synchronise on the page's own count of logins waiting, and on the pool's threads.
        deadline = time.monotonic() + 20
        with inside:
            while state["inside"] < LOGIN_THREADS:
                assert inside.wait(max(0.0, deadline - time.monotonic())), "no password check started"
        while ui.login.waiting < 4:
            assert time.monotonic() < deadline, "the four logins did not all arrive"
            time.sleep(0.01)
        try:
            # Four password checks held in the pool, none returning until the test releases them:
            # the page still answers. A blocked event loop could not, whatever the machine's speed.
            port = urllib.parse.urlsplit(url).port
            try:
                health = raw(url, "GET", "/healthz", {"Host": f"127.0.0.1:{port}"}, timeout=120)
            except TimeoutError:
                raise AssertionError("/healthz not answered while the password checks were held") from None
            assert health == (200, "ok")
            with inside:
                assert state["inside"] == LOGIN_THREADS, "a password check ended before /healthz answered"
        finally:
            release.set()
            for t in posts:
                t.join(30)
        assert sorted(results) == [401, 401, 401, 401]
        assert state["most"] == LOGIN_THREADS
        assert all(name.startswith("review-ui-login") for name in threads), threads


# -- page images: bounded, in the document sandbox -------------------------------------------------------


def blank_pdf(width_pt: float, height_pt: float) -> bytes:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    doc.new_page(width_pt, height_pt)
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def scan_png(width: int, height: int, dpi: float) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("L", (width, height), 255).save(out, "PNG", dpi=(dpi, dpi))
    return out.getvalue()


def image_of(client: Client, path: str) -> tuple[int, bytes]:
    try:
        with client.opener.open(client.base_url + path, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_huge_pages_are_refused_from_their_size_and_the_refusal_shown(
    store: InvoiceStore, tmp_path: Path
) -> None:
    metres = blank_pdf(3500 / 25.4 * 72, 3500 / 25.4 * 72)  # a 3,500 mm page in ~0.5 KB
    two_dpi = scan_png(1000, 1400, 2.0)  # asks for ~54,000 x 75,600 pixels at 1.5x
    a4 = blank_pdf(595, 842)
    invoices = {
        name: held_invoice(store, "acme", f"INV-PG-{name}", ["negative_total: x"], (content, suffix))
        for name, content, suffix in (("metres", metres, "pdf"), ("scan", two_dpi, "png"), ("a4", a4, "pdf"))
    }
    for url, _ in running(store, AuthConfig(local_user="tester"), tmp_path / "cache"):
        reviewer = Client(url)
        for name in ("metres", "scan"):
            inv = invoices[name]
            status, page = reviewer.get(f"/invoice/{inv}")
            assert status == 200
            assert "page not shown" in page and "40 M pixels" in page, name
            assert f'src="/invoice/{inv}/page/1.png"' not in page
            status, body = reviewer.get(f"/invoice/{inv}/page/1.png")
            assert status == 422 and "40 M pixels" in body, (name, body)
        status, page = reviewer.get(f"/invoice/{invoices['a4']}")
        assert "page not shown" not in page
        status, image = image_of(reviewer, f"/invoice/{invoices['a4']}/page/1.png")
        assert status == 200 and image.startswith(b"\x89PNG")


def test_pages_are_drawn_in_the_sandbox_within_its_memory_bound(store: InvoiceStore, tmp_path: Path) -> None:
    # 6,000 x 6,000 pixels: under the pixel bound, over a 200 MiB worker's memory.
    inv = held_invoice(store, "acme", "INV-PG-MEM", ["negative_total: x"], (blank_pdf(4000, 4000), "pdf"))
    small = PageRenderer(tmp_path / "cache", sandbox=Sandbox(SandboxLimits(memory_mib=200)))
    app = create_app(store, AuthConfig(local_user="tester"), tmp_path / "cache", renderer=small)
    try:
        for url in serve_app(app):
            reviewer = Client(url)
            status, image = image_of(reviewer, f"/invoice/{inv}/page/1.png")
            body = image.decode("utf-8", "replace")
            assert status == 422 and "200 MiB" in body, (status, body[:200])
            # Refused once, then known: the invoice page shows why instead of the image.
            status, page = reviewer.get(f"/invoice/{inv}")
            assert status == 200 and "200 MiB" in page
            assert reviewer.get("/healthz") == (200, "ok")
    finally:
        small.sandbox.close()
