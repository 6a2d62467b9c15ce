"""Code that runs inside chaos worker processes (forked from the preloaded fork server).

Workers report through a JSON file in their own directory, never through a shared queue: a
worker SIGKILLed while writing to a multiprocessing queue would leave its lock held and hang
every later reader. Gates are monkeypatches applied in the worker only, after the fork: the
product code under test is the real one, the gate just stops it at a chosen point and writes
`reached` so the parent can kill or freeze it there.
"""

from __future__ import annotations

import json
import os
import random
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from dagster import DagsterInstance

import invoice_pipeline.engine.dedupe as dedupe_module
from invoice_pipeline.engine.runs import InvoiceRef
from invoice_pipeline.engine.store import Claims, Database, Dedupe, Documents, InvoiceStore, Payments
from invoice_pipeline.orchestration import run_requests
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.resources import DocumentReader, InvoiceDatabase

GATE_TIMEOUT_S = 600
BARRIER_TIMEOUT_S = 300


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, default=str))
    tmp.rename(path)  # atomic: the parent never reads half a file


def resources(url: str, reader: dict[str, Any] | None = None, **db: Any) -> dict[str, object]:
    """`reader` configures the DocumentReader (its sandbox limits); `db` the InvoiceDatabase."""
    config: dict[str, Any] = {
        "heartbeat_seconds": 0.2,
        "lock_ttl_seconds": 1,
        "retry_base_seconds": 0,
        "max_attempts": 50,
    }
    config.update(db)
    return {
        "invoice_db": InvoiceDatabase(database_url=url, **config),
        "document_reader": DocumentReader(**(reader or {})),
    }


# Runs log to the instance; the console of a chaos run would be thousands of lines.
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def single_run_config(invoice_id: str) -> dict[str, Any]:
    return run_requests.single_run_config(InvoiceRef(invoice_id)) | QUIET


def batch_run_config(invoice_ids: list[str]) -> dict[str, Any]:
    return run_requests.batch_run_config([InvoiceRef(i) for i in invoice_ids]) | QUIET


# -- gates ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GateSpec:
    """Where to stop. phase: read_text | read_fields | between_steps | dedupe_txn | before_commit |
    after_commit | none. `target` is the step (between_steps) or store method (commit phases)."""

    phase: str
    target: str = ""


def _gate(gate_dir: Path, label: str) -> None:
    write_json(gate_dir / "reached.json", {"label": label, "pid": os.getpid(), "t": time.time()})
    deadline = time.monotonic() + GATE_TIMEOUT_S
    while not (gate_dir / "open").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {label} never opened")
        time.sleep(0.005)


class UnknownStopPoint(LookupError):
    """A gate names a stop point the product no longer has (a renamed store method or stage)."""


def gate_label(spec: GateSpec) -> str:
    """The label the gate writes to reached.json when it stops there (the stop point's name)."""
    if spec.phase == "between_steps":
        return f"between_steps:before_{spec.target}"
    if spec.phase in ("before_commit", "after_commit"):
        return f"{spec.phase}:{spec.target}"
    return spec.phase


# The parts of the store whose chunk writes a commit gate may stop (kill9's WRITES).
GATED_PARTS: tuple[type, ...] = (Documents, Dedupe, Claims, Payments)


def write_part(name: str) -> type:
    """The part's class that has the chunk write `name`: the gate patches it there. For a name
    no part has, Documents, where `need` then reports it."""
    return next((part for part in GATED_PARTS if callable(getattr(part, name, None))), Documents)


def check_gate(spec: GateSpec) -> None:
    """Raise UnknownStopPoint unless every name the gate patches or matches exists.

    A gate on a missing name would otherwise fail only inside the worker (or, for a step name,
    never fire at all): the trial would count as "not reached" instead of failing at once.
    """
    from invoice_pipeline.engine.stages import STAGES

    def need(owner: object, name: str) -> None:
        if not callable(getattr(owner, name, None)):
            raise UnknownStopPoint(
                f"stop point {gate_label(spec)}: {getattr(owner, '__name__', owner)}.{name} does not exist"
            )

    if spec.phase in ("read_text", "read_fields"):
        need(DocumentReader, spec.phase)
    elif spec.phase == "between_steps":
        need(Documents, "record_steps")
        stages = [s.name for s in STAGES]
        if spec.target not in stages[1:]:
            raise UnknownStopPoint(
                f"stop point {gate_label(spec)}: no stage {spec.target!r} after the first (stages: {stages})"
            )
    elif spec.phase == "dedupe_txn":
        need(dedupe_module, "find_match")
    elif spec.phase in ("before_commit", "after_commit"):
        need(Database, "transaction")
        need(write_part(spec.target), spec.target)
    elif spec.phase != "none":
        raise UnknownStopPoint(f"unknown gate phase {spec.phase}")


def install_gate(spec: GateSpec, gate_dir: Path) -> None:
    """Patch the product in this process so that it stops at spec's point, once."""
    check_gate(spec)
    fired = [False]

    def gate(label: str) -> None:
        if not fired[0]:
            fired[0] = True
            _gate(gate_dir, label)

    if spec.phase in ("read_text", "read_fields"):
        original = getattr(DocumentReader, spec.phase)

        def gated_read(self: DocumentReader, *args: Any, **kwargs: Any) -> Any:
            gate(spec.phase)
            return original(self, *args, **kwargs)

        setattr(DocumentReader, spec.phase, gated_read)
    elif spec.phase == "between_steps":
        original_record = Documents.record_steps

        def gated_record(self: Documents, step: str, leases: Any, started: set[Any]) -> Any:
            if step == spec.target and started:
                gate(gate_label(spec))
            return original_record(self, step, leases, started)

        setattr(Documents, "record_steps", gated_record)  # noqa: B010  # patched, so not type-checked
    elif spec.phase == "dedupe_txn":
        # find_match runs inside the store's transaction that holds the business key's advisory
        # lock and the job row's fence lock: stopping here stops mid-transaction.
        original_find = dedupe_module.find_match

        def gated_find(*args: Any, **kwargs: Any) -> Any:
            gate("dedupe_txn")
            return original_find(*args, **kwargs)

        dedupe_module.find_match = gated_find
    elif spec.phase in ("before_commit", "after_commit"):
        _install_commit_gate(spec, gate)


def _install_commit_gate(spec: GateSpec, gate: Callable[[str], None]) -> None:
    armed = [False]
    # Transactions the gated method committed. A chunk write of no items (settle's
    # quarantine_many of a chunk with nothing to quarantine) opens none: stopping "after its
    # commit" would then stop after nothing, and a stop point the product never really passes
    # would count as reached.
    committed = [0]
    original_transaction = Database.transaction
    part = write_part(spec.target)
    original_method = getattr(part, spec.target)

    @contextmanager
    def gated_transaction(self: Database) -> Iterator[Any]:
        with original_transaction(self) as conn:
            yield conn
            if armed[0] and spec.phase == "before_commit":
                # The write is done, the transaction still open: COMMIT is the next thing sent.
                gate(gate_label(spec))
        if armed[0]:
            committed[0] += 1

    def gated_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        armed[0], committed[0] = True, 0
        try:
            value = original_method(self, *args, **kwargs)
        finally:
            armed[0] = False
        if spec.phase == "after_commit" and committed[0]:
            gate(gate_label(spec))  # committed; the worker has not acted on it yet
        return value

    setattr(Database, "transaction", gated_transaction)  # noqa: B010  # patched, so not type-checked
    setattr(part, spec.target, gated_method)


# -- entry points -------------------------------------------------------------------------------------


def pipeline_worker(
    url: str, invoice_id: str, run_id: str, dagster_home: str, gate_dir: str, phase: str, target: str
) -> None:
    """One process_invoice run on a persistent instance, stopped at a gate if asked."""
    out = Path(gate_dir)
    try:
        install_gate(GateSpec(phase, target), out)
        job, _ = make_jobs(resources(url))
        write_json(out / "started.json", {"pid": os.getpid()})
        with DagsterInstance.from_config(dagster_home) as instance:
            result = job.execute_in_process(
                run_config=single_run_config(invoice_id),
                instance=instance,
                raise_on_error=False,
                run_id=run_id,
            )
        write_json(out / "result.json", {"success": result.success})
    except BaseException:
        write_json(out / "result.json", {"success": False, "error": traceback.format_exc()})
        raise


@dataclass(frozen=True)
class StormItem:
    invoice_id: str
    mode: str  # "pipeline" | "acquire"
    delay_ms: int
    hold_ms: int


def storm_worker(url: str, waves: list[list[dict[str, Any]]], out: str, barrier: Any) -> None:
    """Request the same invoices as the other storm workers, in its own random order and pace."""
    store = InvoiceStore(url, max_size=2)
    job, _ = make_jobs(resources(url, lock_ttl_seconds=30, max_attempts=10**6))
    instance = DagsterInstance.ephemeral()
    counts = {"pipeline_runs": 0, "pipeline_failed_runs": 0, "acquire_won": 0, "acquire_lost": 0}
    errors: list[str] = []
    try:
        for wave in waves:
            barrier.wait(BARRIER_TIMEOUT_S)
            for raw in wave:
                _storm_request(StormItem(**raw), store, job, instance, counts, errors)
    except BaseException:
        errors.append(traceback.format_exc())
    finally:
        store.close()
        write_json(Path(out), {"counts": counts, "errors": errors[:20]})


def _storm_request(
    item: StormItem,
    store: InvoiceStore,
    job: Any,
    instance: DagsterInstance,
    counts: dict[str, int],
    errors: list[str],
) -> None:
    time.sleep(item.delay_ms / 1000)  # the injected random delay of this redelivery
    if item.mode == "pipeline":
        result = job.execute_in_process(
            run_config=single_run_config(item.invoice_id), instance=instance, raise_on_error=False
        )
        counts["pipeline_runs"] += 1
        if not result.success:
            counts["pipeline_failed_runs"] += 1
            failure = [e.message for e in result.all_events if e.is_failure]
            errors.append(f"{item.invoice_id}: {failure[:1]}")
        return
    state = store.documents.invoice_state(item.invoice_id)
    if state is None or state.is_terminal:
        return
    lease = store.claims.acquire(item.invoice_id, state.attempts + 1, owner=f"storm:{os.getpid()}")
    if lease is None:
        counts["acquire_lost"] += 1
        return
    counts["acquire_won"] += 1
    time.sleep(item.hold_ms / 1000)
    # A redelivered consumer that got the lock and gave up: it must hand the invoice
    # back for retry without having written anything.
    store.claims.fail(
        lease.job_id, "storm: redelivered request abandoned", max_attempts=10**6, retry_base=timedelta(0)
    )


def batch_worker(
    url: str, invoice_ids: list[str], out: str, db: dict[str, Any], reader: dict[str, Any] | None = None
) -> None:
    """One process_invoice_batch run on an ephemeral instance."""
    try:
        _, batch = make_jobs(resources(url, reader, **db))
        result = batch.execute_in_process(
            run_config=batch_run_config(invoice_ids),
            instance=DagsterInstance.ephemeral(),
            raise_on_error=False,
        )
        write_json(Path(out), {"success": result.success})
    except BaseException:
        write_json(Path(out), {"success": False, "error": traceback.format_exc()})
        raise


__all__ = ["GateSpec", "StormItem", "UnknownStopPoint", "asdict", "check_gate", "gate_label"]


def deployment_worker(url: str, out: str, seed: int, deadline_s: float) -> None:
    """One deployment: its own Dagster instance, a sensor-equivalent loop, and the sweep.

    Each tick claims what is due with request_timeout 0, so the other deployment's requests do
    not hide invoices from this one: both race for the same invoices on purpose. The requests
    are planned by the sensor's own plan_run_requests and executed on this instance.
    """
    from invoice_pipeline.engine.runs import RunShape
    from invoice_pipeline.orchestration.maintenance import run_maintenance
    from invoice_pipeline.orchestration.sensors.new_invoices import plan_run_requests

    rng = random.Random(seed)
    store = InvoiceStore(url, max_size=2)
    db = InvoiceDatabase(
        database_url=url, heartbeat_seconds=0.2, lock_ttl_seconds=2, retry_base_seconds=0, max_attempts=50
    )
    jobs = {j.name: j for j in make_jobs(resources(url, lock_ttl_seconds=2))}
    counts = {"ticks": 0, "runs": 0, "failed_runs": 0, "maintenance": 0}
    errors: list[str] = []
    try:
        with DagsterInstance.local_temp() as instance:
            deadline = time.monotonic() + deadline_s
            while time.monotonic() < deadline:
                counts["ticks"] += 1
                due = store.claims.claim_due_invoices(limit=rng.randint(3, 30), request_timeout=timedelta(0))
                if not due:
                    summary = store.reporting.status_summary()
                    if not any(summary.by_status.get(s, 0) for s in ("pending", "processing", "failed")):
                        if Path(out).with_suffix(".done").exists():
                            break
                    counts["maintenance"] += 1
                    run_maintenance(db, instance)
                    time.sleep(0.05)  # an idle sensor interval; nothing to synchronise with
                    continue
                for request in plan_run_requests(due, RunShape(rng.randint(3, 12))):
                    run_config = dict(request.run_config)
                    run_config["loggers"] = {"console": {"config": {"log_level": "CRITICAL"}}}
                    assert request.job_name is not None, request
                    result = jobs[request.job_name].execute_in_process(
                        run_config=run_config, instance=instance, tags=request.tags, raise_on_error=False
                    )
                    counts["runs"] += 1
                    counts["failed_runs"] += 0 if result.success else 1
    except BaseException:
        errors.append(traceback.format_exc())
    finally:
        store.close()
        write_json(Path(out), {"counts": counts, "errors": errors})
