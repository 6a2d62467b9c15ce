"""Who is reviewing: accounts, the trusted reverse-proxy header, sessions, CSRF, and the bind rule.

Three ways to run the review page, safe by default:

* **local** (the default): bound to loopback only, no accounts; the reviewer is the operating
  system user that started the server (`local:<user>` in the audit trail).
* **accounts**: a JSON file of reviewers with scrypt-hashed passwords and, optionally, the orgs
  each one may see (`invoice-pipeline review-ui-user add FILE NAME`). People log in; the audit
  records `review-ui:<name>`.
* **proxy**: a reverse proxy that authenticates people puts the name in a header
  (`--proxy-header X-Remote-User`); it is believed only from the proxy's own addresses
  (`--trusted-proxy`, default 127.0.0.1 and ::1). The audit records `review-ui:proxy:<name>`.

Anything but loopback is refused unless accounts or the proxy header are configured (`check_bind`).
Sessions live in the server's memory (a restart logs everyone out), expire after an idle time
and an absolute lifetime, and each carries a CSRF token every POST must send back.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

# scrypt parameters: N=2**14, r=8, p=1 (about 16 MiB and 50 ms per check on this machine's cores).
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
DEFAULT_IDLE_MINUTES = 30.0
DEFAULT_LIFETIME_HOURS = 12.0
DEFAULT_TRUSTED_PROXIES = ("127.0.0.1", "::1")


class BindRefused(ValueError):
    """The page would be reachable from other machines with nobody logging in."""


class AuthError(ValueError):
    """A users file or an auth setting that cannot be used."""


# -- passwords ------------------------------------------------------------------------------------


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    """'scrypt$N$r$p$salt$hash' (base64), for the users file."""
    if not password:
        raise AuthError("a password cannot be empty")
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=64 * 1024 * 1024
    )
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(
            password.encode("utf-8"),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=64 * 1024 * 1024,
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


@lru_cache(maxsize=1)
def unknown_user_hash() -> str:
    """A hash of nothing anyone knows: an unknown name costs the same time as a wrong password.
    Made when the review page starts (`create_app`), not at import: every command imports this
    module, and a scrypt hash costs 0.1 s."""
    return hash_password(secrets.token_urlsafe(16))


# -- accounts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reviewer:
    name: str
    # The orgs whose invoices this reviewer may see and decide; None: every org.
    orgs: tuple[str, ...] | None = None
    password_hash: str = ""

    def may_see(self, org_id: str) -> bool:
        return self.orgs is None or org_id in self.orgs


def load_users(path: Path) -> dict[str, Reviewer]:
    """The users file: {"alice": {"password": "scrypt$...", "orgs": ["acme"]}, ...}."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AuthError(f"users file {path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise AuthError(f"users file {path} cannot be read: {exc}") from None
    if not isinstance(data, dict):
        raise AuthError(f"users file {path} must hold a JSON object of name -> account")
    users: dict[str, Reviewer] = {}
    for name, account in data.items():
        if not NAME_RE.match(str(name)) or not isinstance(account, dict):
            raise AuthError(f"users file {path}: bad account {name!r}")
        password = account.get("password")
        if not isinstance(password, str) or not password.startswith("scrypt$"):
            raise AuthError(f"users file {path}: {name} has no scrypt password hash")
        orgs = account.get("orgs")
        if orgs is not None and (not isinstance(orgs, list) or not all(isinstance(o, str) for o in orgs)):
            raise AuthError(f"users file {path}: {name}'s orgs must be a list of org ids")
        users[str(name)] = Reviewer(str(name), tuple(orgs) if orgs is not None else None, password)
    if not users:
        raise AuthError(f"users file {path} has no accounts")
    return users


def add_user(path: Path, name: str, password: str, orgs: list[str] | None) -> None:
    """Add (or replace) an account in the users file, created 0600 if missing."""
    if not NAME_RE.match(name):
        raise AuthError("a reviewer name is 1-64 letters, digits, '.', '_', '@' or '-'")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data[name] = {"password": hash_password(password)} | ({"orgs": orgs} if orgs else {})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2)


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

    @property
    def mode(self) -> str:
        if self.proxy_header:
            return "proxy"
        return "accounts" if self.users else "local"

    @property
    def authenticates(self) -> bool:
        return self.mode != "local"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid-{os.getuid()}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, auth: AuthConfig) -> None:
    """Refuse to listen beyond loopback when nobody has to log in."""
    if is_loopback(host) or auth.authenticates:
        return
    raise BindRefused(
        f"refusing to listen on {host}: without authentication anyone who can reach it could approve "
        "payments. Bind to 127.0.0.1 (the default), or configure reviewer accounts (--users FILE, see "
        "`invoice-pipeline review-ui-user add`) or a trusted reverse proxy (--proxy-header NAME)"
    )


# -- sessions and CSRF ---------------------------------------------------------------------------


@dataclass
class Session:
    sid: str
    csrf: str
    created: float
    seen: float
    user: Reviewer | None = None
    flash: list[tuple[str, str]] = field(default_factory=list)


class Sessions:
    """Server-side sessions by an unguessable id; idle and absolute expiry."""

    def __init__(self, idle_seconds: float, lifetime_seconds: float) -> None:
        self.idle = idle_seconds
        self.lifetime = lifetime_seconds
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()

    def new(self, user: Reviewer | None = None) -> Session:
        now = time.monotonic()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now, now, user)
        with self._lock:
            self._expire(now)
            self._by_id[session.sid] = session
        return session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        now = time.monotonic()
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if now - session.seen > self.idle or now - session.created > self.lifetime:
                del self._by_id[sid]
                return None
            session.seen = now
            return session

    def drop(self, sid: str) -> None:
        with self._lock:
            self._by_id.pop(sid, None)

    def _expire(self, now: float) -> None:
        for sid in [
            s for s, v in self._by_id.items() if now - v.seen > self.idle or now - v.created > self.lifetime
        ]:
            del self._by_id[sid]


def csrf_ok(session: Session | None, token: str | None) -> bool:
    return session is not None and bool(token) and hmac.compare_digest(session.csrf, str(token))


def authenticate(auth: AuthConfig, name: str, password: str) -> Reviewer | None:
    users = auth.users or {}
    account = users.get(name)
    if account is None:
        verify_password(password, unknown_user_hash())
        return None
    return account if verify_password(password, account.password_hash) else None


def proxy_user(auth: AuthConfig, client_host: str | None, header_value: str | None) -> Reviewer | None:
    """The reviewer the trusted proxy names; None when the request did not come through it."""
    if not auth.proxy_header or client_host is None or client_host not in auth.trusted_proxies:
        return None
    name = (header_value or "").strip()
    if not NAME_RE.match(name):
        return None
    known = (auth.users or {}).get(name)
    return Reviewer(name, known.orgs if known else None)


def audit_name(auth: AuthConfig, reviewer: Reviewer | None) -> str:
    """What the audit trail records for the person acting."""
    if auth.mode == "local" or reviewer is None:
        return f"review-ui:local:{auth.local_user}"
    if auth.mode == "proxy":
        return f"review-ui:proxy:{reviewer.name}"
    return f"review-ui:{reviewer.name}"
