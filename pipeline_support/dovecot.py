"""A private Dovecot IMAP server for the mail intake's tests (issue 56): its own config, user and
Maildir under a fresh folder, listening on a free loopback port, plain IMAP (loopback only).

Traps it avoids (shared/NOTES.md): a passwd-file user with uid 0 is refused, so the mail user is
65534 (nobody) and owns its Maildir; `dovecot` daemonises but keeps the caller's stdout open, so
it starts with its standard streams on /dev/null; the folder lives outside pytest's 0700 tmp
folders, because the mail user must be able to reach it. Messages are placed straight into
Maildir/new/ (written in tmp/, renamed: the Maildir delivery protocol).
"""

from __future__ import annotations

import imaplib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline_support.helpers import free_port

MAIL_UID = 65534
START_TIMEOUT_S = 60.0
DOVECOT = "/usr/sbin/dovecot"
DOVEADM = "/usr/bin/doveadm"

CONFIG = """\
protocols = imap
listen = 127.0.0.1
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
{ssl}
disable_plaintext_auth = no
auth_mechanisms = plain login
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {root}/passwd
}}
mail_location = maildir:~/Maildir
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap_port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {imaps_port}
  }}
}}
service anvil {{
  chroot =
}}
"""


def unavailable_reason() -> str | None:
    """None when Dovecot can run here, else why not (the needs_tool marker's reason)."""
    if not (os.path.exists(DOVECOT) and os.path.exists(DOVEADM)):
        return "Dovecot is not installed (Debian: apt-get install dovecot-imapd)"
    if os.geteuid() != 0:
        return "a private Dovecot with its own mail user needs root here"
    return None


@dataclass(frozen=True)
class Dovecot:
    root: Path
    port: int
    user: str
    password: str
    tls: bool = False  # imaps on `port`, with a self-signed certificate for 127.0.0.1 (`certificate`)

    @property
    def certificate(self) -> Path:
        return self.root / "cert.pem"

    @property
    def config(self) -> Path:
        return self.root / "dovecot.conf"

    @property
    def maildir(self) -> Path:
        return self.root / "home" / "Maildir"

    def url(self, folder: str = "INBOX") -> str:
        scheme = "imaps" if self.tls else "imap"
        return f"{scheme}://{self.user}@127.0.0.1:{self.port}/{folder}"

    def deliver(self, raw: bytes) -> Path:
        """Place a message into INBOX (Maildir/new/), atomically."""
        name = f"{time.time_ns()}.{uuid.uuid4().hex}.test"
        tmp = self.maildir / "tmp" / name
        tmp.write_bytes(raw)
        os.chown(tmp, MAIL_UID, MAIL_UID)
        target = self.maildir / "new" / name
        os.rename(tmp, target)
        return target

    def deliver_in_order(self, raws: list[bytes]) -> list[int]:
        """Deliver each message and have Dovecot number it before the next is placed (a Maildir
        scan numbers the new files it finds together, in an order of its own): their UIDs."""
        conn = imaplib.IMAP4("127.0.0.1", self.port, timeout=60)
        try:
            conn.login(self.user, self.password)
            conn.select("INBOX", readonly=True)
            uids = []
            for raw in raws:
                self.deliver(raw)
                conn.noop()  # Dovecot syncs the Maildir: the new file gets the next UID
                uids.append(max(int(u) for u in conn.uid("SEARCH", "ALL")[1][0].split()))
            return uids
        finally:
            conn.logout()

    def doveadm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [DOVEADM, "-c", str(self.config), *args], capture_output=True, text=True, timeout=60, check=False
        )


def _self_signed(cert: Path, key: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def running_dovecot(password: str | None = None, *, tls: bool = False) -> Iterator[Dovecot]:
    """Start a private Dovecot and yield it; stopped and its folder removed afterwards. Its
    user's password is random unless given: no password is written into the repository."""
    password = password if password is not None else secrets.token_urlsafe(16)
    root = Path(tempfile.mkdtemp(prefix="ip-dovecot-"))
    os.chmod(root, 0o755)  # our own folder: the mail user and dovecot's login users reach into it
    server = Dovecot(root, free_port(), "mailuser", password, tls)
    home = root / "home"
    for sub in ("cur", "new", "tmp"):
        (server.maildir / sub).mkdir(parents=True)
    for path in (home, server.maildir, *(server.maildir / s for s in ("cur", "new", "tmp"))):
        os.chown(path, MAIL_UID, MAIL_UID)
    (root / "passwd").write_text(f"{server.user}:{{PLAIN}}{password}:{MAIL_UID}:{MAIL_UID}::{home}::\n")
    if tls:
        _self_signed(server.certificate, root / "key.pem")
        ssl = f"ssl = required\nssl_cert = <{server.certificate}\nssl_key = <{root / 'key.pem'}"
    else:
        ssl = "ssl = no"
    ports = (
        {"imap_port": 0, "imaps_port": server.port} if tls else {"imap_port": server.port, "imaps_port": 0}
    )
    server.config.write_text(CONFIG.format(root=root, ssl=ssl, **ports))
    started = subprocess.run(
        [DOVECOT, "-c", str(server.config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _listening(server.port):
            if started.returncode != 0 or time.monotonic() > deadline:
                log = (root / "dovecot.log").read_text() if (root / "dovecot.log").exists() else ""
                raise RuntimeError(f"dovecot did not start (exit {started.returncode}): {log[-2000:]}")
            time.sleep(0.05)
        yield server
    finally:
        server.doveadm("stop")
        shutil.rmtree(root, ignore_errors=True)
