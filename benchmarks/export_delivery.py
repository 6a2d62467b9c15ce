"""export_delivery: what delivering postings to the books costs (issue 56; docs/exports.md).

(a) Delivery throughput: N postings due for one target, delivered by one `deliver` loop (what
`invoice-pipeline export run --once` runs) in batches of 100, timed from the first claim to the
last commit: to a loopback webhook (the receiver of invoice_pipeline/samples/receiver.py, in
this process: it shares the GIL with the deliverer) and to DATEV files (fsync per file).
(b) The posting path with one target configured against none: N invoices ingested, then timed
through every stage (the chunk loop of a run, in process, without Dagster), alternating an org
with one webhook target and an org with none, several rounds. The issue's aim: with a target
at least 0.8x the speed without.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.harness import BenchContext, BenchResult, register
from invoice_pipeline.engine.exports.delivery import deliver
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.receiver import WebhookReceiver
from pipeline_support.exports import (
    SECRET,
    datev_target,
    ingest_invoices,
    post_invoices,
    process_invoices,
    statuses,
    webhook_target,
)

NAME = "export_delivery"


def _throughput(ctx: BenchContext, result: BenchResult, count: int, kind: str, work: Path) -> None:
    url = ctx.database(f"{NAME}_{kind}")
    store = InvoiceStore(url, max_size=4)
    try:
        with WebhookReceiver(SECRET) as receiver:
            if kind == "webhook":
                target = webhook_target(store, "bench", receiver.url, work / "secret")
            else:
                target = datev_target(store, "bench", work / "datev")
            post_invoices(store, "bench", count)
            started = time.perf_counter()
            report = deliver(store, "bench")
            seconds = time.perf_counter() - started
        done = statuses(url, target).get("delivered", 0)
        result.check(f"{kind}: all {count} delivered", done == count, f"{done} delivered, {report}")
        result.figure(f"delivery to {kind}: postings/s", "postings/s", better="higher").add(count / seconds)
        result.figure(f"delivery to {kind}: wall time", "s").add(seconds)
    finally:
        store.close()


def _posting_path(ctx: BenchContext, result: BenchResult, count: int, rounds: int, work: Path) -> None:
    url = ctx.database(f"{NAME}_posting")
    store = InvoiceStore(url, max_size=4)
    try:
        webhook_target(store, "with-target", "http://127.0.0.1:9/unused", work / "secret")
        first = 1
        for _ in range(rounds):
            for org in ("no-target", "with-target"):
                ids = ingest_invoices(store, org, count, first)
                first += count
                started = time.perf_counter()
                process_invoices(store, ids)
                seconds = time.perf_counter() - started
                result.figure(f"posting path, {org}: invoices/s", "invoices/s", better="higher").add(
                    count / seconds
                )
    finally:
        store.close()
    result.ratio(
        "posting path, one target / none",
        "posting path, with-target: invoices/s",
        "posting path, no-target: invoices/s",
        note="the issue's aim: at least 0.8",
    )


@register(NAME, "postings delivered per second (webhook, DATEV); the posting path with one target vs none")
def run(ctx: BenchContext) -> BenchResult:
    count = ctx.pick(100, 1000)
    path_count = ctx.pick(50, 250)
    rounds = ctx.pick(2, 4)
    result = BenchResult(
        NAME,
        f"{count} postings delivered to a loopback webhook and to DATEV files (batches of 100); the posting "
        f"path on {path_count} JSON invoices with one webhook target and with none, {rounds} rounds each.",
        params={"postings": count, "posting_path_invoices": path_count, "rounds": rounds, "batch_size": 100},
    )
    work = Path(tempfile.mkdtemp(prefix="bench-exports-"))
    try:
        _throughput(ctx, result, count, "webhook", work)
        _throughput(ctx, result, count, "datev", work)
        _posting_path(ctx, result, path_count, rounds, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result
