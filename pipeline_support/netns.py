"""A small cluster of real hosts in network namespaces: one database host, N worker hosts.

    with Cluster(workers=3) as cluster:
        url = cluster.database("invoices")            # the parent's URL (Unix socket)
        proc = cluster.run(1, ["-m", "pipeline_support.partition_worker", ...], env={...})
        cluster.cut(1); cluster.heal(1)                # link down / up: packets dropped silently
        cluster.netem(2, loss_pct=30, delay_ms=200)    # random loss and delay (tc netem, or user space)
        cluster.freeze(3); cluster.thaw(3)             # SIGSTOP / SIGCONT of every process there

Topology: the database host is a namespace `ipn<pid>-db` running the machine's PostgreSQL 15
(`/usr/lib/postgresql/15/bin`, initdb as the `postgres` user). Worker host i is a namespace
`ipn<pid>-w<i>` joined to the database host by its own veth pair, 10.213.<i>.2/30 on the worker
end and 10.213.<i>.1/30 on the database end. Those are the only addresses added, all inside
namespaces this module created. The server also listens on a Unix socket in the cluster's
directory: the test process (root namespace) checks invariants through it, unaffected by cuts.

Every name carries the creating pid; at start, namespaces of a prefix whose pid is dead (a
cluster whose test was SIGKILLed) are deleted. Teardown (context-manager exit, always) kills
every process in each namespace, deletes the namespaces (their veth ends go with them) and the
directory. Every wait is bounded in time.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

PG_BIN = Path("/usr/lib/postgresql/15/bin")
PREFIX = "ipn"
SUBNET = "10.213"
PG_PORT = 5432
ROOT = Path(__file__).resolve().parents[1]


class ClusterUnavailable(RuntimeError):
    """This machine cannot build the cluster (not root, no `ip`, no PostgreSQL 15 binaries)."""


def unavailable_reason() -> str | None:
    """One line saying why no cluster can be built here, or None when it can."""
    if os.geteuid() != 0:
        return "network-namespace cluster needs root (ip netns)"
    if shutil.which("ip") is None:
        return "network-namespace cluster needs iproute2's `ip`"
    if shutil.which("tc") is None:
        return "network-namespace cluster needs `tc` (iproute2)"
    if not (PG_BIN / "postgres").exists():
        return f"network-namespace cluster needs PostgreSQL binaries in {PG_BIN}"
    if subprocess.run(["id", "postgres"], capture_output=True).returncode != 0:
        return "network-namespace cluster needs the `postgres` system user"
    probe = f"{PREFIX}probe{os.getpid():x}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()[:120]}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`ip ARGS`, inside the network namespace `ns` when given (the clusters' links and addresses)."""
    cmd = (["ip", "netns", "exec", ns] if ns else []) + ["ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=30)


def _netns_list() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ns_pids(ns: str) -> list[int]:
    """The pids of every process in the network namespace ns (none when it is gone)."""
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_namespace(ns: str) -> None:
    """SIGCONT then SIGKILL every process in ns (bounded), then delete it."""
    for _ in range(20):
        pids = ns_pids(ns)
        if not pids:
            break
        for pid in pids:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        time.sleep(0.1)
    subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def clean_leftovers(prefix: str = PREFIX) -> list[str]:
    """Delete namespaces `<prefix><pid hex>-...` whose creating process is gone; return them."""
    removed = []
    pattern = re.compile(rf"^{re.escape(prefix)}([0-9a-f]+)-")
    for ns in _netns_list():
        m = pattern.match(ns)
        if m and (int(m.group(1), 16) == os.getpid() or not _pid_alive(int(m.group(1), 16))):
            _kill_namespace(ns)
            removed.append(ns)
    return removed


class Cluster:
    """A database host and `workers` worker hosts (numbered 1..workers), torn down on exit."""

    def __init__(self, workers: int = 3, *, pg_settings: dict[str, str] | None = None) -> None:
        if not 1 <= workers <= 50:
            raise ValueError("1..50 worker hosts")
        self.workers = workers
        self.tag = f"{PREFIX}{os.getpid():x}"
        self.db_ns = f"{self.tag}-db"
        self.pg_settings = pg_settings or {}
        self.dir: Path | None = None
        self.pgdata: Path | None = None
        self.sockdir: Path | None = None
        self._pg: subprocess.Popen[bytes] | None = None
        self._procs: dict[int, list[subprocess.Popen[bytes]]] = {}
        self._frozen: set[int] = set()
        self._made_ns: list[str] = []
        self._lossy: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}

    # -- names -----------------------------------------------------------------------------

    def ns(self, host: int) -> str:
        self._check_host(host)
        return f"{self.tag}-w{host}"

    def db_end(self, host: int) -> str:
        return f"{self.tag}d{host}"

    def worker_end(self, host: int) -> str:
        return f"{self.tag}w{host}"

    def db_address(self, host: int) -> str:
        """The database host's address on host's link: what that worker connects to."""
        self._check_host(host)
        return f"{SUBNET}.{host}.1"

    def worker_address(self, host: int) -> str:
        return f"{SUBNET}.{host}.2"

    def _check_host(self, host: int) -> None:
        if not 1 <= host <= self.workers:
            raise ValueError(f"no worker host {host} (1..{self.workers})")

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Cluster:
        reason = unavailable_reason()
        if reason:
            raise ClusterUnavailable(reason)
        clean_leftovers()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _build(self) -> None:
        # The server runs as `postgres`, which must reach the data dir: a directory of ours,
        # made for it (never a parent's mode changed).
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-", dir="/tmp"))
        os.chmod(self.dir, 0o755)
        self.pgdata = self.dir / "pgdata"
        self.sockdir = self.dir / "s"
        self.sockdir.mkdir()
        shutil.chown(self.sockdir, "postgres", "postgres")
        self.pgdata.mkdir()
        shutil.chown(self.pgdata, "postgres", "postgres")
        self._add_ns(self.db_ns)
        ip("link", "set", "lo", "up", ns=self.db_ns)
        for host in range(1, self.workers + 1):
            ns = self.ns(host)
            self._add_ns(ns)
            ip("link", "set", "lo", "up", ns=ns)
            d, w = self.db_end(host), self.worker_end(host)
            ip("link", "add", d, "netns", self.db_ns, "type", "veth", "peer", "name", w, "netns", ns)
            ip("addr", "add", f"{self.db_address(host)}/30", "dev", d, ns=self.db_ns)
            ip("addr", "add", f"{self.worker_address(host)}/30", "dev", w, ns=ns)
            ip("link", "set", d, "up", ns=self.db_ns)
            ip("link", "set", w, "up", ns=ns)
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(self.pgdata), "-A", "trust",
             "-U", "postgres", "--no-sync"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        with (self.pgdata / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {SUBNET}.0.0/16 trust  # test cluster only\n")
        self.start_database()

    def _add_ns(self, ns: str) -> None:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True, timeout=30)
        self._made_ns.append(ns)

    def start_database(self, timeout: float = 60) -> None:
        assert self.dir is not None and self.pgdata is not None and self.sockdir is not None
        settings = {
            "listen_addresses": "*",  # inside the database namespace: only its links
            "port": str(PG_PORT),
            "unix_socket_directories": str(self.sockdir),
            "fsync": "off",  # the OS never crashes under a test; process crashes stay honest
            "max_connections": "200",
        } | self.pg_settings
        args = [str(PG_BIN / "postgres"), "-D", str(self.pgdata)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log = open(self.dir / "postgres.log", "ab")
        self._pg = subprocess.Popen(
            ["ip", "netns", "exec", self.db_ns, "runuser", "-u", "postgres", "--", *args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while not self._database_answers():
            if self._pg.poll() is not None:
                raise RuntimeError(f"postgres exited with {self._pg.returncode}; see {self.dir}/postgres.log")
            if time.monotonic() > deadline:
                raise TimeoutError("postgres did not answer in time")
            time.sleep(0.05)

    def stop_database(self, mode: str = "fast", timeout: float = 60) -> None:
        """Stop the server: 'fast' (SIGINT), 'immediate' (SIGQUIT) or 'kill' (SIGKILL)."""
        if self._pg is None:
            return
        sig = {"fast": signal.SIGINT, "immediate": signal.SIGQUIT, "kill": signal.SIGKILL}[mode]
        # The postmaster is the group's last process (ip netns exec and runuser exec into it).
        try:
            os.killpg(self._pg.pid, sig)
            self._pg.wait(timeout)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self._pg.pid, signal.SIGKILL)
            self._pg.wait(timeout)
        if mode == "kill":  # backends outlive a SIGKILLed postmaster: end them too
            assert self.pgdata is not None
            for pid in ns_pids(self.db_ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + timeout
            while ns_pids(self.db_ns) and time.monotonic() < deadline:
                time.sleep(0.05)
        self._pg = None

    def restart_database(self, mode: str = "fast", down_seconds: float = 0.0) -> None:
        self.stop_database(mode)
        time.sleep(down_seconds)
        self.start_database()

    def _database_answers(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def close(self) -> None:
        for host in list(self._lossy):
            self.clear_netem(host)
        for host in list(self._procs):
            self.kill_host_processes(host)
        if self._pg is not None:
            try:
                self.stop_database("immediate", timeout=20)
            except Exception:  # teardown goes on: the namespace kill below ends it anyway
                pass
        for ns in reversed(self._made_ns):
            _kill_namespace(ns)
        self._made_ns.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # -- URLs and databases ----------------------------------------------------------------

    def url(self, database: str) -> str:
        """The test process's URL: the Unix socket, which no cut reaches."""
        return f"postgresql://postgres@/{database}?host={self.sockdir}&port={PG_PORT}"

    def host_url(self, host: int, database: str) -> str:
        """What a process on worker host `host` connects to: the database host over its link."""
        return f"postgresql://postgres@{self.db_address(host)}:{PG_PORT}/{database}"

    def create_database(self, name: str, template: str | None = None) -> str:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            q = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template:
                q = sql.SQL("{} TEMPLATE {}").format(q, sql.Identifier(template))
            conn.execute(q)
        return self.url(name)

    # -- processes on worker hosts ---------------------------------------------------------

    def run(
        self,
        host: int,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        log: Path | None = None,
        python: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """`ip netns exec <host> <python> <args...>` in its own process group, cwd the project."""
        exe = python or str(ROOT / ".venv" / "bin" / "python")
        out: Any = open(log, "ab") if log else subprocess.DEVNULL
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns(host), exe, *args],
            cwd=ROOT, env={**os.environ, **(env or {})}, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        if log:
            out.close()
        self._procs.setdefault(host, []).append(proc)
        return proc

    def kill_host_processes(self, host: int) -> None:
        for proc in self._procs.pop(host, []):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        for pid in ns_pids(self.ns(host)):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        self._frozen.discard(host)

    # -- faults ------------------------------------------------------------------------------

    def cut(self, host: int) -> None:
        """Take the database end of host's link down: packets vanish silently, no RST."""
        ip("link", "set", self.db_end(host), "down", ns=self.db_ns)

    def heal(self, host: int) -> None:
        ip("link", "set", self.db_end(host), "up", ns=self.db_ns)

    def netem(self, host: int, loss_pct: float, delay_ms: int, *, seed: int = 0) -> str:
        """A lossy, slow link: each direction of host's link to the database host loses loss_pct %
        of its packets at random and delays the rest by delay_ms. Returns the rule applied.

        `tc netem` on both ends when the kernel has sch_netem. Without it (this machine kind's
        6.18 has neither netem nor classifiers), the same loss and delay are made in user space:
        pipeline_support.lossy_link forwards the link's packets between two TUN devices, and a
        /32 route each way (addresses unchanged) sends host's traffic through them, open
        connections included. clear_netem undoes either.
        """
        rule = ["netem", "delay", f"{delay_ms}ms", "loss", f"{loss_pct}%"]
        done = [
            subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", *rule],
                capture_output=True, timeout=30,
            ).returncode == 0
            for ns, dev in self._link_ends(host)
        ]  # fmt: skip
        if all(done):
            return "tc " + " ".join(rule)
        self.clear_netem(host)
        return self._lossy_link(host, loss_pct, delay_ms, seed)

    def _link_ends(self, host: int) -> list[tuple[str, str]]:
        return [(self.db_ns, self.db_end(host)), (self.ns(host), self.worker_end(host))]

    def _lossy_link(self, host: int, loss_pct: float, delay_ms: int, seed: int, timeout: float = 30) -> str:
        assert self.dir is not None
        worker_tun, db_tun = f"{self.tag}l{host}", f"{self.tag}k{host}"
        stats = self.dir / f"lossy-{host}.json"
        stats.unlink(missing_ok=True)
        proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "pipeline_support.lossy_link", self.ns(host),
             worker_tun, self.db_ns, db_tun, str(loss_pct), str(delay_ms), str(seed), str(stats)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self._lossy[host] = (proc, stats)
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline().decode(errors="replace") if ready else ""
        if line.strip() != "ready":
            self.clear_netem(host)
            raise RuntimeError(f"lossy link for host {host} did not start: {line.strip()!r}")
        ip("link", "set", worker_tun, "up", ns=self.ns(host))
        ip("link", "set", db_tun, "up", ns=self.db_ns)
        db, worker = self.db_address(host), self.worker_address(host)
        ip("route", "replace", f"{db}/32", "dev", worker_tun, "src", worker, ns=self.ns(host))
        ip("route", "replace", f"{worker}/32", "dev", db_tun, "src", db, ns=self.db_ns)
        return f"user-space netem (TUN forwarder): delay {delay_ms}ms loss {loss_pct}%"

    def clear_netem(self, host: int) -> dict[str, int]:
        """Undo netem(); returns the user-space link's packet counts (empty for tc netem)."""
        for ns, dev in self._link_ends(host):
            subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                capture_output=True, timeout=30,
            )  # fmt: skip
        lossy = self._lossy.pop(host, None)
        if lossy is None:
            return {}
        proc, stats = lossy
        # Routes first, so that the traffic is back on the veth before the devices go away.
        ip("route", "del", f"{self.db_address(host)}/32", ns=self.ns(host), check=False)
        ip("route", "del", f"{self.worker_address(host)}/32", ns=self.db_ns, check=False)
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        return dict(json.loads(stats.read_text())) if stats.exists() else {}

    def freeze(self, host: int) -> list[int]:
        """SIGSTOP every process in host's namespace (children included); returns their pids."""
        pids = ns_pids(self.ns(host))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        self._frozen.add(host)
        return pids

    def thaw(self, host: int) -> None:
        for pid in ns_pids(self.ns(host)):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._frozen.discard(host)
