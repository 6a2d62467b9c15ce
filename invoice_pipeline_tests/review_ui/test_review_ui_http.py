"""The review page over HTTP: the bind rule, CSRF, sessions, org limits, and two reviewers at once."""

from __future__ import annotations

import threading
from uuid import UUID

import pytest

from invoice_pipeline.cli import main
from invoice_pipeline.engine.reviewers import Reviewer, hash_password, verify_password
from invoice_pipeline.review_ui.auth import AuthConfig, BindRefused, check_bind
from invoice_pipeline_tests.engine.review.helpers import held_invoice, sql
from invoice_pipeline_tests.review_ui.conftest import Client, ReviewServer, hidden


def test_binding_beyond_loopback_without_authentication_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    check_bind("127.0.0.1", AuthConfig())
    check_bind("::1", AuthConfig())
    for host in ("0.0.0.0", "192.168.1.10", "::"):
        with pytest.raises(BindRefused):
            check_bind(host, AuthConfig())
    users = {"a": Reviewer("a", None, hash_password("pw"))}
    named = ("review.example.com",)
    check_bind("0.0.0.0", AuthConfig(users=users, tls=True, allowed_hosts=named))
    check_bind("0.0.0.0", AuthConfig(proxy_header="X-Remote-User", allowed_hosts=named))
    # The command refuses before it touches the database.
    assert main(["review-ui", "--host", "0.0.0.0", "--port", "1"]) == 2
    assert "refusing to listen on 0.0.0.0" in capsys.readouterr().err


def test_accounts_beyond_loopback_need_tls_and_named_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    users = {"a": Reviewer("a", None, hash_password("pw"))}
    named = ("review.example.com",)
    # Passwords in the clear: refused, unless the page or a proxy in front of it speaks HTTPS.
    with pytest.raises(BindRefused, match="without TLS"):
        check_bind("0.0.0.0", AuthConfig(users=users, allowed_hosts=named))
    # Every Host header would be refused: say which names the page is served under.
    with pytest.raises(BindRefused, match="--allowed-host"):
        check_bind("0.0.0.0", AuthConfig(users=users, tls=True))
    # On loopback neither is needed.
    check_bind("127.0.0.1", AuthConfig(users=users))
    # With TLS, cookies are Secure whatever --secure-cookie says.
    assert AuthConfig(users=users, tls=True).secure_cookies
    assert not AuthConfig(users=users).secure_cookies


def test_passwords_are_scrypt_hashes() -> None:
    stored = hash_password("correct horse")
    assert stored.startswith("scrypt$") and "correct" not in stored
    assert verify_password("correct horse", stored) and not verify_password("wrong", stored)


def test_a_forged_post_without_the_token_is_refused(review_server: ReviewServer) -> None:
    """The attacker holds what a browser that loaded the page holds (its browser cookie: local
    mode makes no server session, issue 41) and the invoice's version: the missing token is the
    only thing wrong with its form, so only the CSRF check can refuse it (with `csrf_ok`
    answering yes, the reject was written: fails)."""
    inv = held_invoice(review_server.store, "acme", "INV-F1", ["negative_total: payable -50.00 EUR"])
    attacker = Client(review_server.base_url)
    status, own_page = attacker.get(f"/invoice/{inv}")
    assert status == 200 and attacker.has_browser_cookie()
    status, body = attacker.post(
        f"/invoice/{inv}/action",
        {"action": "reject", "note": "forged", "version": hidden(own_page, "version")},
    )
    assert status == 403 and "CSRF" in body
    # A token from another session does not do either.
    victim = Client(review_server.base_url)
    _, page = victim.get(f"/invoice/{inv}")
    status, _ = attacker.post(
        f"/invoice/{inv}/action",
        {
            "action": "reject",
            "note": "x",
            "csrf": hidden(page, "csrf"),
            "version": hidden(own_page, "version"),
        },
    )
    assert status == 403
    assert sql(review_server.database_url, "SELECT status FROM invoices WHERE id = %s", (inv,)) == [
        ("needs_review",)
    ]
    assert sql(
        review_server.database_url, "SELECT count(*) FROM review_actions WHERE invoice_id = %s", (inv,)
    ) == [(0,)]


def test_pages_escape_html_and_control_characters(review_server: ReviewServer) -> None:
    inv = held_invoice(review_server.store, "acme", "<script>alert(1)</script>\x1b[2J", ["negative_total: x"])
    status, page = Client(review_server.base_url).get(f"/invoice/{inv}")
    assert status == 200
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page and "\x1b" not in page


def test_accounts_log_in_the_audit_names_them_and_orgs_are_limited(accounts_server: ReviewServer) -> None:
    inv = held_invoice(accounts_server.store, "acme", "INV-A1", ["negative_total: payable -50.00 EUR"])
    anonymous = Client(accounts_server.base_url)
    status, page = anonymous.get(f"/invoice/{inv}")
    assert "Log in" in page  # redirected to the login form
    status, _ = anonymous.get(f"/invoice/{inv}/page/1.png")
    assert "Log in" in _
    alice = Client(accounts_server.base_url)
    alice.login("alice")
    _, page = alice.get(f"/invoice/{inv}")
    status, _ = alice.post(
        f"/invoice/{inv}/action",
        {
            "csrf": hidden(page, "csrf"),
            "version": hidden(page, "version"),
            "action": "reject",
            "note": "not ours",
        },
    )
    assert status == 200
    assert sql(
        accounts_server.database_url, "SELECT actor, action FROM review_actions WHERE invoice_id = %s", (inv,)
    ) == [("review-ui:alice", "reject")]


def test_an_action_while_another_holds_the_lock_writes_nothing(review_server: ReviewServer) -> None:
    """Another reviewer holds the invoice's processing lock for the whole POST (taken before it,
    released after it). The reviewer's approve carries the current version, so the version check
    has nothing to refuse: only the lock stands between it and a second writer. It must be
    refused as busy, naming the holder, with nothing written. (With the lock gone: the running-job
    index not unique, no bounce in acquire_processing_lock, the approve was written: fails.)"""
    inv = held_invoice(review_server.store, "acme", "INV-L1", ["negative_total: x"])
    reviewer = Client(review_server.base_url)
    _, page = reviewer.get(f"/invoice/{inv}")
    form = {"csrf": hidden(page, "csrf"), "version": hidden(page, "version"), "action": "approve", "note": ""}
    other = review_server.store.review.take_review_lock(inv, "review-ui:other@elsewhere")
    assert other is not None
    try:
        status, body = reviewer.post(f"/invoice/{inv}/action", form)
    finally:
        review_server.store.claims.finish(other.job_id, "succeeded", "the other reviewer looked and left")
    assert status == 200
    assert "busy: held by" in body and "review-ui:other@elsewhere" in body, body[:2000]
    assert sql(
        review_server.database_url, "SELECT count(*) FROM review_actions WHERE invoice_id = %s", (inv,)
    ) == [(0,)]
    assert sql(review_server.database_url, "SELECT status FROM invoices WHERE id = %s", (inv,)) == [
        ("needs_review",)
    ]


def test_two_reviewers_at_once_make_one_decision_and_the_other_is_told(review_server: ReviewServer) -> None:
    """Two reviewers post different decisions on the same version at the same instant: one
    decision is recorded and the other reviewer sees the invoice as it now is. This is the
    end-to-end outcome, which the version check alone also gives (it passes with the processing
    lock gone); the lock is proved by test_an_action_while_another_holds_the_lock_writes_nothing."""
    for round_ in range(5):
        inv: UUID = held_invoice(review_server.store, "acme", f"INV-R{round_}", ["negative_total: x"])
        a, b = Client(review_server.base_url), Client(review_server.base_url)
        pages = [c.get(f"/invoice/{inv}")[1] for c in (a, b)]
        forms = [
            {"csrf": hidden(p, "csrf"), "version": hidden(p, "version"), "action": act, "note": "r"}
            for p, act in zip(pages, ("approve", "reject"), strict=True)
        ]
        results: list[str] = ["", ""]
        start = threading.Barrier(2)

        def go(
            i: int, client: Client, path: str, form: dict[str, str], start: threading.Barrier, out: list[str]
        ) -> None:
            start.wait()
            out[i] = client.post(path, form)[1]

        threads = [
            threading.Thread(target=go, args=(i, c, f"/invoice/{inv}/action", forms[i], start, results))
            for i, c in enumerate((a, b))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        done = sql(
            review_server.database_url, "SELECT action FROM review_actions WHERE invoice_id = %s", (inv,)
        )
        assert len(done) == 1, done
        told = [r for r in results if "Someone decided this meanwhile" in r]
        assert len(told) == 1, [r[:300] for r in results]
        status = sql(review_server.database_url, "SELECT status FROM invoices WHERE id = %s", (inv,))[0][0]
        assert f'<b id="status">{status}</b>' in told[0]  # the loser sees the invoice as it is now
