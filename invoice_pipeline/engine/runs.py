"""What the engine knows of runs: which invoices a run is asked to process (InvoiceRef) and the
shape of the runs planned from what is due (RunShape). The CLI, the sensor and the ops plan
alike through these.

How a run is named, configured and launched is the orchestrator's (orchestration/run_requests.py:
job names, run config, run keys, the owner a run's leases carry); the engine sees only opaque
owner strings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

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


@dataclass(frozen=True)
class InvoiceRef:
    """An invoice a run is asked to process, and which attempt (None: the next one)."""

    invoice_id: str
    attempt: int | None = None
    # Bumped by a person's requeue: the same attempt number then gets a run key of its own.
    redrive: int = 0


def unique_refs(refs: Sequence[InvoiceRef]) -> list[InvoiceRef]:
    """One ref per invoice, the first given; its attempt travels with it.

    Dropping repeated ids must drop their attempts with them: numbering the survivors afresh
    gave [A, B, A, C] with [1, 2, 1, 3] to C as attempt 1.
    """
    first: dict[str, InvoiceRef] = {}
    for ref in refs:
        first.setdefault(ref.invoice_id, ref)
    return list(first.values())
