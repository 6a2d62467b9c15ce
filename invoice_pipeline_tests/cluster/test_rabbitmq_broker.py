"""RabbitMQ as the broker of the namespace cluster: a batch run over three hosts, and the broker
link of a host cut while RabbitMQ has deliveries out to it.

A BrokerCluster(broker="rabbitmq") (pipeline_support.celery_cluster): a private RabbitMQ node in
the broker host's namespace, celery workers on three worker hosts, results in PostgreSQL, the
run's coordinator in the broker namespace. With redis, a task popped by a worker just as its
link went down was lost and the run hung (docs/scale-out.md); RabbitMQ keeps every delivery
until it is acknowledged and requeues it once the consumer's connection is declared dead (on
missed heartbeats): the run must finish, every invoice posted exactly once, none lost, no write
of the zombie accepted after its lease was gone (chaos.asymmetric's asym_broker_rabbitmq trial,
the invariants of every partition trial).

Skips with one line without root (namespaces), dagster-celery or rabbitmq-server. One cluster
for both tests (a node takes ~10 s to boot); teardown checks that no process of the node (beam,
epmd) survives it, whatever the tests did.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from chaos.common import AUDIT_SQL, ScenarioResult, check_common_invariants
from invoice_pipeline_tests.cluster.celery_checks import chunk_hosts
from invoice_pipeline_tests.support import outcome
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.celery_cluster import BrokerCluster, CeleryRig, rabbitmq_unavailable_reason
from pipeline_support.netns import ns_pids, unavailable_reason

pytestmark = [
    needs_tool("network namespaces", unavailable_reason()),
    needs_tool("rabbitmq-server", rabbitmq_unavailable_reason()),
]

INVOICES = 8
CHUNK = 2


def _alive(pid: int) -> bool:
    """Running, not merely a zombie waiting for its parent (init) to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(scope="module")
def rabbit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerCluster, CeleryRig, Path]]:
    from chaos.asymmetric import ASYM_HEARTBEAT_S, ASYM_TTL_S, DB

    work = tmp_path_factory.mktemp("rabbitmq")
    node_pids: list[int] = []
    with BrokerCluster(3, broker="rabbitmq") as cluster:
        node_pids = ns_pids(cluster.mq_ns)  # the node's beam, its epmd, their helpers
        assert node_pids, "nothing runs in the broker namespace"
        rig = CeleryRig(cluster, work / "rig", ttl_s=ASYM_TTL_S, heartbeat_s=ASYM_HEARTBEAT_S, invoices_db=DB)
        try:
            with psycopg.connect(rig.url, autocommit=True) as conn:
                conn.execute(AUDIT_SQL)
            rig.start_workers([1, 2, 3])
            yield cluster, rig, work
        finally:
            rig.close()
    survivors = [pid for pid in node_pids if _alive(pid)]
    assert not survivors, f"processes of the RabbitMQ node outlived the cluster: {survivors}"


def test_a_batch_run_over_rabbitmq_spreads_its_chunks_and_posts_each_invoice_once(
    rabbit: tuple[BrokerCluster, CeleryRig, Path],
) -> None:
    from chaos.partition_trial import ingest

    cluster, rig, _ = rabbit
    ids = ingest(rig.url, INVOICES, "rabbit", random.Random(22))
    rig.launch(ids, CHUNK)
    run = rig.result(timeout=120)
    hosts = chunk_hosts(run, cluster, INVOICES, CHUNK)
    assert len(set(hosts.values())) >= 2, f"every chunk ran on one host: {hosts}"
    done = outcome(rig.url, ids)
    assert done.statuses == {"processed": INVOICES}, done
    assert done.postings == done.posted_invoices == INVOICES, done


def test_a_cut_broker_link_with_deliveries_out_requeues_them_and_the_run_finishes(
    rabbit: tuple[BrokerCluster, CeleryRig, Path],
) -> None:
    from chaos.asymmetric import INVOICES as TRIAL_INVOICES
    from chaos.asymmetric import asym_trial

    cluster, rig, work = rabbit
    result = ScenarioResult("partitions_asym_rabbitmq", 22, {})
    fig: dict[str, Any] = {}
    with psycopg.connect(rig.url) as conn:
        known = {r[0] for r in conn.execute("SELECT id::text FROM invoices").fetchall()}
    asym_trial(cluster, rig, work, 0, "asym_broker_rabbitmq", random.Random(22), result, fig)
    check_common_invariants(rig.url, result, audited=True)
    assert result.violations == [], (result.violations, fig)
    # The cut came inside a chunk of the zombie and lasted until RabbitMQ declared the zombie's
    # connection dead; the run then finished on its own: no hang, nothing abandoned.
    assert fig.get("zombie_got_no_chunk", 0) == 0, fig
    assert len(fig.get("broker_noticed_s", [])) == 1, fig
    assert fig.get("runs_succeeded") == 1 and not fig.get("coordinator_abandoned"), fig
    assert not fig.get("workers_still_busy"), fig
    # The delivery of the chunk the zombie was running at the cut was still unacknowledged (a
    # solo worker acks after the step), and RabbitMQ requeued it to another host.
    assert fig.get("unacked_at_cut", 0) >= 1, fig
    assert fig.get("requeued_to_another_host", 0) >= 1, fig
    with psycopg.connect(rig.url) as conn:
        ids = [r[0] for r in conn.execute("SELECT id::text FROM invoices").fetchall() if r[0] not in known]
        accepted = conn.execute(
            "SELECT count(*) FROM chaos_audit WHERE job_status IS DISTINCT FROM 'running'"
        ).fetchone()
    done = outcome(rig.url, ids)
    assert len(ids) == TRIAL_INVOICES and done.statuses == {"processed": TRIAL_INVOICES}, done  # none lost
    assert done.postings == done.posted_invoices == TRIAL_INVOICES  # none posted twice
    assert accepted == (0,)  # no write of the zombie accepted after its lease was gone
