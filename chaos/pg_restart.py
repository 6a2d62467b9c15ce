"""Scenario 3, PostgreSQL restarted under running pipelines.

A dedicated embedded server (the suite's session server is shared, so it is never touched): two
worker processes run batch jobs over the invoices while the server is stopped ('fast' or
'immediate', chosen at random) once they are mid-run (synchronised on step_events rows), kept
down a random 0.2-1.5 s, and started again. Runs either ride it out through the ops'
RetryPolicy or fail cleanly; then the sweep and the batch job finish what is left. The parent's
own InvoiceStore pool, opened before the first restart and used after, must reconnect.

The outage must hit running batches (issue 24: "30 succeeded, 0 failed" could not tell an
interrupted run from one that finished before the restart). The stop waits for a snapshot,
taken just before it, with the step threshold passed AND jobs running; the snapshot's
transaction holds those jobs' rows (FOR SHARE) until the server stops under it, so none of them
can finish in between (before, jobs that finished between the snapshot and the stop were not
counted, and a trial where all of them did failed as "no run in flight"). After the restart, a
job of that snapshot that finished after the new server started (or has not finished) was
running when the server went down. A trial with none fails; `jobs_in_flight_at_stop` and
`runs_in_flight_at_stop` (distinct lease owners = Dagster runs) per trial are in the figures.
What breaking it showed (2026-12-01, fast sizes): waiting for both workers to exit between
the snapshot and the stop (the outage after the runs) failed both trials with "trial N: no run
was in flight when the server stopped (0 of the 12 job(s) running at the snapshot before the
stop were still running when it went down)", while `runs_during_restart` read "succeeded 4,
failed 0", exactly as in the real run (where 12 jobs of 2 runs were in flight each time).
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import psycopg
from dagster import DagsterInstance

from chaos.common import (
    ChaosContext,
    ScenarioResult,
    check_common_invariants,
    timed,
    worker_context,
)
from chaos.worker import batch_run_config, batch_worker, resources
from invoice_pipeline.db.embedded import EmbeddedPostgres
from invoice_pipeline.db.migrate import migrate
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.maintenance import run_maintenance
from invoice_pipeline.orchestration.resources import InvoiceDatabase
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import create_database, free_port, wait_for

DB: dict[str, Any] = {"heartbeat_seconds": 0.3, "lock_ttl_seconds": 3, "max_attempts": 50}


def _step_events(url: str) -> int:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            row = conn.execute("SELECT count(*) FROM step_events").fetchone()
        return int(row[0]) if row else 0
    except psycopg.OperationalError:
        return -1


def _snapshot(url: str) -> tuple[int, list[str], psycopg.Connection[Any] | None]:
    """(step_events so far, ids of the running jobs, the connection that holds them).

    The running jobs' rows are locked FOR SHARE in an open transaction: none of them can be
    finished (nor written behind its fence) until that transaction ends, and it ends only when
    the caller closes the connection, or when the server stops under it. So every job of the
    snapshot is still running when the server goes down, however long the stop takes to come.
    (-1, [], None) while unreachable.
    """
    try:
        conn = psycopg.connect(url, connect_timeout=2)
    except psycopg.OperationalError:
        return -1, [], None
    try:
        running = [
            str(r[0])
            for r in conn.execute(
                "SELECT id FROM processing_jobs WHERE status = 'running' FOR SHARE"
            ).fetchall()
        ]
        row = conn.execute("SELECT count(*) FROM step_events").fetchone()
        return (int(row[0]) if row else -1), running, conn
    except psycopg.OperationalError:
        conn.close()
        return -1, [], None


def _in_flight(url: str, job_ids: list[str]) -> tuple[int, int]:
    """(jobs, distinct owners) among job_ids still running when the current server started:
    running at the snapshot before the stop, and finished only after the restart (or not yet)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT owner) FROM processing_jobs WHERE id = ANY(%s::uuid[]) "
            "AND (finished_at IS NULL OR finished_at >= pg_postmaster_start_time())",
            (job_ids,),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _no_live_lease(url: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM processing_jobs WHERE status = 'running' "
            "AND heartbeat_at > clock_timestamp() - make_interval(secs => %s)",
            (DB["lock_ttl_seconds"],),
        ).fetchone()
    return row is not None and row[0] == 0


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    trials, per_trial = params["trials"], params["invoices"]
    result = ScenarioResult("postgres_restart", seed, dict(params))
    rng = random.Random(seed)
    work = ctx.scratch_dir("pgrestart")
    server = EmbeddedPostgres(ctx.short_dir("pg") / "pgdata", free_port())
    server.start()
    mp = worker_context()
    modes: dict[str, int] = {}
    run_outcomes = {"succeeded": 0, "failed": 0}
    downtimes: list[float] = []
    jobs_in_flight: list[int] = []
    runs_in_flight: list[int] = []
    try:
        url = create_database(server.url("postgres"), prefix="ip_chaos_restart")
        migrate(url)
        store = InvoiceStore(url, max_size=2)  # opened once: it must survive every restart
        _, batch = make_jobs(resources(url, **DB))
        instance = DagsterInstance.ephemeral()
        db = InvoiceDatabase(database_url=url, retry_base_seconds=0, **DB)
        with timed(result):
            for trial in range(trials):
                ids = [
                    str(
                        store.documents.store_document(
                            json_invoice(f"PG-{trial}-{i}", total=f"{rng.randint(100, 99999) / 100:.2f}"),
                            rng.choice(["acme", "globex"]),
                            f"pg-{trial}-{i}.json",
                        ).invoice_id
                    )
                    for i in range(per_trial)
                ]
                baseline = _step_events(url)
                halves = [ids[0::2], ids[1::2]]
                outs = [work / f"t{trial}-w{w}.json" for w in range(2)]
                procs = [
                    mp.Process(target=batch_worker, args=(url, half, str(out), DB))
                    for half, out in zip(halves, outs, strict=True)
                ]
                for p in procs:
                    p.start()
                # Mid-run: a random number of steps in, of the ~6 per invoice this trial has to do,
                # with jobs running (not between two chunks). The snapshot that satisfied the
                # condition is the last state before the stop: its running jobs are checked below.
                threshold = baseline + rng.randint(1, per_trial * 6 // 2)

                def mid_flight(
                    threshold: int = threshold, procs: list[Any] = procs
                ) -> tuple[list[str], psycopg.Connection[Any] | None] | None:
                    events, running, holding = _snapshot(url)
                    if (events >= threshold and running) or not any(p.is_alive() for p in procs):
                        return (running, holding)  # truthy even when empty (the workers are gone)
                    if holding is not None:
                        holding.close()
                    return None

                found = wait_for(mid_flight, timeout=120, interval=0.01, what="runs to be mid-flight")
                assert found is not None
                running_at_stop, holding = found
                mode = rng.choice(["fast", "immediate"])
                down = rng.uniform(0.2, 1.5)
                t0 = time.monotonic()
                server.stop(mode=mode)
                if holding is not None:
                    holding.close()  # its session ended with the server, and its locks with it
                time.sleep(down)  # the injected outage itself
                server.start()
                downtimes.append(time.monotonic() - t0)
                modes[mode] = modes.get(mode, 0) + 1
                result.failures_injected += 1
                for p in procs:
                    p.join(600)
                    if p.exitcode != 0:
                        result.violate(f"batch worker exited with {p.exitcode}")
                for out in outs:
                    outcome: dict[str, Any] = (
                        json.loads(out.read_text())
                        if out.exists()
                        else {"success": False, "error": "no report"}
                    )
                    if "Traceback" in outcome.get("error", ""):
                        result.violate(f"batch worker crashed: {outcome['error'][-800:]}")
                    run_outcomes["succeeded" if outcome.get("success") else "failed"] += 1
                jobs, runs = _in_flight(url, running_at_stop)
                jobs_in_flight.append(jobs)
                runs_in_flight.append(runs)
                if jobs == 0:
                    result.violate(
                        f"trial {trial}: no run was in flight when the server stopped (0 of the "
                        f"{len(running_at_stop)} job(s) running at the snapshot before the stop were still "
                        "running when it went down); the outage hit nothing"
                    )
                _drain(url, store, db, batch, instance, ids, result)
                result.trials += 1
            store.close()
        result.figures["stops_by_mode"] = modes
        result.figures["runs_during_restart"] = run_outcomes
        result.figures["outage_seconds_max"] = round(max(downtimes, default=0), 2)
        result.figures["jobs_in_flight_at_stop"] = jobs_in_flight
        result.figures["runs_in_flight_at_stop"] = runs_in_flight
        result.figures["trials_with_runs_in_flight"] = sum(1 for n in jobs_in_flight if n)
        result.figures["invoices"] = trials * per_trial
        result.figures["invoices_by_status"] = check_common_invariants(url, result)
    finally:
        server.destroy()
    return result


def _drain(
    url: str,
    store: InvoiceStore,
    db: InvoiceDatabase,
    batch,
    instance: DagsterInstance,
    ids: list[str],
    result: ScenarioResult,
) -> None:
    """What the sweep schedule and the sensor would do: sweep, reschedule, process what is due."""
    for _ in range(15):
        summary = store.reporting.status_summary()  # through the pool that lived through the restart
        pending = [
            i
            for i in ids
            if (state := store.documents.invoice_state(i)) is not None and not state.is_terminal
        ]
        if not pending:
            return
        if summary.locks_held:
            wait_for(
                lambda: _no_live_lease(url), timeout=30, interval=0.1, what="dead holders' leases to go stale"
            )
        run_maintenance(db, None)
        due = [
            i
            for i in pending
            if (s := store.documents.invoice_state(i)) is not None and s.status in ("pending", "failed")
        ]
        if due:
            result.count("drain_runs")
            batch.execute_in_process(
                run_config=batch_run_config(due), instance=instance, raise_on_error=False
            )
    result.violate(f"invoices still unfinished after draining: {pending[:5]}")
