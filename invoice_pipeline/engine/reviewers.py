"""Who may review: the users file, its passwords, and which orgs a reviewer may see.

Shared by the review page (which signs people in against it: `review_ui.auth`) and the
Launchpad's review jobs (`orchestration.review_jobs`, which act for a listed reviewer's orgs
only): one file format, one reading of it, one rule for who may see what (`Reviewer.may_see`).

The file: {"alice": {"password": "scrypt$...", "orgs": ["acme"]}, ...}, written by
`invoice-pipeline review-ui-user add` (`add_user`, 0600). Passwords are scrypt-hashed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# scrypt parameters: N=2**14, r=8, p=1 (about 16 MiB and 50 ms per check on this machine's cores).
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


# The reviewers' security log, where operators look for lockouts and users-file trouble (its
# name is the one docs/review-ui.md gives).
log = logging.getLogger("invoice_pipeline.review_ui.security")


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


# -- accounts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reviewer:
    name: str
    # The orgs whose invoices this reviewer may see and decide; None: every org.
    orgs: tuple[str, ...] | None = None
    password_hash: str = ""

    def may_see(self, org_id: str) -> bool:
        return self.orgs is None or org_id in self.orgs


def load_users(path: Path, *, passwords: bool = True) -> dict[str, Reviewer]:
    """The users file: {"alice": {"password": "scrypt$...", "orgs": ["acme"]}, ...}.

    `passwords=False` (proxy mode, where people log in at the proxy): an entry may have no
    password; it then names who may act, and on which orgs. `"orgs": []` is no org at all."""
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
        if password is None and not passwords:
            password = ""
        elif not isinstance(password, str) or not password.startswith("scrypt$"):
            raise AuthError(f"users file {path}: {name} has no scrypt password hash")
        orgs = account.get("orgs")
        if orgs is not None and (
            not isinstance(orgs, list) or not all(isinstance(o, str) and o for o in orgs)
        ):
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


class UsersFile:
    """The users file as it is now: read again when it changes on disk (its size, mtime or
    inode), so that a removed account or revoked org applies to the next request. A file that
    cannot be read then holds nobody (fail closed), and says so in the log."""

    def __init__(self, path: Path, users: dict[str, Reviewer], *, passwords: bool) -> None:
        self.path = path
        self.passwords = passwords
        self._users = users
        self._seen = self._stamp()
        self._lock = threading.Lock()

    def _stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def current(self) -> dict[str, Reviewer]:
        stamp = self._stamp()
        with self._lock:
            if stamp != self._seen:
                self._seen = stamp
                try:
                    self._users = load_users(self.path, passwords=self.passwords)
                except AuthError as exc:
                    log.error("review page: %s; nobody can act until it is fixed", exc)
                    self._users = {}
            return self._users
