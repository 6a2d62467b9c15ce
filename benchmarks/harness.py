"""Shared machinery for `python -m benchmarks`: the server, worker gangs, statistics, results.

A benchmark is a function `run(ctx: BenchContext) -> BenchResult` registered under a name with
`@register(...)`. It asks `ctx` for a freshly migrated database, measures, and returns figures
(each a list of per-round values, summarised as median/min/max), ratios (paired per round, so a
comparison is always between numbers measured in the same run), checks, notes and EXPLAIN text.
The harness writes results.json, results.md and the plots.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import os
import platform
import queue
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from invoice_pipeline.config import ENV_DATABASE_URL
from invoice_pipeline.db.embedded import EmbeddedPostgres
from invoice_pipeline.db.migrate import migrate

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = Path(__file__).resolve().parent / "results"

# -- statistics --------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); exact enough for latency tails of thousands of samples."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Figure:
    """One measured quantity: one value per round, reported as median with min/max."""

    name: str
    unit: str
    values: list[float] = field(default_factory=list)
    # "higher" or "lower": which direction is better, so readers of the table need not guess.
    better: str = "lower"
    note: str = ""

    def add(self, value: float) -> None:
        self.values.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    @property
    def min(self) -> float:
        return min(self.values) if self.values else math.nan

    @property
    def max(self) -> float:
        return max(self.values) if self.values else math.nan

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "median": self.median,
            "min": self.min,
            "max": self.max,
            "rounds": len(self.values),
            "values": self.values,
            "better": self.better,
            "note": self.note,
        }


@dataclass
class Ratio:
    """numerator / denominator, computed per round from values measured side by side."""

    name: str
    numerator: str
    denominator: str
    values: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "numerator": self.numerator,
            "denominator": self.denominator,
            "median": self.median,
            "min": min(self.values) if self.values else math.nan,
            "max": max(self.values) if self.values else math.nan,
            "values": self.values,
            "note": self.note,
        }


@dataclass
class Check:
    """A correctness claim the benchmark verified (or refuted) while measuring."""

    name: str
    passed: bool
    detail: str
    # A correctness check failing makes the run fail (exit 1); an expectation (a planner choice, a
    # performance hope) is only reported as "not met", so CI smoke runs do not flap on the planner.
    fatal: bool = True


@dataclass
class BenchResult:
    name: str
    description: str
    params: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    explains: dict[str, str] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)
    # Pre-rendered markdown tables (e.g. pivots) shown before the full list of figures.
    tables: list[str] = field(default_factory=list)
    status: str = "ok"
    error: str | None = None
    duration_s: float = 0.0

    def figure(self, name: str, unit: str, better: str = "lower", note: str = "") -> Figure:
        """The figure called name, created on first use (rounds append to it)."""
        for existing in self.figures:
            if existing.name == name:
                return existing
        created = Figure(name, unit, better=better, note=note)
        self.figures.append(created)
        return created

    def find(self, name: str) -> Figure | None:
        return next((f for f in self.figures if f.name == name), None)

    def get(self, name: str) -> Figure:
        for existing in self.figures:
            if existing.name == name:
                return existing
        raise KeyError(name)

    def ratio(self, name: str, numerator: str, denominator: str, note: str = "") -> Ratio:
        """A paired ratio of two figures that have the same number of rounds."""
        num, den = self.get(numerator), self.get(denominator)
        values = [a / b if b else math.nan for a, b in zip(num.values, den.values, strict=True)]
        created = Ratio(name, numerator, denominator, values, note)
        self.ratios.append(created)
        return created

    def check(self, name: str, passed: bool, detail: str, *, fatal: bool = True) -> None:
        self.checks.append(Check(name, passed, detail, fatal))

    def to_json(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "status": self.status,
            "error": self.error,
            "duration_s": self.duration_s,
            "params": self.params,
            "figures": [f.to_json() for f in self.figures],
            "ratios": [r.to_json() for r in self.ratios],
            "checks": [asdict(c) for c in self.checks],
            "notes": self.notes,
            "explains": self.explains,
            "plots": self.plots,
        }


# -- registry ----------------------------------------------------------------------------------

BenchFunction = Callable[["BenchContext"], BenchResult]


@dataclass(frozen=True)
class BenchSpec:
    name: str
    description: str
    run: BenchFunction


# Name -> benchmark, in registration order (which is the order they run in). Extension point:
# a new module decorates its entry function with @register and is listed in
# benchmarks.__main__.BENCHMARK_MODULES.
REGISTRY: dict[str, BenchSpec] = {}


def register(name: str, description: str) -> Callable[[BenchFunction], BenchFunction]:
    def decorate(fn: BenchFunction) -> BenchFunction:
        if name in REGISTRY and REGISTRY[name].run is not fn:
            raise ValueError(f"benchmark {name!r} registered twice")
        REGISTRY[name] = BenchSpec(name, description, fn)
        return fn

    return decorate


# -- the server --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


class Server:
    """The PostgreSQL the benchmarks run on: an embedded one in a temp dir, or an external one.

    With INVOICE_PIPELINE_DATABASE_URL set, only scratch databases are created on that server
    (and dropped afterwards); its own database is used only to connect.
    """

    def __init__(self, external_url: str | None) -> None:
        self.external_url = external_url
        self.admin_url = ""
        self._tmp: Path | None = None
        self._embedded: EmbeddedPostgres | None = None
        self._created: list[str] = []

    def __enter__(self) -> Server:
        if self.external_url:
            self.admin_url = self.external_url
        else:
            self._tmp = Path(tempfile.mkdtemp(prefix="invoice-bench-"))
            self._embedded = EmbeddedPostgres(self._tmp / "pgdata", free_port())
            self._embedded.start()
            self.admin_url = self._embedded.url("postgres")
        return self

    def __exit__(self, *exc: object) -> None:
        for url in reversed(self._created):
            try:
                self.drop_database(url)
            except psycopg.Error as error:
                print(f"warning: could not drop {url}: {error}", file=sys.stderr)
        if self._embedded is not None:
            self._embedded.destroy()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    @property
    def kind(self) -> str:
        return "external" if self.external_url else "embedded"

    def fresh_database(self, label: str) -> str:
        """A new database with every migration applied; dropped when the server context ends."""
        name = f"bench_{label}_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        url = with_database(self.admin_url, name)
        self._created.append(url)
        migrate(url)
        return url

    def drop_database(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        if url in self._created:
            self._created.remove(url)


def server_from_environment() -> Server:
    return Server(os.environ.get(ENV_DATABASE_URL) or None)


# -- worker gangs ------------------------------------------------------------------------------


@dataclass
class WorkerContext:
    """What a gang worker's task function receives: its index, own connection and the barrier."""

    index: int
    size: int
    url: str
    conn: psycopg.Connection[Any]
    barrier: Any  # multiprocessing.synchronize.Barrier (not subscriptable for typing)

    def start_together(self) -> float:
        """Wait for every worker of the gang, then return the shared monotonic start time."""
        self.barrier.wait(timeout=120)
        return time.monotonic()


TaskFunction = Callable[..., Any]


def _gang_main(index: int, size: int, url: str, barrier: Any, commands: Any, results: Any) -> None:
    # One connection per process for its whole life: connecting is not what we measure.
    conn = psycopg.connect(url, autocommit=True)
    ctx = WorkerContext(index, size, url, conn, barrier)
    while True:
        command = commands.get()
        if command is None:
            break
        fn, kwargs = command
        try:
            results.put((index, True, fn(ctx, **kwargs)))
        except BaseException:
            # Release the others from the barrier instead of leaving them to time out.
            barrier.abort()
            results.put((index, False, traceback.format_exc()))
            if conn.closed or conn.broken:
                conn = psycopg.connect(url, autocommit=True)
                ctx.conn = conn
    conn.close()


class Gang:
    """`size` spawned processes, each with its own connection, that run tasks in lockstep.

    Spawned once and reused for many rounds: process start-up (interpreter + psycopg import)
    costs far more than a measured round on 2 cores.
    """

    def __init__(self, size: int, url: str) -> None:
        ctx = mp.get_context("spawn")
        self.size = size
        self.barrier = ctx.Barrier(size)
        self.results: Any = ctx.Queue()
        self.commands: list[Any] = [ctx.Queue() for _ in range(size)]
        self.processes = [
            ctx.Process(
                target=_gang_main,
                args=(i, size, url, self.barrier, self.commands[i], self.results),
                name=f"bench-worker-{i}",
                daemon=True,
            )
            for i in range(size)
        ]
        for process in self.processes:
            process.start()

    def run(
        self, fn: TaskFunction, kwargs: dict[str, Any] | Sequence[dict[str, Any]], timeout: float = 600
    ) -> list[Any]:
        """Run fn(worker_ctx, **kwargs) on every worker; results in worker order."""
        per_worker = [kwargs] * self.size if isinstance(kwargs, dict) else list(kwargs)
        if len(per_worker) != self.size:
            raise ValueError(f"{len(per_worker)} kwargs for a gang of {self.size}")
        for q, kw in zip(self.commands, per_worker, strict=True):
            q.put((fn, kw))
        out: list[Any] = [None] * self.size
        errors: list[str] = []
        deadline = time.monotonic() + timeout
        for _ in range(self.size):
            try:
                index, ok, value = self.results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"gang task {fn.__name__} timed out after {timeout}s") from None
            if ok:
                out[index] = value
            else:
                errors.append(f"worker {index}:\n{value}")
        if errors:
            self.barrier.reset()
            # Report the root cause, not the BrokenBarrierError of the workers it released.
            errors.sort(key=lambda e: "BrokenBarrierError" in e)
            raise RuntimeError(f"gang task {fn.__name__} failed:\n" + "\n".join(errors))
        return out

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)

    def __enter__(self) -> Gang:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- database helpers --------------------------------------------------------------------------


def explain(
    conn: psycopg.Connection[Any],
    statement: str,
    params: Sequence[Any] | dict[str, Any] = (),
    setup: Sequence[tuple[str, Sequence[Any] | dict[str, Any]]] = (),
) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a statement inside a transaction that is rolled back.

    ANALYZE really executes an UPDATE: the rollback keeps the measured data as it was. `setup`
    statements run first in the same transaction (e.g. to create the rows the UPDATE would hit).
    """
    with conn.transaction(force_rollback=True):
        for setup_statement, setup_params in setup:
            conn.execute(setup_statement, setup_params)
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, params).fetchall()
    return "\n".join(str(r[0]) for r in rows)


# "Index Scan using x", "Index Only Scan using x", "Bitmap Index Scan on x".
INDEX_IN_PLAN = re.compile(r"Index (?:Only )?Scan (?:Backward )?(?:using|on) (\w+)")


def index_names(plan: str) -> list[str]:
    """The indexes an EXPLAIN text plan scans."""
    return sorted(set(INDEX_IN_PLAN.findall(plan)))


def server_execution_ms(
    conn: psycopg.Connection[Any], statement: str, params: Sequence[Any] | dict[str, Any] = ()
) -> float:
    """Run a statement under EXPLAIN ANALYZE and return the server's own execution time.

    Unlike a client-side timer this leaves out the network round trip and the client, which
    otherwise dominate (and flatten) millisecond-scale comparisons.
    """
    row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return float(plan[0]["Execution Time"])


@contextmanager
def nested_plans(conn: psycopg.Connection[Any]) -> Iterator[list[str]]:
    """Collect the plans auto_explain reports for statements run inside SQL functions.

    EXPLAIN of `SELECT some_function()` shows only a Result node; auto_explain with
    log_nested_statements shows the plan PostgreSQL really used inside the function.
    """
    plans: list[str] = []

    def on_notice(diag: psycopg.errors.Diagnostic) -> None:
        if diag.message_primary and "duration:" in diag.message_primary:
            plans.append(diag.message_primary)

    conn.add_notice_handler(on_notice)
    conn.execute("LOAD 'auto_explain'")
    for setting, value in (
        ("auto_explain.log_min_duration", "0"),
        ("auto_explain.log_analyze", "on"),
        ("auto_explain.log_buffers", "on"),
        ("auto_explain.log_nested_statements", "on"),
        ("client_min_messages", "log"),
    ):
        conn.execute("SELECT set_config(%s, %s, false)", (setting, value))
    try:
        yield plans
    finally:
        conn.execute("SELECT set_config('client_min_messages', 'notice', false)")
        conn.execute("SELECT set_config('auto_explain.log_min_duration', '-1', false)")
        conn.remove_notice_handler(on_notice)


def wal_lsn(conn: psycopg.Connection[Any]) -> int:
    """Current WAL insert position in bytes: the difference of two is the WAL written between."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    assert row is not None
    return int(row[0])


def next_xid(conn: psycopg.Connection[Any]) -> int:
    """The next transaction id to be assigned; reading it assigns none."""
    row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").fetchone()
    assert row is not None
    return int(row[0])


# -- the run's context -------------------------------------------------------------------------


@dataclass
class BenchContext:
    server: Server
    quick: bool
    out_dir: Path

    def database(self, label: str) -> str:
        return self.server.fresh_database(label)

    def log(self, message: str) -> None:
        print(f"  [{datetime.now():%H:%M:%S}] {message}", flush=True)

    def pick(self, quick: Any, full: Any) -> Any:
        """The quick-mode or full-mode value of a size parameter."""
        return quick if self.quick else full


# -- machine facts -----------------------------------------------------------------------------


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def machine_facts(server: Server, quick: bool) -> dict[str, Any]:
    with psycopg.connect(server.admin_url, autocommit=True) as conn:
        row = conn.execute("SELECT version()").fetchone()
        version = row[0] if row else "unknown"
        settings: dict[str, str] = dict(
            conn.execute(
                "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
                (
                    [
                        "shared_buffers",
                        "synchronous_commit",
                        "fsync",
                        "wal_level",
                        "max_connections",
                        "work_mem",
                    ],
                ),
            ).fetchall()
        )
    ram = _ram_bytes()
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "quick" if quick else "full",
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "ram_gib": round(ram / 2**30, 1) if ram else None,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "psycopg": psycopg.__version__,
        "postgresql": version,
        "postgresql_settings": settings,
        "server": server.kind,
        "git_commit": _git_commit(),
    }


# -- results -----------------------------------------------------------------------------------


def fmt(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def markdown_tables(result: BenchResult) -> str:
    lines = [f"## {result.name}", "", result.description, ""]
    if result.status != "ok":
        lines += [f"**FAILED**: `{(result.error or '').strip().splitlines()[-1]}`", ""]
    if result.params:
        lines.append("Parameters: " + ", ".join(f"{k}={v}" for k, v in result.params.items()))
        lines.append("")
    for table in result.tables:
        lines += [table, ""]
    if result.figures and result.tables:
        lines += ["<details><summary>all figures</summary>", ""]
    if result.figures:
        lines += ["| figure | median | min | max | unit | rounds |", "|---|---:|---:|---:|---|---:|"]
        for f in result.figures:
            arrow = "↑" if f.better == "higher" else "↓"
            lines.append(
                f"| {f.name} | {fmt(f.median)} | {fmt(f.min)} | {fmt(f.max)} | {f.unit} {arrow} | {len(f.values)} |"
            )
        lines.append("")
    if result.figures and result.tables:
        lines += ["</details>", ""]
    if result.ratios:
        lines += ["| ratio (same run, paired per round) | median | min | max |", "|---|---:|---:|---:|"]
        for r in result.ratios:
            j = r.to_json()
            lines.append(f"| {r.name} | {fmt(j['median'])}× | {fmt(j['min'])}× | {fmt(j['max'])}× |")
        lines.append("")
    if result.checks:
        lines += ["| check | result | detail |", "|---|---|---|"]
        for c in result.checks:
            verdict = "PASS" if c.passed else ("FAIL" if c.fatal else "not met")
            lines.append(f"| {c.name} | {verdict} | {c.detail} |")
        lines.append("")
    for note in result.notes:
        lines.append(f"- {note}")
    if result.notes:
        lines.append("")
    return "\n".join(lines)


def pivot(title: str, rows: Sequence[str], cols: Sequence[str], cell: Callable[[str, str], str]) -> str:
    """A markdown table with one row per `rows` entry and one column per `cols` entry."""
    lines = [f"| {title} | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for r in rows:
        lines.append(f"| {r} | " + " | ".join(cell(r, c) for c in cols) + " |")
    return "\n".join(lines)


def cell(figure: Figure | None) -> str:
    """`median (min–max)` for a pivot cell."""
    if figure is None or not figure.values:
        return "–"
    return f"{fmt(figure.median)} ({fmt(figure.min)}–{fmt(figure.max)})"


def markdown_explains(result: BenchResult) -> str:
    if not result.explains:
        return ""
    lines = [f"### {result.name}: plans", ""]
    for title, text in result.explains.items():
        lines += [f"<details><summary>{title}</summary>", "", "```", text, "```", "", "</details>", ""]
    return "\n".join(lines)


def machine_markdown(machine: dict[str, Any]) -> str:
    settings = machine.get("postgresql_settings", {})
    return "\n".join(
        [
            "# Benchmarks",
            "",
            f"Run {machine['date']} ({machine['mode']} mode, {machine['server']} server, "
            f"commit {machine.get('git_commit')}).",
            "",
            f"- Machine: {machine['cores']} cores, {machine['cpu_model']}, {machine['ram_gib']} GiB RAM, "
            f"{machine['platform']}",
            f"- PostgreSQL: {machine['postgresql']}",
            "- Settings: " + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())),
            f"- Python {machine['python']}, psycopg {machine['psycopg']}",
            "",
            "Every figure is the median over rounds with min/max; ↑ higher is better, ↓ lower is better. "
            "Ratios are computed per round between numbers measured side by side, then summarised.",
            "",
        ]
    )


def _finite(value: Any) -> Any:
    """NaN/inf (e.g. a latency with no samples) as null: strict JSON readers reject NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_results(
    out_dir: Path, machine: dict[str, Any], results: list[BenchResult], duration_s: float
) -> tuple[Path, str]:
    """Write results.json and results.md; return the md path and the summary to print."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "machine": machine,
        "duration_s": round(duration_s, 1),
        "benchmarks": {r.name: r.to_json() for r in results},
    }
    json_text = json.dumps(_finite(payload), indent=2, default=str, allow_nan=False)
    (out_dir / "results.json").write_text(json_text + "\n")
    summary = machine_markdown(machine) + "\n" + "\n".join(markdown_tables(r) for r in results)
    plots = [f"![{Path(p).stem}]({Path(p).name})" for r in results for p in r.plots]
    explains = "\n".join(markdown_explains(r) for r in results if r.explains)
    full = summary + "\n## Plots\n\n" + "\n\n".join(plots) + "\n\n## Plans\n\n" + explains
    full += f"\nTotal run time: {duration_s:.0f} s.\n"
    path = out_dir / "results.md"
    path.write_text(full)
    return path, summary


# -- plotting ----------------------------------------------------------------------------------


def pyplot() -> Any:
    """matplotlib's pyplot drawing into files (every benchmark's plots), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")  # files only: there is no display, and none is wanted in CI
    import matplotlib.pyplot as plt

    return plt


def plot_lines(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, tuple[list[float], list[Figure]]],
    *,
    logx: bool = False,
    logy: bool = False,
) -> str:
    """One line per series through the figures' medians, with min..max error bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (xs, figures) in series.items():
        med = [f.median for f in figures]
        lo = [f.median - f.min for f in figures]
        hi = [f.max - f.median for f in figures]
        ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def plot_bars(path: Path, title: str, ylabel: str, bars: dict[str, Figure], *, logy: bool = False) -> str:
    """One bar per figure (median), min..max error bars."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = list(bars)
    med = [bars[k].median for k in labels]
    lo = [bars[k].median - bars[k].min for k in labels]
    hi = [bars[k].max - bars[k].median for k in labels]
    ax.bar(labels, med, yerr=[lo, hi], capsize=4, color="#4c72b0")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, axis="y", alpha=0.3)
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


class Sampler:
    """Run a query over and over on its own connection in a thread, while a round runs."""

    def __init__(self, url: str, fn: Callable[[psycopg.Connection[Any]], None], interval: float) -> None:
        self.url = url
        self.fn = fn
        self.interval = interval
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)

    def _loop(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                while not self.stop_event.is_set():
                    self.fn(conn)
                    self.stop_event.wait(self.interval)
        except BaseException as error:  # surfaced by stop(), not lost in a thread
            self.error = error

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(timeout=30)
        if self.error is not None:
            raise RuntimeError(f"sampler failed: {self.error!r}") from self.error
