"""A plain engine worker for the partition scenarios: `python -m pipeline_support.partition_worker CONFIG`.

Run inside a worker host's network namespace (pipeline_support.netns.Cluster.run), it shares
only PostgreSQL with the other hosts: each tick it sweeps stale leases and reschedules their
invoices (what the sweep schedule does), claims a chunk of due invoices and runs every stage
over it with the engine's chunk loop (ChunkLoop: claim, work, drop) and a LeaseKeeper heartbeating
the chunk's leases, like an op.

CONFIG is a JSON file: url, owner, events (a JSONL file this worker appends to), ttl_s,
heartbeat_s, chunk, deadline_s, self_fence (bool), stop_file (exit once it exists and nothing
is due, or it exists and no connection came within a TTL), gate_dir (the first document read waits there: writes `reached`, waits for `open`),
doc_delay_s (each document read takes at least this long: the expensive step).

Every fenced chunk write is recorded (the job ids it carried, which were written, which the
fence refused as lost), and every heartbeat (ok, failed, how long it blocked): the parent
computes the figures from these events and checks them against the database.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg_pool import PoolTimeout

from invoice_pipeline.documents import extract_fields, extract_text
from invoice_pipeline.engine.chunk_loop import ChunkLoop
from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.stages import Lost, StageEnv
from invoice_pipeline.engine.store import InvoiceStore

_events_lock = threading.Lock()


class Events:
    def __init__(self, path: Path, owner: str) -> None:
        self.path = path
        self.owner = owner

    def __call__(self, ev: str, **data: Any) -> None:
        line = json.dumps({"t": time.time(), "ev": ev, "owner": self.owner, **data}, default=str)
        with _events_lock, self.path.open("a") as f:
            f.write(line + "\n")


class Parser:
    """The real document code, in process (no sandbox), slowed to `delay` per document."""

    def __init__(self, delay: float, gate_dir: str | None, events: Events) -> None:
        self.delay = delay
        self.gate = Path(gate_dir) if gate_dir else None
        self.events = events

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> Any:
        if self.gate is not None:
            gate, self.gate = self.gate, None
            (gate / "reached").write_text(str(os.getpid()))
            self.events("gate_reached")
            deadline = time.monotonic() + 300
            while not (gate / "open").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            self.events("gate_passed")
        time.sleep(self.delay)
        self.events("document_read")
        return extract_text(content, filename, max_bytes=max_bytes)

    def read_fields(self, extracted: Any) -> Any:
        return extract_fields(extracted)


def instrument(store: InvoiceStore, events: Events) -> None:
    """Record every fenced chunk write of this store: attempted jobs, written, refused."""
    original = store.database._write_chunk_once

    def recorded(items: Any, write: Any, prepare: Any, step: Any, before_fence: Any = None) -> Any:
        jobs = [str(lease.job_id) for lease, _ in items]
        try:
            result = original(items, write, prepare, step, before_fence)
        except Exception as exc:
            events("write", step=step, jobs=jobs, error=f"{type(exc).__name__}: {exc}"[:200])
            raise
        by_invoice = {lease.invoice_id: str(lease.job_id) for lease, _ in items}
        events(
            "write",
            step=step,
            jobs=jobs,
            written=[by_invoice[i] for i in result.written],
            refused=[by_invoice[i] for i in result.lost],
        )
        return result

    store.database._write_chunk_once = recorded  # type: ignore[method-assign]


def due_invoices(store: InvoiceStore, limit: int) -> list[UUID]:
    with store.database.pool.connection() as conn:
        rows = conn.execute(
            "SELECT id FROM invoices WHERE status IN ('pending', 'failed') AND next_attempt_at <= now() "
            "ORDER BY random() LIMIT %s",
            (limit,),
        ).fetchall()
    return [r[0] for r in rows]


def main(config_path: str) -> int:
    cfg = json.loads(Path(config_path).read_text())
    owner = cfg["owner"]
    events = Events(Path(cfg["events"]), owner)
    ttl = timedelta(seconds=cfg["ttl_s"])
    store = InvoiceStore(cfg["url"], min_size=1, max_size=2, lock_ttl=ttl)
    instrument(store, events)

    def beat(job_ids: list[UUID]) -> set[UUID]:
        began = time.monotonic()
        try:
            alive = store.claims.heartbeat_many(job_ids)
        except Exception as exc:
            events("beat", ok=False, blocked_s=round(time.monotonic() - began, 3), error=type(exc).__name__)
            raise
        lost = [str(j) for j in job_ids if j not in alive]
        events("beat", ok=True, blocked_s=round(time.monotonic() - began, 3), lost=lost)
        return alive

    keeper = LeaseKeeper(beat, timedelta(seconds=cfg["heartbeat_s"]), ttl if cfg["self_fence"] else None)
    env = StageEnv(
        store=store,
        parser=Parser(cfg.get("doc_delay_s", 0.0), cfg.get("gate_dir"), events),
        max_document_bytes=10_000_000,
        max_stage_seconds=600,
        max_attempts=1000,
        retry_base=timedelta(0),
        may_hold=keeper.may_hold if cfg["self_fence"] else None,
    )
    loop = ChunkLoop(store, env.max_attempts, env.retry_base, keeper)
    deadline = time.monotonic() + cfg["deadline_s"]
    stop = Path(cfg["stop_file"])
    events("started", pid=os.getpid(), self_fence=cfg["self_fence"])
    try:
        while time.monotonic() < deadline:
            if stop.exists():
                # Asked to stop: no connection within a TTL means the database is out of reach
                # (a cut or lossy link); the PoolTimeout below then ends this worker.
                store.database.pool.timeout = min(store.database.pool.timeout, ttl.total_seconds())
            try:
                store.maintenance.release_stale_locks()
                store.maintenance.reschedule_orphans(max_attempts=1000, retry_base=timedelta(0))
                due = due_invoices(store, cfg["chunk"])
                if not due:
                    if stop.exists():
                        break
                    time.sleep(cfg.get("tick_s", 0.2))
                    continue
                chunk = loop.claim([(i, None) for i in due], owner)
                if not chunk:
                    time.sleep(0.05)
                    continue
                events("claimed", jobs={str(c.invoice_id): str(c.job_id) for c in chunk})
                try:
                    # The chunk loop without its failure release: an abandoned chunk is the sweep's.
                    result = loop.work(env, chunk)
                    lost = {
                        str(i): o.detail
                        for r in result.reports
                        for i, o in r.outcomes.items()
                        if isinstance(o, Lost)
                    }
                    events("chunk_done", finished=[str(i) for i in result.finished.written], lost=lost)
                finally:
                    loop.drop(chunk)
            except Exception as exc:  # the database unreachable: the chunk is abandoned, tick again
                events("error", error=f"{type(exc).__name__}: {exc}"[:300])
                if isinstance(exc, PoolTimeout) and stop.exists():
                    # Asked to stop and no connection for a whole TTL: it can finish nothing, and
                    # a lease it still holds goes stale and the others' sweep frees it. Without
                    # this, a host still on a lossy link stopped only when the parent's wait ran
                    # out and killed it (a minute per lossy trial).
                    events("unreachable_at_stop")
                    break
                time.sleep(0.2)
    except BaseException:
        events("crashed", error=traceback.format_exc()[-1500:])
        raise
    finally:
        events("stopping")
        keeper.stop()
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
