"""Dagster's side of a processing run: the job names, the run config both processing jobs read
(built and parsed in one place), the run keys, and the owner a run's leases carry.

The CLI, the sensor, the maintenance sweep and the ops all build and read runs through these;
the engine sees only what is its own (engine/runs.py: InvoiceRef, RunShape) and opaque owner
strings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from invoice_pipeline.engine.runs import InvoiceRef

RUN_OWNER_PREFIX = "dagster-run:"
PROCESS_INVOICE = "process_invoice"
PROCESS_INVOICE_BATCH = "process_invoice_batch"
# The op that reads each job's config: `start` for one invoice, `fan_out` for a batch.
SINGLE_CONFIG_OP = "start"
BATCH_CONFIG_OP = "fan_out"


def run_owner(run_id: str) -> str:
    """The owner a run's leases carry, so a sweep can tell Dagster which run died."""
    return f"{RUN_OWNER_PREFIX}{run_id}"


def run_id_of(owner: str | None) -> str | None:
    """The Dagster run that held a lease, when a run did (a bare acquire names a host and pid)."""
    return owner.removeprefix(RUN_OWNER_PREFIX) if owner and owner.startswith(RUN_OWNER_PREFIX) else None


def invoice_run_key(ref: InvoiceRef) -> str:
    key = f"invoice:{ref.invoice_id}:attempt:{ref.attempt}"
    return f"{key}:redrive:{ref.redrive}" if ref.redrive else key


def batch_run_key(refs: Sequence[InvoiceRef]) -> str:
    digest = hashlib.sha256(
        "\n".join(sorted(f"{r.invoice_id}:{r.attempt}:{r.redrive}" for r in refs)).encode()
    ).hexdigest()
    return f"batch:{digest[:24]}"


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
