"""Shared machinery for the chaos scenarios: databases, results, the watcher, invariant checks.

A scenario is a function `run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult`.
Everything random in it comes from `random.Random(seed)`, so a failing trial can be replayed with
the same seed. Scenarios synchronise on database state or on files a gated worker writes, never
on sleeps; the only sleeps are the injected random delays themselves.
"""

from __future__ import annotations

import multiprocessing
import os
import platform
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from invoice_pipeline.engine.records import TERMINAL_STATUSES
from pipeline_support.helpers import create_database, drop_database, free_port, wait_for

# Modules the fork server imports once, so that a worker starts in ~15 ms instead of the ~2 s a
# fresh interpreter needs to import Dagster: a kill at "a random moment" is then a moment of the
# pipeline, not of the import system. The tests' racing processes fork from the same server (one
# per process, whoever starts it first), so it also imports what their modules import at the top
# (an ephemeral Dagster instance's storage, the sample renderer, the test tools: 0.8-1.1 s a child
# otherwise). A module that is not installed is skipped by the fork server.
PRELOAD = [
    "dagster",
    "invoice_pipeline.orchestration.jobs",
    "invoice_pipeline.orchestration.resources",
    "chaos.worker",
    "chaos.warm_dagster",
    "sqlalchemy",
    "alembic.command",
    "invoice_pipeline.samples.render",
    "pytest",
    "hypothesis",
]
_ctx_lock = threading.Lock()
_ctx: ForkServerContext | None = None


def worker_context() -> ForkServerContext:
    """The fork-server multiprocessing context, preloaded once per process."""
    global _ctx
    with _ctx_lock:
        if _ctx is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD)
            _ctx = ctx
        return _ctx


@dataclass
class ScenarioResult:
    name: str
    seed: int
    params: dict[str, Any]
    trials: int = 0
    failures_injected: int = 0
    violations: list[str] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def violate(self, message: str) -> None:
        # Keep the list readable: the first 50 messages, and the count of every one.
        self.figures["violation_count"] = self.figures.get("violation_count", 0) + 1
        if len(self.violations) < 50:
            self.violations.append(message)

    def count(self, key: str, by: int = 1) -> None:
        self.figures[key] = self.figures.get(key, 0) + by

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "params": self.params,
            "trials": self.trials,
            "failures_injected": self.failures_injected,
            "invariant_violations": self.figures.get("violation_count", len(self.violations)),
            "violations": self.violations,
            "figures": {k: v for k, v in self.figures.items() if k != "violation_count"},
            "duration_s": round(self.duration_s, 2),
        }


class ChaosContext:
    """Where scenarios get their databases: a server plus a migrated template to copy from."""

    def __init__(self, server_url: str, template: str, workdir: Path) -> None:
        self.server_url = server_url
        self.template = template
        self.workdir = workdir
        self._created: list[str] = []
        self._dirs: list[Path] = []

    def new_database(self) -> str:
        url = create_database(self.server_url, template=self.template, prefix="ip_chaos")
        self._created.append(url)
        return url

    def scratch_dir(self, name: str) -> Path:
        path = self.workdir / f"{name}-{os.getpid()}-{time.monotonic_ns()}"
        path.mkdir(parents=True)
        return path

    def short_dir(self, name: str) -> Path:
        """A directory with a short path, for PostgreSQL data dirs: the Unix socket's path inside
        it must fit in 107 bytes, which pytest's tmp_path does not guarantee."""
        path = Path(tempfile.mkdtemp(prefix=f"ipc-{name}-"))
        self._dirs.append(path)
        return path

    def cleanup(self) -> None:
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._dirs.clear()
        for url in self._created:
            for name in (url, url + "_dagster"):
                try:
                    drop_database(self.server_url, name)
                except psycopg.Error:
                    pass
        self._created.clear()


# -- instrumentation -----------------------------------------------------------------------------

# Test-only audit triggers, installed in a scenario's own database (never a product migration).
# Each committed write to a step-output table records the status its job had *inside the writing
# transaction*. A fenced write has locked its job row first, so that status is 'running' and no
# sweep can change it before the commit; a zombie write (no fence, or a fence that let a swept
# job through) would record 'failed' or 'succeeded'. AFTER triggers only see rows really written
# (ON CONFLICT DO NOTHING writes nothing) and roll back with their transaction, so the audit
# counts exactly the committed writes.
AUDIT_SQL = """
CREATE TABLE chaos_audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tbl         text NOT NULL,
    invoice_id  uuid NOT NULL,
    job_id      uuid NOT NULL,
    detail      text,
    job_status  text,
    at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION chaos_audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_audit (tbl, invoice_id, job_id, detail, job_status)
    VALUES (TG_TABLE_NAME, NEW.invoice_id, NEW.job_id,
            coalesce((to_jsonb(NEW) ->> 'step') || ':' || (to_jsonb(NEW) ->> 'event'), TG_OP),
            (SELECT status FROM processing_jobs WHERE id = NEW.job_id));
    RETURN NULL;
END $$;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE ON extracted_texts
    FOR EACH ROW EXECUTE FUNCTION chaos_audit_write();
CREATE TRIGGER chaos_audit AFTER INSERT ON approvals FOR EACH ROW EXECUTE FUNCTION chaos_audit_write();
CREATE TRIGGER chaos_audit AFTER INSERT ON ledger_postings FOR EACH ROW EXECUTE FUNCTION chaos_audit_write();
CREATE TRIGGER chaos_audit AFTER INSERT ON step_events FOR EACH ROW EXECUTE FUNCTION chaos_audit_write();
"""


def install_audit(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(AUDIT_SQL)


class Watcher:
    """Samples, from its own connection, whether any invoice ever has two running jobs.

    The unique index should make it impossible; the watcher is the independent witness that
    checks it while the storm is on, not only afterwards.
    """

    SQL = "SELECT invoice_id FROM processing_jobs WHERE status = 'running' GROUP BY 1 HAVING count(*) > 1"

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples = 0
        self.doubles: list[str] = []
        self.max_running = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-watcher", daemon=True)
        self.errors = 0

    def _run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.url, autocommit=True, connect_timeout=2)
                rows = conn.execute(self.SQL).fetchall()
                running = conn.execute(
                    "SELECT count(*) FROM processing_jobs WHERE status = 'running'"
                ).fetchone()
                self.samples += 1
                self.doubles.extend(str(r[0]) for r in rows)
                self.max_running = max(self.max_running, int(running[0]) if running else 0)
                # ~300 samples a second: a doubled lock would have to vanish within 3 ms to be
                # missed, and the watcher leaves the two cores to the workers.
                self._stop.wait(0.003)
            except psycopg.Error:
                # The Postgres-restart scenario takes the server away under the watcher too.
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                self._stop.wait(0.05)
        if conn is not None:
            conn.close()

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def report(self, result: ScenarioResult) -> None:
        result.figures["watcher_samples"] = self.samples
        result.figures["watcher_max_running_jobs"] = self.max_running
        for inv in self.doubles:
            result.violate(f"two running jobs at once for invoice {inv}")


# -- invariants ----------------------------------------------------------------------------------


def check_common_invariants(
    url: str, result: ScenarioResult, *, require_terminal: bool = True, audited: bool = False
) -> dict[str, int]:
    """The invariants every scenario shares; returns counts for the figures."""
    with psycopg.connect(url) as conn:
        q = conn.execute
        for (inv,) in q(Watcher.SQL).fetchall():
            result.violate(f"two running jobs for invoice {inv}")
        for (inv,) in q("SELECT id FROM processing_jobs WHERE status = 'running'").fetchall():
            result.violate(f"job {inv} still running after recovery")
        if require_terminal:
            for inv, status in q(
                "SELECT id, status FROM invoices WHERE NOT (status = ANY(%s))", (list(TERMINAL_STATUSES),)
            ).fetchall():
                result.violate(f"invoice {inv} not terminal: {status}")
        for inv, n in q(
            "SELECT invoice_id, count(*) FROM ledger_postings GROUP BY 1 HAVING count(*) > 1"
        ).fetchall():
            result.violate(f"invoice {inv} posted {n} times")
        for (inv,) in q(
            "SELECT i.id FROM invoices i JOIN ledger_postings l ON l.invoice_id = i.id "
            "WHERE i.duplicate_status IS DISTINCT FROM 'original'"
        ).fetchall():
            result.violate(f"invoice {inv} posted although it is not an original")
        for (inv,) in q(
            "SELECT i.id FROM invoices i LEFT JOIN ledger_postings l ON l.invoice_id = i.id "
            "WHERE i.status = 'processed' AND i.duplicate_status = 'original' AND l.id IS NULL"
        ).fetchall():
            result.violate(f"processed original {inv} has no ledger posting")
        for inv, n in q(
            "SELECT i.id, count(j.id) FILTER (WHERE j.status = 'succeeded') FROM invoices i "
            "LEFT JOIN processing_jobs j ON j.invoice_id = i.id WHERE i.status = 'processed' "
            "GROUP BY i.id HAVING count(j.id) FILTER (WHERE j.status = 'succeeded') <> 1"
        ).fetchall():
            result.violate(f"processed invoice {inv} has {n} succeeded jobs")
        for (inv,) in q(
            "SELECT i.id FROM invoices i LEFT JOIN approvals a ON a.invoice_id = i.id "
            "WHERE i.duplicate_status = 'suspected' AND (i.status <> 'needs_review' OR a.invoice_id IS NOT NULL)"
        ).fetchall():
            result.violate(f"suspected duplicate {inv} was decided without a person")
        for (inv,) in q(
            "SELECT id FROM invoices WHERE status = 'quarantined' AND coalesce(quarantine_reason, '') = ''"
        ).fetchall():
            result.violate(f"quarantined invoice {inv} without a reason")
        for (gid,) in q(
            "SELECT g.id FROM duplicate_groups g JOIN invoices o ON o.id = g.original_invoice_id "
            "JOIN invoices d ON d.duplicate_group_id = g.id WHERE d.org_id <> o.org_id"
        ).fetchall():
            result.violate(f"duplicate group {gid} spans two orgs")
        # Time-based zombie check (needs no instrumentation): every step output was written
        # while its job was running — after it started and before it finished.
        for tbl, col in (
            ("extracted_texts", "created_at"),
            ("approvals", "decided_at"),
            ("ledger_postings", "posted_at"),
            ("step_events", "at"),
        ):
            for inv, job in q(
                f"SELECT t.invoice_id, t.job_id FROM {tbl} t JOIN processing_jobs j ON j.id = t.job_id "  # noqa: S608
                f"WHERE t.{col} < j.started_at OR (j.finished_at IS NOT NULL AND t.{col} > j.finished_at) "
                "OR j.invoice_id <> t.invoice_id"
            ).fetchall():
                result.violate(f"{tbl}: write for invoice {inv} by job {job} outside its job's running time")
        counts: dict[str, int] = dict(q("SELECT status, count(*) FROM invoices GROUP BY 1").fetchall())
        if audited:
            for tbl, inv, job, status in q(
                "SELECT tbl, invoice_id, job_id, job_status FROM chaos_audit "
                "WHERE job_status IS DISTINCT FROM 'running'"
            ).fetchall():
                result.violate(
                    f"zombie write: {tbl} for invoice {inv} by job {job} whose status was {status}"
                )
            for inv, n in q(
                "SELECT invoice_id, count(*) FROM chaos_audit WHERE tbl = 'extracted_texts' "
                "GROUP BY 1 HAVING count(*) > 1"
            ).fetchall():
                result.violate(f"invoice {inv}: text extraction completed and checkpointed {n} times")
    return counts


def extraction_counts(url: str) -> tuple[int, int]:
    """(extract_text starts, committed extractions) over the whole database."""
    with psycopg.connect(url) as conn:
        executed = conn.execute(
            "SELECT count(*) FROM step_events WHERE step = 'extract_text' AND event = 'started'"
        ).fetchone()
        saved = conn.execute("SELECT count(*) FROM chaos_audit WHERE tbl = 'extracted_texts'").fetchone()
    assert executed is not None and saved is not None
    return int(executed[0]), int(saved[0])


# -- machine facts and small helpers --------------------------------------------------------------


def machine_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        meminfo = Path("/proc/meminfo").read_text().splitlines()
        facts["mem_total_kb"] = int(meminfo[0].split()[1])
        model = [
            line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")
        ]
        if model:
            facts["cpu_model"] = model[0].split(":", 1)[1].strip()
    except (OSError, ValueError, IndexError):
        pass
    try:
        import dagster

        facts["dagster"] = dagster.__version__
    except ImportError:
        pass
    return facts


def server_version(url: str) -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def database_name(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


@contextmanager
def timed(result: ScenarioResult) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        result.duration_s = time.monotonic() - started


def wait_file(path: Path, *, timeout: float, alive: Callable[[], bool] | None = None, what: str = "") -> bool:
    """Wait for a file a worker writes; False if the worker died first (when `alive` is given)."""
    done: list[bool] = []

    def ready() -> bool:
        if path.exists():
            done.append(True)
            return True
        if alive is not None and not alive():
            done.append(path.exists())
            return True
        return False

    wait_for(ready, timeout=timeout, interval=0.005, what=what or f"{path.name}")
    return done[-1]


__all__ = ["free_port"]
