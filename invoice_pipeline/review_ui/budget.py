"""A request budget per client address: a flood or a guessing run from one address cannot starve
everyone else's pages (issue 41).

Each address has a token bucket (`--request-burst` tokens, refilled at `--request-rate` per
second). A request without a token waits on the event loop (no thread, no socket read) up to
MAX_WAIT_SECONDS for one; at most MAX_WAITING_PER_ADDRESS requests wait per address and
MAX_WAITING_TOTAL in all. Beyond that, or when the wait would be longer, the answer is 429 with
Retry-After, before the request reaches the page (no session, no database, no password hash).

The table of addresses is bounded (`--max-client-addresses`, least recently seen forgotten
first, O(1) per request): a flood from many addresses costs a fixed amount of memory. A
forgotten address starts again with a full bucket, so the bound should exceed the number of
addresses that are active within a burst's refill time.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import HTTPConnection
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from invoice_pipeline.review_ui.auth import AuthConfig, client_address

DEFAULT_BURST = 200
DEFAULT_RATE = 50.0
DEFAULT_MAX_ADDRESSES = 20_000
MAX_WAIT_SECONDS = 5.0
MAX_WAITING_PER_ADDRESS = 8
MAX_WAITING_TOTAL = 256
BUSY_ADDRESS = "too many requests from your address: try again later"
TOO_MANY_WAITING = "too many requests from your address are waiting already: try again later"


@dataclass(frozen=True)
class BudgetConfig:
    """How many requests an address may make: `burst` at once, then `rate` per second."""

    burst: int = DEFAULT_BURST
    rate: float = DEFAULT_RATE
    max_addresses: int = DEFAULT_MAX_ADDRESSES
    max_wait_seconds: float = MAX_WAIT_SECONDS
    max_waiting_per_address: int = MAX_WAITING_PER_ADDRESS
    max_waiting_total: int = MAX_WAITING_TOTAL

    def __post_init__(self) -> None:
        if self.burst < 1 or not self.rate > 0 or self.max_addresses < 1:
            raise ValueError("the request burst, rate and address bound must be positive")


@dataclass
class Bucket:
    tokens: float
    stamp: float  # the clock when `tokens` was last brought up to date
    waiting: int = 0


@dataclass(frozen=True)
class Refusal:
    """Why a request was turned away, and when its address may try again."""

    retry_after: int
    message: str


class RequestBudget:
    """The buckets by address, least recently seen first. Used from the event loop only."""

    def __init__(self, config: BudgetConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.waiting = 0
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def __contains__(self, address: str) -> bool:
        return address in self._buckets

    def bucket(self, address: str) -> Bucket:
        """The address's bucket, now the most recently seen; a new one full, the least recently
        seen forgotten beyond the bound."""
        found = self._buckets.get(address)
        if found is not None:
            self._buckets.move_to_end(address)
            return found
        made = Bucket(float(self.config.burst), self.clock())
        self._buckets[address] = made
        while len(self._buckets) > self.config.max_addresses:
            self._buckets.popitem(last=False)
        return made

    def take(self, bucket: Bucket) -> float:
        """Take a token: 0.0 when one was there, else the seconds until one will be (none taken)."""
        now = self.clock()
        bucket.tokens = min(float(self.config.burst), bucket.tokens + (now - bucket.stamp) * self.config.rate)
        bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / self.config.rate

    async def admit(self, address: str) -> Refusal | None:
        """None when the request may go on (at once, or after waiting for a token)."""
        bucket = self.bucket(address)
        wait = self.take(bucket)
        if wait == 0.0:
            return None
        if wait > self.config.max_wait_seconds:
            return Refusal(math.ceil(wait), BUSY_ADDRESS)
        if (
            bucket.waiting >= self.config.max_waiting_per_address
            or self.waiting >= self.config.max_waiting_total
        ):
            return Refusal(math.ceil(wait), TOO_MANY_WAITING)
        return await self._wait(bucket, wait)

    async def _wait(self, bucket: Bucket, wait: float) -> Refusal | None:
        deadline = self.clock() + self.config.max_wait_seconds
        bucket.waiting += 1
        self.waiting += 1
        try:
            while True:
                await asyncio.sleep(wait)
                wait = self.take(bucket)
                if wait == 0.0:
                    return None
                if self.clock() + wait > deadline:
                    return Refusal(math.ceil(wait), BUSY_ADDRESS)
        finally:
            bucket.waiting -= 1
            self.waiting -= 1


class RequestBudgetMiddleware:
    """The outermost layer of the review page: every request spends its address's budget first."""

    def __init__(self, app: ASGIApp, auth: AuthConfig, budget: RequestBudget) -> None:
        self.app = app
        self.auth = auth
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = await self.budget.admit(client_address(self.auth, HTTPConnection(scope)))
            if refused is not None:
                response = PlainTextResponse(
                    refused.message,
                    429,
                    headers={"Retry-After": str(refused.retry_after), "Cache-Control": "no-store"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
