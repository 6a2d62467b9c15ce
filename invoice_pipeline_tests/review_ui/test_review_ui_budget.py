"""The review page's request budget per client address (issue 41): one address over its budget
gets 429 while others are served, waiting requests are bounded, the address table is bounded,
and a bucket refills at its rate. Over real HTTP to a real page on the test database, or on the
budget itself with a clock the test moves."""

from __future__ import annotations

import asyncio
import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.review_ui.app import create_app
from invoice_pipeline.review_ui.auth import AuthConfig
from invoice_pipeline.review_ui.budget import (
    BUSY_ADDRESS,
    DEFAULT_MAX_ADDRESSES,
    TOO_MANY_WAITING,
    BudgetConfig,
    RequestBudget,
)
from invoice_pipeline_tests.review_ui.conftest import serve_app
from pipeline_support.helpers import wait_for


def page(store: InvoiceStore, cache: Path, budget: RequestBudget, *, forwarded_for: bool) -> Iterator[str]:
    auth = AuthConfig(local_user="tester", forwarded_for=forwarded_for)
    yield from serve_app(create_app(store, auth, cache, budget=budget))


def get(base_url: str, path: str = "/healthz", forwarded: str | None = None) -> tuple[int, str, str | None]:
    """Status, body and Retry-After of one GET, with this X-Forwarded-For if given."""
    parsed = urllib.parse.urlsplit(base_url)
    conn = http.client.HTTPConnection(parsed.hostname or "", parsed.port, timeout=30)
    headers = {"Host": parsed.netloc} | ({"X-Forwarded-For": forwarded} if forwarded else {})
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read().decode(), response.getheader("Retry-After")
    finally:
        conn.close()


def waiter(url: str, answers: list[tuple[int, str, str | None]]) -> None:
    answers.append(get(url))


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_over_its_budget_gets_429_while_another_is_served(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    # A rate so slow that the next token is further off than a request may wait: refused at once.
    # The budget's clock stands still: the next token is exactly 100 s away.
    budget = RequestBudget(BudgetConfig(burst=3, rate=0.01), clock=Clock())
    for url in page(store, tmp_path / "cache", budget, forwarded_for=True):
        assert [get(url, "/", "203.0.113.7")[0] for _ in range(3)] == [200, 200, 200]
        status, body, retry_after = get(url, "/", "203.0.113.7")
        assert (status, body) == (429, BUSY_ADDRESS)
        assert retry_after == "100"
        # Another client (behind the same trusted proxy) is served; earlier hops are the client's
        # own writing and do not choose the bucket.
        assert get(url, "/", "198.51.100.2")[0] == 200
        assert get(url, "/", "198.51.100.9, 203.0.113.7")[0] == 429
        assert get(url, "/", "203.0.113.7, 198.51.100.3")[0] == 200


def test_without_forwarded_for_a_client_cannot_choose_its_budget(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    budget = RequestBudget(BudgetConfig(burst=2, rate=0.01))
    for url in page(store, tmp_path / "cache", budget, forwarded_for=False):
        statuses = [get(url, "/healthz", f"192.0.2.{i}")[0] for i in range(4)]
        assert statuses == [200, 200, 429, 429]
        assert len(budget) == 1


def test_waiting_requests_are_bounded_the_ninth_refused_at_once(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    # One token, the next in 0.1 s on the budget's clock, which the test holds still: however slow
    # the machine, no token comes while the eight wait (each wakes every 0.1 s, finds none, and
    # waits on), so the ninth meets eight parked.
    clock = Clock()
    budget = RequestBudget(BudgetConfig(burst=1, rate=10.0, max_wait_seconds=0.15), clock=clock)
    for url in page(store, tmp_path / "cache", budget, forwarded_for=False):
        assert get(url)[0] == 200
        answers: list[tuple[int, str, str | None]] = []
        ninth: list[tuple[int, str, str | None]] = []
        waiters = [threading.Thread(target=waiter, args=(url, answers)) for _ in range(8)]
        asking = threading.Thread(target=waiter, args=(url, ninth))
        try:
            for w in waiters:
                w.start()
            wait_for(lambda: budget.waiting == 8, what="eight requests parked in the budget")
            asking.start()
            # Answered, or parked as a ninth waiter (what the bound forbids): either ends the wait.
            wait_for(lambda seen=ninth: bool(seen) or budget.waiting > 8, what="the ninth answered or parked")
            assert budget.waiting == 8, "the ninth request was parked"
            asking.join(30)
            ((status, body, retry_after),) = ninth
            assert (status, body) == (429, TOO_MANY_WAITING)
            assert retry_after is not None and int(retry_after) >= 1
        finally:
            # A second later the bucket holds its burst, one token: the first waiter to wake takes
            # it; for the others the next token would come after their wait's end.
            clock.now += 1.0
            for w in [*waiters, asking]:
                if w.is_alive():
                    w.join(30)
        assert sorted(a[0] for a in answers) == [200] + [429] * 7
        assert budget.waiting == 0


def test_all_waiting_requests_are_bounded_across_addresses() -> None:
    clock = Clock()
    budget = RequestBudget(
        BudgetConfig(burst=1, rate=0.5, max_wait_seconds=3.0, max_waiting_total=3), clock=clock
    )

    async def scenario() -> None:
        for address in ("a", "b", "c", "d"):
            assert await budget.admit(address) is None  # each spends its one token
        parked = [asyncio.ensure_future(budget.admit(address)) for address in ("a", "b", "c")]
        await asyncio.sleep(0)
        assert budget.waiting == 3
        refused = await budget.admit("d")
        assert refused is not None and refused.message == TOO_MANY_WAITING
        for task in parked:
            task.cancel()
        await asyncio.gather(*parked, return_exceptions=True)
        assert budget.waiting == 0

    asyncio.run(scenario())


def test_the_address_table_never_exceeds_its_bound(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    budget = RequestBudget(BudgetConfig(max_addresses=50))
    for url in page(store, tmp_path / "cache", budget, forwarded_for=True):
        for i in range(200):
            assert get(url, "/healthz", f"10.0.{i // 250}.{i % 250 + 1}")[0] == 200
            assert len(budget) <= 50
        assert len(budget) == 50
    # At the default bound, driven directly: the least recently seen go first.
    table = RequestBudget(BudgetConfig())
    for i in range(DEFAULT_MAX_ADDRESSES + 5_000):
        table.bucket(f"addr-{i}")
    assert len(table) == DEFAULT_MAX_ADDRESSES
    assert f"addr-{DEFAULT_MAX_ADDRESSES + 4_999}" in table
    assert "addr-0" not in table


def test_a_spent_burst_refills_at_its_rate_up_to_the_burst() -> None:
    clock = Clock()
    budget = RequestBudget(BudgetConfig(burst=2, rate=4.0), clock=clock)
    bucket = budget.bucket("203.0.113.1")
    assert [budget.take(bucket), budget.take(bucket)] == [0.0, 0.0]
    assert budget.take(bucket) == 0.25
    clock.now += 0.25
    assert budget.take(bucket) == 0.0
    assert budget.take(bucket) == 0.25
    clock.now += 3600  # an hour idle: still no more than the burst
    assert [budget.take(bucket) for _ in range(3)] == [0.0, 0.0, 0.25]

    async def refused_when_the_token_is_too_far() -> None:
        slow = RequestBudget(BudgetConfig(burst=1, rate=0.1), clock=clock)
        assert await slow.admit("x") is None
        refused = await slow.admit("x")
        assert refused is not None and (refused.retry_after, refused.message) == (10, BUSY_ADDRESS)

    asyncio.run(refused_when_the_token_is_too_far())
