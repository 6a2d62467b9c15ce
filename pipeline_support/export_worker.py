"""A real delivery worker for crash tests: `python -m pipeline_support.export_worker URL [--crash-at
POINT:N --marker FILE] [--owner NAME] [--ttl SECONDS]`.

It runs the engine's delivery loop (what `invoice-pipeline export run --once` runs) against the
database at URL. With --crash-at, at the Nth time the loop passes POINT (`after_send`: a webhook
request answered, before the commit; `after_rename`: a DATEV file renamed into place, before the
commit) it writes the marker file and waits there for ever: the test kills it with SIGKILL.
With --ready, it writes that file as delivery starts (a kill at a random moment after it).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from invoice_pipeline.engine.exports.delivery import CrashPoints, deliver
from invoice_pipeline.engine.store import InvoiceStore


def stop_at(n: int, marker: Path) -> Callable[[], None]:
    passed = 0

    def point() -> None:
        nonlocal passed
        passed += 1
        if passed == n:
            marker.write_text("here")
            while True:  # killed here
                time.sleep(60)

    return point


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("database_url")
    parser.add_argument("--crash-at", default="")
    parser.add_argument("--marker", type=Path)
    parser.add_argument("--owner", default="export-worker")
    parser.add_argument("--ttl", type=float, default=30)
    parser.add_argument("--ready", type=Path, help="written when the imports are done and delivery starts")
    parser.add_argument(
        "--go", type=Path, help="wait for this file before delivering (workers released together)"
    )
    args = parser.parse_args()
    crash = CrashPoints()
    if args.crash_at:
        point, _, n = args.crash_at.partition(":")
        hook = stop_at(int(n or 1), args.marker)
        crash = CrashPoints(**{point: hook})
    store = InvoiceStore(args.database_url, max_size=2, lock_ttl=timedelta(seconds=args.ttl))
    if args.ready is not None:
        args.ready.write_text("ready")
    while args.go is not None and not args.go.exists():
        time.sleep(0.01)
    try:
        report = deliver(store, args.owner, crash=crash)
    finally:
        store.close()
    print(f"delivered {report.delivered} retried {report.retried} dead {report.dead} lost {report.lost}")


if __name__ == "__main__":
    main()
