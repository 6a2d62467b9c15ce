"""Scenario 4, two deployments on one invoice database.

Two independent processes, each with its own Dagster instance (`DagsterInstance.local_temp()`),
run a sensor-equivalent loop (claim what is due, plan runs with the sensor's own
plan_run_requests, execute them) plus the sweep, against the same invoice database at once —
while the parent keeps ingesting. Each invoice must be processed exactly once: one succeeded job,
one posting per original.

Not covered here: two real `invoice-pipeline dev` processes. With the same
INVOICE_PIPELINE_DATABASE_URL they derive the same `<db>_dagster` storage database, so they
would not be two independent instances but two daemons on one instance (see the report).
"""

from __future__ import annotations

import json
import random
from typing import Any

from chaos.common import (
    ChaosContext,
    ScenarioResult,
    Watcher,
    check_common_invariants,
    timed,
    worker_context,
)
from chaos.worker import deployment_worker
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.factories import json_invoice

DEPLOYMENTS = 2


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    trials, per_trial = params["trials"], params["invoices"]
    result = ScenarioResult("two_deployments", seed, dict(params))
    rng = random.Random(seed)
    mp = worker_context()
    totals: dict[str, int] = {}
    with timed(result):
        for trial in range(trials):
            url = ctx.new_database()
            work = ctx.scratch_dir(f"deploy{trial}")
            store = InvoiceStore(url, max_size=2)
            outs = [work / f"deployment-{d}.json" for d in range(DEPLOYMENTS)]

            def ingest(i: int, store: InvoiceStore = store, trial: int = trial) -> None:
                copy = i > 5 and rng.random() < 0.2
                n = rng.randrange(i) if copy else i
                store.documents.store_document(
                    json_invoice(f"INV {n}" if copy else f"INV-{n:05d}", total=f"{100 + n}.00"),
                    rng.choice(["acme", "globex"]),
                    f"d{trial}-{i}.json",
                )

            first = per_trial // 2
            for i in range(first):
                ingest(i)
            with Watcher(url) as watcher:
                procs = [
                    mp.Process(target=deployment_worker, args=(url, str(out), seed + trial * 10 + d, 600.0))
                    for d, out in enumerate(outs)
                ]
                for p in procs:
                    p.start()
                for i in range(first, per_trial):  # the rest arrives while both are running
                    ingest(i)
                for out in outs:
                    out.with_suffix(".done").touch()  # no more ingest: stop once all is finished
                for p in procs:
                    p.join(900)
                    if p.exitcode != 0:
                        result.violate(f"deployment process exited with {p.exitcode}")
            store.close()
            watcher.report(result)
            for out in outs:
                report: dict[str, Any] = (
                    json.loads(out.read_text()) if out.exists() else {"counts": {}, "errors": ["no report"]}
                )
                for k, v in report["counts"].items():
                    totals[k] = totals.get(k, 0) + v
                for err in report["errors"]:
                    result.violate(f"deployment crashed: {err[-800:]}")
            counts = check_common_invariants(url, result)
            result.figures.setdefault("invoices_by_status", {})
            for k, v in counts.items():
                result.figures["invoices_by_status"][k] = result.figures["invoices_by_status"].get(k, 0) + v
            result.trials += 1
            result.failures_injected += per_trial  # every invoice is exposed to two deployments
    result.figures.update(totals)
    ctx.cleanup()
    return result
