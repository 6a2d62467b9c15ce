"""Who is reviewing: accounts, the trusted reverse-proxy header, sessions, CSRF, and the bind rule.

Three ways to run the review page, safe by default:

* **local** (the default): bound to loopback only, no accounts; the reviewer is the operating
  system user that started the server (`local:<user>` in the audit trail).
* **accounts**: a JSON file of reviewers with scrypt-hashed passwords and, optionally, the orgs
  each one may see (`invoice-pipeline review-ui-user add FILE NAME`; the file, its reading and
  `Reviewer.may_see` are the engine's, `engine/reviewers.py`, shared with the Launchpad). People
  log in; the audit records `review-ui:<name>`.
* **proxy**: a reverse proxy that authenticates people puts the name in a header
  (`--proxy-header X-Remote-User`); it is believed only from the proxy's own addresses
  (`--trusted-proxy`, default 127.0.0.1 and ::1). The audit records `review-ui:proxy:<name>`.

Anything but loopback is refused unless accounts or the proxy header are configured, and the
host names the page is served under are named (`check_bind`). Every request's Host header must be
one of those names (loopback's in local mode): a page under another name that resolves here (DNS
rebinding) gets 400 (`host_allowed`).

Sessions are made at login only (accounts mode) and live in the server's memory (a restart logs
everyone out): bounded in number, made in O(1), expired after an idle time and an absolute
lifetime, and dropped when the account's entry in the users file changes. A browser without a
session carries no server state: its CSRF token and flash messages are signed into cookies
(`BrowserTokens`). Logins are throttled per account and per client address (`LoginThrottle`).
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from invoice_pipeline.engine.reviewers import (
    NAME_RE,
    AuthError,
    Reviewer,
    UsersFile,
    hash_password,
    verify_password,
)

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

DEFAULT_IDLE_MINUTES = 30.0
DEFAULT_LIFETIME_HOURS = 12.0
DEFAULT_TRUSTED_PROXIES = ("127.0.0.1", "::1")
# The Host names a page on loopback answers to in local mode (and in every mode, besides the
# configured ones): what a browser on this machine sends for http://127.0.0.1:PORT and friends.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# At most this many logged-in sessions; a login beyond it ends the least recently used one.
# A session is ~1 KB: 10,000 cost ~10 MB, whatever anonymous traffic comes.
DEFAULT_MAX_SESSIONS = 10_000

log = logging.getLogger("invoice_pipeline.review_ui.security")


class BindRefused(ValueError):
    """The page would be reachable from other machines with nobody logging in."""


@lru_cache(maxsize=1)
def unknown_user_hash() -> str:
    """A hash of nothing anyone knows: an unknown name costs the same time as a wrong password.
    Made when the review page starts (`create_app`), not at import: every command imports this
    module, and a scrypt hash costs 0.1 s."""
    return hash_password(secrets.token_urlsafe(16))


# -- configuration and the bind rule ------------------------------------------------------------


@dataclass(frozen=True)
class AuthConfig:
    users: dict[str, Reviewer] | None = None
    proxy_header: str | None = None
    trusted_proxies: tuple[str, ...] = DEFAULT_TRUSTED_PROXIES
    idle_seconds: float = DEFAULT_IDLE_MINUTES * 60
    lifetime_seconds: float = DEFAULT_LIFETIME_HOURS * 3600
    # Mark the session cookie Secure (set when served over HTTPS, e.g. behind the proxy).
    secure_cookie: bool = False
    local_user: str = field(default_factory=lambda: _os_user())
    # Where `users` came from: read again when it changes (UsersFile).
    users_file: Path | None = None
    # Host header names the page answers to besides loopback's (`--allowed-host`).
    allowed_hosts: tuple[str, ...] = ()
    max_sessions: int = DEFAULT_MAX_SESSIONS
    # Served over HTTPS: by the page itself (--tls-cert/--tls-key) or by a proxy in front of it
    # (--behind-tls-proxy). Cookies are then Secure.
    tls: bool = False
    # Believe X-Forwarded-For for the client's address when the request comes from a trusted
    # proxy (`--forwarded-for`; see `client_address`); off, the socket's peer is the client.
    forwarded_for: bool = False
    _users_file: UsersFile | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # The proxies are compared as addresses (so '::1' and '0:0::1' are one), and an entry
        # that is no address is refused now rather than silently trusting nobody (or somebody).
        for proxy in self.trusted_proxies:
            if _address(proxy) is None:
                raise AuthError(f"--trusted-proxy {proxy!r} is not an IP address")
        if self.users_file is not None:
            reader = UsersFile(self.users_file, self.users or {}, passwords=self.proxy_header is None)
            object.__setattr__(self, "_users_file", reader)

    @property
    def mode(self) -> str:
        if self.proxy_header:
            return "proxy"
        return "accounts" if self.users else "local"

    @property
    def authenticates(self) -> bool:
        return self.mode != "local"

    def current_users(self) -> dict[str, Reviewer]:
        """The accounts as the users file holds them now."""
        return self._users_file.current() if self._users_file is not None else (self.users or {})

    def account(self, name: str) -> Reviewer | None:
        return self.current_users().get(name)

    @property
    def secure_cookies(self) -> bool:
        return self.secure_cookie or self.tls

    @property
    def host_names(self) -> frozenset[str]:
        return frozenset(h.lower() for h in (*LOOPBACK_HOSTS, *self.allowed_hosts))


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str | None) -> Address | None:
    """`text` as an IP address, an IPv4-mapped IPv6 one as its IPv4 (a dual-stack socket
    reports 127.0.0.1 as ::ffff:127.0.0.1); None when it is no address."""
    try:
        found = ipaddress.ip_address((text or "").strip())
    except ValueError:
        return None
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        return found.ipv4_mapped
    return found


def is_trusted_proxy(auth: AuthConfig, host: str | None) -> bool:
    """Is `host`, the socket's peer, one of the `--trusted-proxy` addresses? Only then are the
    proxy's user header and X-Forwarded-For believed: anyone else can write them too."""
    found = _address(host)
    return found is not None and found in {_address(p) for p in auth.trusted_proxies}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: AuthConfig) -> None:
    """Refuse to listen beyond loopback when nobody has to log in, or when no host name is
    named for the Host check (every request would be refused)."""
    if is_loopback(host):
        return
    if not auth.authenticates:
        raise BindRefused(
            f"refusing to listen on {host}: without authentication anyone who can reach it could approve "
            "payments. Bind to 127.0.0.1 (the default), or configure reviewer accounts (--users FILE, see "
            "`invoice-pipeline review-ui-user add`) or a trusted reverse proxy (--proxy-header NAME)"
        )
    if auth.mode == "accounts" and not auth.tls:
        raise BindRefused(
            f"refusing to listen on {host} in accounts mode without TLS: passwords and session cookies "
            "would cross the network in the clear. Give --tls-cert and --tls-key, or --behind-tls-proxy "
            "when an HTTPS proxy in front of the page terminates TLS"
        )
    if not auth.allowed_hosts:
        raise BindRefused(
            f"refusing to listen on {host} without --allowed-host NAME: the page answers only to the "
            "host names it is given (the name people type, e.g. review.example.com)"
        )


def host_allowed(auth: AuthConfig, host_header: str | None) -> bool:
    """Is the request's Host one of the page's own names? (Port ignored; DNS rebinding sends
    the attacker's name with this server's address.)"""
    if not host_header:
        return False
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:3100
        name, closed, rest = host[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            return False
    else:
        name, _, _ = host.partition(":")
    return name.rstrip(".") in auth.host_names


# -- sessions and CSRF ---------------------------------------------------------------------------


@dataclass
class Session:
    sid: str
    csrf: str
    created: float
    seen: float
    user: Reviewer | None = None
    flash: list[tuple[str, str]] = field(default_factory=list)
    # Not kept by the server: a browser without a login, its token and flash in signed cookies.
    transient: bool = False


class Sessions:
    """Logged-in sessions by an unguessable id; idle and absolute expiry; at most `max_sessions`.

    Kept least recently seen first, so that making one is O(1): the idle-expired ones are at the
    front, and past the bound the front one goes. A session whose account changed in the users
    file (removed, new password, other orgs) is dropped when next seen."""

    def __init__(
        self, idle_seconds: float, lifetime_seconds: float, max_sessions: int = DEFAULT_MAX_SESSIONS
    ) -> None:
        self.idle = idle_seconds
        self.lifetime = lifetime_seconds
        self.max_sessions = max_sessions
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_id)

    def new(self, user: Reviewer) -> Session:
        now = time.monotonic()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now, user)
        with self._lock:
            while self._by_id:
                oldest = next(iter(self._by_id.values()))
                if len(self._by_id) < self.max_sessions and not self._expired(oldest, now):
                    break
                self._by_id.popitem(last=False)
            self._by_id[session.sid] = session
        return session

    def get(self, sid: str | None, account: Callable[[str], Reviewer | None]) -> Session | None:
        """The live session `sid`, if its user's account is still what it was at login."""
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if (
                self._expired(session, now)
                or session.user is None
                or account(session.user.name) != session.user
            ):
                del self._by_id[sid]
                return None
            session.seen = now
            self._by_id.move_to_end(sid)
            return session

    def drop(self, sid: str) -> None:
        with self._lock:
            self._by_id.pop(sid, None)

    def _expired(self, session: Session, now: float) -> bool:
        return now - session.seen > self.idle or now - session.created > self.lifetime


class BrowserTokens:
    """What a browser without a session needs, with no state on the server: a random nonce in a
    cookie, the CSRF token as an HMAC of it (and of who is acting), and flash messages signed
    into a cookie. The key is made at start, so a restart invalidates them like sessions."""

    MAX_FLASH_CHARS = 1500  # a cookie holds ~4 KB

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(24)

    @staticmethod
    def is_nonce(value: str | None) -> bool:
        return bool(value) and len(value or "") == 32 and all(c.isalnum() or c in "-_" for c in value or "")

    def _mac(self, *parts: str) -> str:
        digest = hmac.new(self._key, "\0".join(parts).encode("utf-8"), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def csrf(self, nonce: str, who: str) -> str:
        return self._mac("csrf", nonce, who)

    def pack_flash(self, nonce: str, flash: list[tuple[str, str]]) -> str:
        kept = [(kind, text[: self.MAX_FLASH_CHARS]) for kind, text in flash][-3:]
        body = base64.urlsafe_b64encode(json.dumps(kept).encode("utf-8")).decode()
        return f"{body}.{self._mac('flash', nonce, body)}"

    def unpack_flash(self, nonce: str, value: str | None) -> list[tuple[str, str]]:
        body, _, mac = (value or "").partition(".")
        if not body or not hmac.compare_digest(mac.encode(), self._mac("flash", nonce, body).encode()):
            return []
        try:
            return [(str(kind), str(text)) for kind, text in json.loads(base64.urlsafe_b64decode(body))]
        except (ValueError, TypeError):
            return []


# -- login throttling -------------------------------------------------------------------------------

# Failures allowed before any wait; then each failure doubles the wait, up to MAX_BACKOFF_SECONDS.
FREE_FAILURES = 3
MAX_BACKOFF_SECONDS = 300.0
# This many failures in a row lock an account for LOCKOUT_SECONDS, logged (a person should look).
LOCKOUT_FAILURES = 10
LOCKOUT_SECONDS = 15 * 60.0
# Client addresses remembered at most (least recently failed forgotten first).
MAX_TRACKED_ADDRESSES = 100_000


@dataclass
class _Failures:
    count: int = 0
    until: float = 0.0  # monotonic time before which this key may not try again
    # Attempts let through whose password is being checked now: counted before the (slow on
    # purpose) hash, so that guesses sent at once cannot all pass the check before any failure
    # is recorded.
    pending: int = 0

    def wait(self, now: float) -> float:
        """Seconds before another attempt may start. The attempts under way count as failures
        until they are settled: if, failing, they would start a backoff, the next attempt waits
        for them (and is told the backoff they would set)."""
        wait = self.until - now
        if self.pending and self.count + self.pending > FREE_FAILURES:
            wait = max(wait, _backoff(self.count + self.pending))
        return max(0.0, wait)


def _backoff(failures: int) -> float:
    return min(MAX_BACKOFF_SECONDS, 2.0 ** (failures - FREE_FAILURES - 1))


@dataclass(frozen=True)
class LoginAttempt:
    """A login's reserved slot (`LoginThrottle.reserve`), settled once its password is checked."""

    account: str | None
    address: str


class LoginThrottle:
    """Login failures per account and per client address, with exponential backoff and an
    account lockout. A throttled attempt is refused before its password is hashed, so guessing
    costs the server nothing while it waits. Accounts are tracked only when they exist (bounded
    by the users file); addresses in a bounded LRU.

    An attempt reserves its slot under the lock before its password is hashed (`reserve`), and
    is settled after (`succeeded`, `failed`, or `released` when no password was checked): many
    guesses sent at once get no more password checks than the same guesses one after another."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._accounts: dict[str, _Failures] = {}
        self._addresses: OrderedDict[str, _Failures] = OrderedDict()
        self._lock = threading.Lock()

    def wait(self, account: str | None, address: str) -> float:
        """Seconds until this account and address may try again (0: now)."""
        now = self.clock()
        with self._lock:
            return self._wait(account, address, now)

    def _wait(self, account: str | None, address: str, now: float) -> float:
        found = [self._accounts.get(account) if account else None, self._addresses.get(address)]
        return max([0.0, *(f.wait(now) for f in found if f is not None)])

    def reserve(self, account: str | None, address: str) -> LoginAttempt | float:
        """A slot for one password check, or the seconds to wait: the check and the count in
        one step under the lock, so that no other attempt passes the check in between."""
        now = self.clock()
        with self._lock:
            wait = self._wait(account, address, now)
            if wait > 0:
                return wait
            self._address(address).pending += 1
            if account is not None:
                self._accounts.setdefault(account, _Failures()).pending += 1
            return LoginAttempt(account, address)

    def failed(self, attempt: LoginAttempt) -> bool:
        """Settle a wrong password: a failure; True when it locked the account."""
        now = self.clock()
        with self._lock:
            entry = self._address(attempt.address)
            entry.pending = max(0, entry.pending - 1)
            self._count(entry, now)
            if attempt.account is None:
                return False
            acc = self._accounts.setdefault(attempt.account, _Failures())
            acc.pending = max(0, acc.pending - 1)
            self._count(acc, now)
            if acc.count >= LOCKOUT_FAILURES:
                acc.until = max(acc.until, now + LOCKOUT_SECONDS)
                acc.count = 0
                return True
            return False

    def succeeded(self, attempt: LoginAttempt) -> None:
        """Settle a right password: the account's and the address's failures are forgotten
        (attempts still under way there stay pending)."""
        with self._lock:
            self._settle(attempt, forget=True)

    def released(self, attempt: LoginAttempt) -> None:
        """Settle an attempt whose password was never checked (the page was too busy)."""
        with self._lock:
            self._settle(attempt, forget=False)

    def _settle(self, attempt: LoginAttempt, *, forget: bool) -> None:
        tables: list[tuple[dict[str, _Failures], str | None]] = [
            (self._accounts, attempt.account),
            (self._addresses, attempt.address),
        ]
        for table, key in tables:
            entry = table.get(key) if key is not None else None
            if key is None or entry is None:
                continue
            entry.pending = max(0, entry.pending - 1)
            if forget:
                entry.count, entry.until = 0, 0.0
            if not entry.pending and not entry.count and entry.until <= 0:
                del table[key]

    def _address(self, address: str) -> _Failures:
        """The address's entry (made if new) as the most recently seen; the least recently seen
        beyond the bound are forgotten. Called under the lock."""
        entry = self._addresses.pop(address, None) or _Failures()
        self._addresses[address] = entry
        while len(self._addresses) > MAX_TRACKED_ADDRESSES:
            self._addresses.popitem(last=False)
        return entry

    @staticmethod
    def _count(entry: _Failures, now: float) -> None:
        entry.count += 1
        if entry.count > FREE_FAILURES:
            entry.until = max(entry.until, now + _backoff(entry.count))


def csrf_ok(session: Session | None, token: str | None) -> bool:
    return session is not None and bool(token) and hmac.compare_digest(session.csrf, str(token))


def authenticate(auth: AuthConfig, name: str, password: str) -> Reviewer | None:
    """The account, when the password is its own. Costs one scrypt: run it off the event loop."""
    account = auth.account(name)
    if account is None or not account.password_hash:
        verify_password(password, unknown_user_hash())
        return None
    return account if verify_password(password, account.password_hash) else None


def client_address(auth: AuthConfig, connection: HTTPConnection) -> str:
    """The address a request comes from, for budgets and throttles: the socket's peer; with
    `forwarded_for`, and only when that peer is a trusted proxy, the one X-Forwarded-For names
    (`forwarded_client`)."""
    peer = connection.client.host if connection.client else "unknown"
    if not auth.forwarded_for or not is_trusted_proxy(auth, peer):
        return peer
    return forwarded_client(auth, connection.headers.getlist("x-forwarded-for")) or peer


def forwarded_client(auth: AuthConfig, lines: list[str]) -> str | None:
    """The client's address from X-Forwarded-For `lines` that a trusted proxy passed on.

    All the header's lines are one list, in order (HTTP allows a header to be split over lines,
    and a proxy may add its own line after the client's). Each proxy appends the address it got
    the request from, so the items are believable only from the right: walk from the rightmost,
    skipping our trusted proxies; the first other item is what the outermost trusted proxy saw,
    the client. Everything left of it is whatever the client wrote. All trusted: the leftmost.
    None (use the peer) when the header is missing, or the item found is no address: a proxy
    writes addresses, so that is not a hop we can believe."""
    items = [item.strip() for line in lines for item in line.split(",")]
    if not items:
        return None
    for item in reversed(items):
        if not is_trusted_proxy(auth, item):
            found = _address(item)
            return str(found) if found is not None else None
    found = _address(items[0])
    return str(found) if found is not None else None


def proxy_user(auth: AuthConfig, client_host: str | None, header_value: str | None) -> Reviewer | None:
    """The reviewer the trusted proxy names, as the users file lists them; None when the request
    did not come through the proxy (its socket's peer is no trusted proxy) or names nobody the
    users file knows (fail closed: a name missing from the file acts on no org, not on every org)."""
    if not auth.proxy_header or not is_trusted_proxy(auth, client_host):
        return None
    name = (header_value or "").strip()
    if not NAME_RE.match(name):
        return None
    known = auth.account(name)
    return Reviewer(name, known.orgs) if known is not None else None


def audit_name(auth: AuthConfig, reviewer: Reviewer | None) -> str:
    """What the audit trail records for the person acting."""
    if auth.mode == "local" or reviewer is None:
        return f"review-ui:local:{auth.local_user}"
    if auth.mode == "proxy":
        return f"review-ui:proxy:{reviewer.name}"
    return f"review-ui:{reviewer.name}"
