"""Scenario 1, redelivery storm: the same invoices requested at once from several processes.

Each trial is one invoice, requested 2-5 times by randomly chosen worker processes after random
delays: about a third of the requests run the real `process_invoice` job in process, the rest
are cheap competing consumers (`store.claims.acquire`, hold, give up). A quarter of the invoices
are reformatted copies of an earlier one — in the same org (must become duplicates) or in another
org (must stay originals). A watcher connection samples for two running jobs per invoice the
whole time; afterwards the invoices left for retry are drained through the batch job, as the
sensor would, and every invoice must be terminal with exactly one posting per original.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import asdict
from typing import Any

import psycopg
from dagster import DagsterInstance

from chaos.common import (
    ChaosContext,
    ScenarioResult,
    Watcher,
    check_common_invariants,
    timed,
    worker_context,
)
from chaos.worker import StormItem, batch_run_config, resources, storm_worker
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from pipeline_support.factories import json_invoice

WAVE = 6
SELLERS = [
    ("Nordwind Logistik GmbH", "DE811907980"),
    ("Blue Heron Consulting Ltd", "GB123456782"),
    # Every seller gives a VAT id: one that gave none would, from its second invoice on, be a
    # namesake of the vendor its first registered, held for a person (possible_impersonation,
    # issue 52), and this scenario is about redelivered messages, not about who is paid.
    ("Fjordlys AS", "NO974760673MVA"),
]


def make_invoices(store: InvoiceStore, rng: random.Random, n: int) -> dict[str, tuple[str, int]]:
    """n invoices; returns invoice id -> (org, family). Copies share their original's family."""
    families: list[tuple[str, str, str, str | None, str]] = []  # org, number, seller, vat, total
    out: dict[str, tuple[str, int]] = {}
    for i in range(n):
        if families and rng.random() < 0.25:
            family = rng.randrange(len(families))
            org, number, seller, vat, total = families[family]
            if rng.random() < 0.3:
                org = "globex" if org == "acme" else "acme"  # same invoice, other org: an original there
            digits = number.split("-")[1]
            number = rng.choice([f"INV {int(digits)}", f"inv{digits}", f"INV-{int(digits):08d}"])
        else:
            seller, vat = rng.choice(SELLERS)
            org = rng.choice(["acme", "globex"])
            number, total = f"INV-{i:06d}", f"{rng.randint(100, 99999) / 100:.2f}"
            families.append((org, number, seller, vat, total))
            family = len(families) - 1
        doc = json_invoice(number, seller, total, vat_id=vat, po_number=f"PO-{i}")
        ingested = store.documents.store_document(doc, org, f"storm-{i}.json")
        out[str(ingested.invoice_id)] = (org, family)
    return out


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    trials, processes = params["trials"], params.get("processes", 3)
    result = ScenarioResult("redelivery_storm", seed, dict(params))
    rng = random.Random(seed)
    url = ctx.new_database()
    work = ctx.scratch_dir("storm")
    with timed(result):
        store = InvoiceStore(url, max_size=2)
        try:
            invoices = make_invoices(store, rng, trials)
        finally:
            store.close()
        # Waves of a few invoices: every worker takes its share of a wave's requests, then all
        # wait at a barrier, so the redeliveries of one invoice really do arrive together.
        ids = list(invoices)
        waves = [ids[i : i + WAVE] for i in range(0, len(ids), WAVE)]
        per_worker: list[list[list[dict[str, Any]]]] = [[[] for _ in waves] for _ in range(processes)]
        requests = 0
        for w, wave in enumerate(waves):
            for inv in wave:
                count = rng.randint(2, 5)
                modes = ["pipeline"] + [
                    "pipeline" if rng.random() < 0.2 else "acquire" for _ in range(count - 1)
                ]
                for mode in modes:
                    item = StormItem(inv, mode, rng.randint(0, 15), rng.randint(0, 20))
                    per_worker[rng.randrange(processes)][w].append(asdict(item))
                    requests += 1
            for worker_waves in per_worker:
                rng.shuffle(worker_waves[w])
        mp = worker_context()
        outs = [work / f"storm-{i}.json" for i in range(processes)]
        barrier = mp.Barrier(processes)
        with Watcher(url) as watcher:
            procs = [
                mp.Process(target=storm_worker, args=(url, items, str(out), barrier))
                for items, out in zip(per_worker, outs, strict=True)
            ]
            for p in procs:
                p.start()
            for p in procs:
                p.join(3600)
                if p.exitcode != 0:
                    result.violate(f"storm worker {p.pid} exited with {p.exitcode}")
            # Drain: what the competing consumers handed back is retried through the batch job.
            _, batch = make_jobs(resources(url, lock_ttl_seconds=30, max_attempts=10**6))
            instance = DagsterInstance.ephemeral()
            drained = 0
            for _ in range(20):
                with psycopg.connect(url) as conn:
                    due = [
                        str(r[0])
                        for r in conn.execute(
                            "SELECT id FROM invoices WHERE status IN ('pending', 'failed') ORDER BY seq"
                        ).fetchall()
                    ]
                if not due:
                    break
                drained += len(due)
                batch.execute_in_process(
                    run_config=batch_run_config(due), instance=instance, raise_on_error=False
                )
        watcher.report(result)
        counts: dict[str, int] = defaultdict(int)
        for out in outs:
            if not out.exists():
                result.violate(f"storm worker left no report {out.name}")
                continue
            report = json.loads(out.read_text())
            for k, v in report["counts"].items():
                counts[k] += v
            for err in report["errors"]:
                if "Traceback" in err:
                    result.violate(f"storm worker crashed: {err[-500:]}")
        result.trials = trials
        result.failures_injected = requests - trials  # every request beyond the first is a redelivery
        result.figures.update(dict(counts))
        result.figures["requests"] = requests
        result.figures["drained_after_storm"] = drained
        status_counts = check_common_invariants(url, result)
        result.figures["invoices_by_status"] = status_counts
        _check_families(url, invoices, result)
    ctx.cleanup()
    return result


def _check_families(url: str, invoices: dict[str, tuple[str, int]], result: ScenarioResult) -> None:
    """Per (org, family): exactly one original and one posting; every other copy a duplicate of it."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT i.id::text, i.status, i.duplicate_status, i.duplicate_of::text, "
            "(SELECT count(*) FROM ledger_postings l WHERE l.invoice_id = i.id) FROM invoices i"
        ).fetchall()
    groups: dict[tuple[str, int], list[tuple[str, str, str | None, str | None, int]]] = defaultdict(list)
    for inv, status, dup, dup_of, posted in rows:
        groups[invoices[inv]].append((inv, status, dup, dup_of, posted))
    duplicates = 0
    for key, members in groups.items():
        originals = [m for m in members if m[2] == "original"]
        if len(originals) != 1:
            result.violate(f"family {key}: {len(originals)} originals among {len(members)} copies")
            continue
        if sum(m[4] for m in members) != 1:
            result.violate(f"family {key}: {sum(m[4] for m in members)} ledger postings")
        for m in members:
            if m[2] in ("duplicate", "suspected"):
                duplicates += 1
                if m[3] != originals[0][0]:
                    result.violate(f"family {key}: {m[0]} is a duplicate of {m[3]}, not of the original")
            elif m is not originals[0]:
                result.violate(f"family {key}: {m[0]} is {m[2]}")
    result.figures["families"] = len(groups)
    result.figures["duplicates_detected"] = duplicates
