"""export_delivery: postings delivered to the books through kill -9 and a failing target (issue 56).

Each trial posts `postings` invoices of an org with two targets, a loopback webhook (the
receiver of invoice_pipeline/samples/receiver.py) and a DATEV folder, each in batches of 2-4.
Then `rounds` delivery workers (real processes, pipeline_support/export_worker.py) are each
SIGKILLed at a random point: between a webhook's answer and the commit (the Nth request), after
a DATEV file's rename and before the commit (the Nth file), or at a random moment after delivery
started (mid-batch, mid-write). Meanwhile the receiver answers some requests 500, 429, with a
closed connection or a hang past the client's timeout, and is down (503) for the first requests
of some trials. After each kill the dead worker's leases are back-dated past the TTL (not waited
for); the next worker's sweep frees them. A last worker runs to the end with the receiver up.

Invariants (each a violation): every export row delivered; every posting booked exactly once
by the receiver (distinct idempotency keys accepted for it), under its export row's id; each
DATEV batch exactly one file, every posting in exactly one file once; a file seen at a kill
rewritten with the same bytes.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from chaos.common import ChaosContext, ScenarioResult, timed
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.receiver import WebhookReceiver
from pipeline_support.exports import (
    SECRET,
    age_export_leases,
    datev_target,
    post_invoices,
    sql,
    statuses,
    webhook_target,
)
from pipeline_support.helpers import wait_for

FAULTS = ("500", "429", "close", "hang")


def _worker(url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline_support.export_worker", url, "--ttl", "30", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _killed_round(
    url: str, work: Path, rng: random.Random, n: int, result: ScenarioResult
) -> dict[str, bytes]:
    """One worker, SIGKILLed at a random point; the DATEV files as they were at the kill."""
    marker, ready = work / f"marker{n}", work / f"ready{n}"
    point = rng.choice(["after_send", "after_rename", "moment"])
    extra = ["--ready", str(ready)]
    if point != "moment":
        extra += ["--crash-at", f"{point}:{rng.randint(1, 3)}", "--marker", str(marker)]
    proc = _worker(url, *extra)
    try:
        wait_for(lambda: ready.exists() or proc.poll() is not None, timeout=120, what="the worker's start")
        if point == "moment":
            time.sleep(rng.uniform(0, 0.4))
        else:
            wait_for(lambda: marker.exists() or proc.poll() is not None, timeout=120, what="the crash point")
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            result.failures_injected += 1
            result.count(f"killed_{point}")
        else:
            result.count("rounds_ended_before_the_kill")  # nothing (left) at that point
    finally:
        if proc.poll() is None:
            proc.kill()
    files = {p.name: p.read_bytes() for p in (work / "datev").glob("EXTF_*.csv")}
    age_export_leases(url)
    return files


def _check(
    url: str, receiver: WebhookReceiver, folder: Path, seen: dict[str, bytes], result: ScenarioResult
) -> None:
    for status, count in sql(
        url, "SELECT status, count(*) FROM exports WHERE status <> 'delivered' GROUP BY 1"
    ):
        result.violate(f"{count} export row(s) {status} at the end")
    postings = {
        str(r[0]): str(r[1])
        for r in sql(
            url,
            "SELECT e.posting_id, e.id FROM exports e JOIN export_targets t ON t.id = e.target_id WHERE t.kind = 'webhook'",
        )
    }
    booked = receiver.booked()
    for posting, key in postings.items():
        if booked.get(posting, 0) != 1:
            result.violate(f"posting {posting} booked {booked.get(posting, 0)} times")
        if receiver.accepted.get(key) != posting:
            result.violate(f"posting {posting} not accepted under its export row's id")
    files = {p.name: p.read_bytes() for p in folder.glob("EXTF_*.csv")}
    batches = sql(
        url,
        "SELECT count(DISTINCT batch_id) FROM exports e JOIN export_targets t ON t.id = e.target_id WHERE t.kind = 'datev'",
    )
    if len(files) != batches[0][0]:
        result.violate(f"{len(files)} DATEV files for {batches[0][0]} batches")
    numbers = sorted(
        line.split(";")[10] for b in files.values() for line in b.decode("cp1252").split("\r\n")[2:] if line
    )
    if numbers != sorted(set(numbers)) or len(numbers) != len(postings):
        result.violate(
            f"DATEV files hold {len(numbers)} records ({len(set(numbers))} distinct) for {len(postings)} postings"
        )
    for name, content in seen.items():
        if files.get(name) != content:
            result.violate(f"{name} rewritten with other bytes")
    result.count("requests", len(receiver.requests))
    result.count("redelivered_requests", len(receiver.requests) - len(receiver.accepted))


def _trial(ctx: ChaosContext, params: dict[str, int], rng: random.Random, result: ScenarioResult) -> None:
    url = ctx.new_database()
    work = ctx.scratch_dir("exports")
    store = InvoiceStore(url, max_size=2)
    seen: dict[str, bytes] = {}
    try:
        with WebhookReceiver(SECRET) as receiver:
            erp = webhook_target(
                store,
                "acme",
                receiver.url,
                work / "secret",
                batch_size=rng.randint(2, 4),
                retry_base=timedelta(0),
                max_attempts=1000,
                timeout_s=0.3,
            )
            books = datev_target(store, "acme", work / "datev", batch_size=rng.randint(2, 4))
            post_invoices(store, "acme", params["postings"])
            if rng.random() < 0.3:
                receiver.then(*["503"] * rng.randint(3, 8))  # the target down for a while
                result.count("target_down")
            receiver.then(
                *(rng.choice(FAULTS) if rng.random() < 0.2 else "200" for _ in range(3 * params["postings"]))
            )
            for n in range(params["rounds"]):
                seen.update(_killed_round(url, work, rng, n, result))
            receiver.default = "200"  # what is left of the script still plays; the last workers retry past it
            for _ in range(20):
                last = _worker(url)
                last.communicate(timeout=300)
                if statuses(url, erp).get("due", 0) == 0 and statuses(url, books).get("due", 0) == 0:
                    break
            _check(url, receiver, work / "datev", seen, result)
    finally:
        store.close()


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    rng = random.Random(seed)
    result = ScenarioResult("export_delivery", seed, dict(params))
    with timed(result):
        for _ in range(params["trials"]):
            _trial(ctx, params, rng, result)
            result.trials += 1
    return result
