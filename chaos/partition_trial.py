"""A partition trial's plain engine workers, and what every partition scenario shares.

A Trial starts plain engine workers (pipeline_support.partition_worker) on the hosts of a
network-namespace cluster (pipeline_support.netns, or its BrokerCluster), with the lease TTL and
heartbeat the trials run with; the helpers ingest invoices, query, wait for a condition and read
a worker's events. chaos.partitions (symmetric cuts) and chaos.asymmetric (one path of two cut)
both use them; neither imports the other's internals.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import psycopg

from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.factories import json_invoice
from pipeline_support.netns import Cluster

TTL_S = 4.0
HEARTBEAT_S = 0.5
TICK_S = 0.2


class Trial:
    """One trial's workers, files and events."""

    def __init__(self, cluster: Cluster, db: str, work: Path, n: int, ttl: float, hb: float) -> None:
        self.cluster, self.db, self.ttl, self.hb = cluster, db, ttl, hb
        self.dir = work / f"trial{n:03d}"
        self.dir.mkdir(parents=True)
        self.stop = self.dir / "stop"
        self.procs: list[Any] = []

    def start(
        self, host: int, *, self_fence: bool, gate: bool = False, chunk: int = 4, delay: float = 0.0
    ) -> Path:
        events = self.dir / f"events-h{host}.jsonl"
        cfg = {
            "url": self.cluster.host_url(host, self.db),
            "owner": f"host{host}:{self.dir.name}",
            "events": str(events),
            "ttl_s": self.ttl,
            "heartbeat_s": self.hb,
            "chunk": chunk,
            "deadline_s": 240,
            "self_fence": self_fence,
            "stop_file": str(self.stop),
            "gate_dir": str(self.dir) if gate else None,
            "doc_delay_s": delay,
            "tick_s": TICK_S,
        }
        path = self.dir / f"config-h{host}.json"
        path.write_text(json.dumps(cfg))
        self.procs.append(
            self.cluster.run(
                host, ["-m", "pipeline_support.partition_worker", str(path)], log=self.dir / f"h{host}.log"
            )
        )
        return events

    def finish(self, timeout: float = 60) -> list[int | None]:
        self.stop.touch()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except Exception:
                p.kill()
        return [p.returncode for p in self.procs]


def events_of(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait(cond: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return bool(cond())


def q(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, connect_timeout=5) as conn:
        return conn.execute(sql, params).fetchall()


def ingest(url: str, n: int, tag: str, rng: random.Random) -> list[str]:
    store = InvoiceStore(url, max_size=1)
    try:
        return [
            str(
                store.documents.store_document(
                    json_invoice(f"{tag}-{i}", total=f"{rng.randint(1000, 99999) / 100:.2f}"),
                    "acme",
                    f"{tag}-{i}.json",
                ).invoice_id
            )
            for i in range(n)
        ]
    finally:
        store.close()
