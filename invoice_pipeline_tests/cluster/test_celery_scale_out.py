"""One batch run's chunks on several real hosts, through Dagster's celery executor.

A BrokerCluster (pipeline_support.celery_cluster): a database host (PostgreSQL 15), a broker
host (redis-server) and three worker hosts, each on its own links to both. A celery worker runs
in each worker host's namespace; the run's coordinator runs in the root namespace. The test
checks from the run's own events which host ran which chunk (the host label each chunk recorded,
the address PostgreSQL saw it connect from, and dagster-celery's "celery worker" engine event),
and from the database that every invoice was posted exactly once.

Skips with one line without root (namespaces) or without dagster-celery / redis-server.
"""

from __future__ import annotations

import random
from pathlib import Path

from invoice_pipeline_tests.cluster.celery_checks import chunk_hosts
from invoice_pipeline_tests.support import outcome
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.celery_cluster import BrokerCluster, CeleryRig, celery_unavailable_reason
from pipeline_support.netns import unavailable_reason

pytestmark = [
    needs_tool("network namespaces", unavailable_reason()),
    needs_tool("redis-server", celery_unavailable_reason()),
]

INVOICES = 12
CHUNK = 2


def test_one_batch_runs_its_chunks_on_different_hosts_and_posts_each_invoice_once(tmp_path: Path) -> None:
    from chaos.partition_trial import ingest

    with BrokerCluster(3) as cluster:
        rig = CeleryRig(cluster, tmp_path / "rig", ttl_s=10)
        try:
            ids = ingest(rig.url, INVOICES, "scale", random.Random(21))
            rig.start_workers([1, 2, 3])
            rig.launch(ids, CHUNK)
            run = rig.result(timeout=150)
        finally:
            rig.close()
        hosts = chunk_hosts(run, cluster, INVOICES, CHUNK)
        assert len(set(hosts.values())) >= 2, f"every chunk ran on one host: {hosts}"
        done = outcome(rig.url)
        assert done.statuses == {"processed": INVOICES}, done
        assert done.postings == done.posted_invoices == INVOICES, done
        assert done.running_leases == 0
