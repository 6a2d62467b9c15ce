"""Conventions that tie an invoice to the Dagster runs processing it. No Dagster import: the CLI,
the sensor, the maintenance sweep and the ops all build and read runs through these.

- the owner a run's leases carry (so a sweep can tell which run died);
- run keys (so Dagster launches each attempt once, and a redrive gets a new one);
- the run config of both processing jobs, built and parsed in one place;
- the shape of the runs planned from what is due (RunShape).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

RUN_OWNER_PREFIX = "dagster-run:"
PROCESS_INVOICE = "process_invoice"
PROCESS_INVOICE_BATCH = "process_invoice_batch"
# The op that reads each job's config: `start` for one invoice, `fan_out` for a batch.
SINGLE_CONFIG_OP = "start"
BATCH_CONFIG_OP = "fan_out"
# A batch is claimed and worked in chunks of this many invoices: one lock statement, one fenced
# write and one asset materialization per stage per chunk, instead of one per invoice. What a
# crash costs does not grow with it (stages save finished documents every second or so).
# Measured through `invoice-pipeline process` on 500 UBL invoices: 5.5 s with chunks of 100,
# 4.8 s with 250, 4.7 s with 500 (benchmarks/default_path.py).
DEFAULT_CHUNK_SIZE = 250
DEFAULT_CONCURRENT_RUNS = 4


@dataclass(frozen=True)
class RunShape:
    """How due invoices become runs, from one setting (INVOICE_PIPELINE_BATCH_SIZE).

    The sensor and `invoice-pipeline process` plan alike: whatever is due when they look goes
    into runs of up to `batch_size` invoices (a trickle's tick shares one run, a backlog gets as
    few runs as it can), each worked in chunks of `chunk_size`; up to `concurrent_runs` runs
    execute at once (dagster.yaml's queue limit: the sensor plans at most that many runs' worth
    per tick, and a trickle's run never waits behind more than that; `process` runs that many
    at most, one process per core).
    """

    batch_size: int

    @property
    def chunk_size(self) -> int:
        return min(DEFAULT_CHUNK_SIZE, self.batch_size)

    @property
    def concurrent_runs(self) -> int:
        return DEFAULT_CONCURRENT_RUNS

    def workers(self, due: int, cores: int) -> int:
        """How many processes `invoice-pipeline process` works `due` invoices with: one per
        core, up to `concurrent_runs`, and never more than there are chunks to give them."""
        return max(1, min(self.concurrent_runs, cores, -(-due // self.chunk_size)))

    def claim_size(self, due: int, workers: int) -> int:
        """How many invoices each of `workers` claims per run: the backlog cut evenly, up to
        `batch_size`."""
        return max(1, min(self.batch_size, -(-due // workers)))

    def batches(self, items: Sequence[T]) -> list[Sequence[T]]:
        """`items` cut into runs: as few as `batch_size` allows, of even size."""
        if not items:
            return []
        runs = -(-len(items) // self.batch_size)
        size = -(-len(items) // runs)
        return [items[i : i + size] for i in range(0, len(items), size)]


def run_owner(run_id: str) -> str:
    """The owner a run's leases carry, so a sweep can tell Dagster which run died."""
    return f"{RUN_OWNER_PREFIX}{run_id}"


def run_id_of(owner: str | None) -> str | None:
    """The Dagster run that held a lease, when a run did (a bare acquire names a host and pid)."""
    return owner.removeprefix(RUN_OWNER_PREFIX) if owner and owner.startswith(RUN_OWNER_PREFIX) else None


@dataclass(frozen=True)
class InvoiceRef:
    """An invoice a run is asked to process, and which attempt (None: the next one)."""

    invoice_id: str
    attempt: int | None = None
    # Bumped by a person's requeue: the same attempt number then gets a run key of its own.
    redrive: int = 0


def invoice_run_key(ref: InvoiceRef) -> str:
    key = f"invoice:{ref.invoice_id}:attempt:{ref.attempt}"
    return f"{key}:redrive:{ref.redrive}" if ref.redrive else key


def batch_run_key(refs: Sequence[InvoiceRef]) -> str:
    digest = hashlib.sha256(
        "\n".join(sorted(f"{r.invoice_id}:{r.attempt}:{r.redrive}" for r in refs)).encode()
    ).hexdigest()
    return f"batch:{digest[:24]}"


def unique_refs(refs: Sequence[InvoiceRef]) -> list[InvoiceRef]:
    """One ref per invoice, the first given; its attempt travels with it.

    Dropping repeated ids must drop their attempts with them: numbering the survivors afresh
    gave [A, B, A, C] with [1, 2, 1, 3] to C as attempt 1.
    """
    first: dict[str, InvoiceRef] = {}
    for ref in refs:
        first.setdefault(ref.invoice_id, ref)
    return list(first.values())


def refs_from_lists(invoice_ids: Sequence[str], attempts: Sequence[int] | None) -> list[InvoiceRef]:
    """Refs from the batch config's parallel lists (attempts, when given, one per id)."""
    if attempts is not None and len(attempts) != len(invoice_ids):
        raise ValueError("attempts must have one entry per invoice id")
    return [
        InvoiceRef(invoice_id, attempts[i] if attempts else None) for i, invoice_id in enumerate(invoice_ids)
    ]


def single_run_config(ref: InvoiceRef) -> dict[str, Any]:
    config: dict[str, Any] = {"invoice_id": ref.invoice_id}
    if ref.attempt is not None:
        config["attempt"] = ref.attempt
    return {"ops": {SINGLE_CONFIG_OP: {"config": config}}}


def batch_run_config(refs: Sequence[InvoiceRef], chunk_size: int | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"invoice_ids": [r.invoice_id for r in refs]}
    if any(r.attempt is not None for r in refs):
        if not all(r.attempt is not None for r in refs):
            raise ValueError("give an attempt for every invoice of a batch, or for none")
        config["attempts"] = [r.attempt for r in refs]
    if chunk_size is not None:
        config["chunk_size"] = chunk_size
    return {"ops": {BATCH_CONFIG_OP: {"config": config}}}


def invoice_ids_of(run_config: Mapping[str, Any] | None) -> list[str]:
    """The invoice ids a run of either processing job names in its config."""
    ops: Mapping[str, Any] = (run_config or {}).get("ops", {}) if isinstance(run_config, Mapping) else {}
    single = ops.get(SINGLE_CONFIG_OP, {}).get("config", {}).get("invoice_id")
    if single:
        return [str(single)]
    return [str(i) for i in ops.get(BATCH_CONFIG_OP, {}).get("config", {}).get("invoice_ids", [])]
