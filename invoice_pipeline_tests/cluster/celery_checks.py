"""What the celery cluster tests check of a finished batch run, in one place."""

from __future__ import annotations

from typing import Any

from pipeline_support.celery_cluster import BrokerCluster


def chunk_hosts(run: dict[str, Any], cluster: BrokerCluster, invoices: int, chunk: int) -> dict[str, int]:
    """Each chunk step of a successful run and the worker host that ran it, the host named three
    ways that must agree: the label the chunk recorded, the address PostgreSQL saw its connection
    come from (that host's own link), and dagster-celery's engine event naming the celery worker.
    Every chunk claimed and finished all of its invoices."""
    assert run["success"], run
    steps = run["steps"]
    assert len(steps) == invoices // chunk, steps
    hosts = {}
    for key, step in steps.items():
        out = step["output"]
        host = int(out["host"].removeprefix("host"))
        assert out["client_addr"] == cluster.worker_address(host), (key, out)
        assert f"host{host}@cluster" in step.get("celery_workers", []), (key, step)
        assert out["claimed"] == out["finished"] == chunk, (key, out)
        hosts[key] = host
    return hosts
