"""`python -m chaos [--trials-scale N] [--seed S] [--only NAME ...]` (make chaos).

Starts its own embedded PostgreSQL in a temporary directory on a free port (or uses the server
of INVOICE_PIPELINE_DATABASE_URL, creating scratch databases there), runs the LONG sizes of the
scenarios and merges their figures, per scenario, into benchmarks/results/chaos.json.
Exit status 1 when any invariant was violated or a scenario crashed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from chaos import SCENARIOS
from chaos.common import ChaosContext, ScenarioResult, machine_facts, server_version
from invoice_pipeline.config import ENV_DATABASE_URL
from invoice_pipeline.db.embedded import EmbeddedPostgres
from invoice_pipeline.db.migrate import migrate
from pipeline_support.helpers import create_database, drop_database, free_port

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "chaos.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trials-scale", type=float, default=1.0, help="multiply every scenario's trial count"
    )
    parser.add_argument(
        "--seed", type=int, default=20261101, help="base seed (each scenario derives its own)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(SCENARIOS), help="run only these")
    parser.add_argument("--fast", action="store_true", help="the fast sizes the pytest suite uses")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser.parse_args(argv)


@contextmanager
def server(workdir: Path) -> Iterator[str]:
    external = os.environ.get(ENV_DATABASE_URL)
    if external:
        yield external
        return
    pg = EmbeddedPostgres(workdir / "pgdata", free_port())
    pg.start()
    try:
        yield pg.url("postgres")
    finally:
        pg.destroy()


def merge(out: Path, results: list[ScenarioResult], meta: dict[str, Any]) -> None:
    data: dict[str, Any] = {}
    if out.exists():
        try:
            data = json.loads(out.read_text())
        except json.JSONDecodeError:
            data = {}
    scenarios = data.setdefault("scenarios", {})
    for r in results:
        scenarios[r.name] = r.to_json() | {"run": meta}
    data["last_run"] = meta
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2, default=str) + "\n")


def print_table(results: list[ScenarioResult]) -> None:
    print()
    print(f"{'scenario':<20} {'trials':>7} {'injected':>9} {'violations':>10} {'seconds':>8}")
    for r in results:
        v = r.figures.get("violation_count", len(r.violations))
        print(f"{r.name:<20} {r.trials:>7} {r.failures_injected:>9} {v:>10} {r.duration_s:>8.1f}")


def seed_for(base: int, name: str) -> int:
    return base + sum(name.encode()) * 7919


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    args = parse_args(argv)
    names = args.only or list(SCENARIOS)
    results: list[ScenarioResult] = []
    crashed = False
    started = datetime.now(UTC)
    with tempfile.TemporaryDirectory(prefix="ip-chaos-") as tmp, server(Path(tmp)) as server_url:
        template = create_database(server_url, prefix="ip_chaos_template")
        migrate(template)
        ctx = ChaosContext(server_url, template.rsplit("/", 1)[1], Path(tmp))
        meta = {
            "started_at": started.isoformat(),
            "trials_scale": args.trials_scale,
            "base_seed": args.seed,
            "sizes": "fast" if args.fast else "long",
            "machine": machine_facts() | {"postgres": server_version(server_url)},
            "command": "python -m chaos " + " ".join(sys.argv[1:] if argv is None else argv),
        }
        try:
            for name in names:
                scenario = SCENARIOS[name]
                params = scenario.sized(not args.fast, args.trials_scale)
                seed = seed_for(args.seed, name)
                print(f"== {name} {params} seed={seed}", flush=True)
                t0 = time.monotonic()
                try:
                    result = scenario.load()(ctx, params, seed)
                except Exception:
                    crashed = True
                    result = ScenarioResult(name, seed, params)
                    result.violate("scenario crashed: " + traceback.format_exc()[-3000:])
                    result.duration_s = time.monotonic() - t0
                    ctx.cleanup()
                ctx.cleanup()
                results.append(result)
                print(json.dumps(result.to_json(), indent=2, default=str), flush=True)
                merge(args.out, [result], meta)
        finally:
            drop_database(server_url, template)
    print_table(results)
    print(f"\nfigures merged into {args.out}")
    violated = any(r.figures.get("violation_count", len(r.violations)) for r in results)
    return 1 if violated or crashed else 0


if __name__ == "__main__":
    raise SystemExit(main())
