"""Asymmetric partitions (chaos.partitions, kinds asym_db and asym_broker), with celery workers.

A BrokerCluster (pipeline_support.celery_cluster): the database host and a broker host (redis),
each joined to every worker host by a link of its own, so that one path can be cut without the
other. A celery worker runs on each of three worker hosts; each trial launches one batch run of
the celery job (invoice_pipeline.orchestration.celery_jobs) from the root namespace, waits until
the "zombie" host (rotating) has received a chunk, and then:

- asym_db: cuts the zombie's link to PostgreSQL (the broker stays reachable) for 2.5 x TTL.
  Its leases go stale; its step fails on the database's timeouts (self-fencing stops its work),
  and the step's retry, on whichever host, sweeps the stale leases of its invoices and claims
  them afresh. Whatever the zombie writes after the heal is refused by the fence;
- asym_broker: cuts the zombie's link to the broker (PostgreSQL stays reachable) for 2.5 x TTL.
  The zombie keeps its leases (heartbeats go to PostgreSQL) and finishes its chunk; its result
  reaches the run's coordinator once the link is back. No takeover, no work done twice. Seen
  here: the task's ack lost in the cut, redis redelivers it and a second host runs the step
  again; it claims nothing (its invoices are finished or held), so this costs one round trip.
  Also seen: a task message popped by the zombie's BRPOP just as its link went down is lost
  (redis, unlike RabbitMQ, keeps no unacked copy of it): the run's coordinator waits for it
  forever. The trial abandons such a run after RESULT_WAIT_S; its invoices stay pending, never
  claimed, and the next deployment finishes them.

asym_broker_rabbitmq (params["asym_rabbitmq_trials"]): asym_broker with RabbitMQ as the broker
(BrokerCluster(broker="rabbitmq"), results in PostgreSQL). Chunks of one invoice, six tasks for
three workers: each worker holds the delivery of the chunk it runs unacknowledged: a solo-pool
worker's "early" ack is scheduled on its event loop, which runs again only once the step is
over (its prefetch is one: --concurrency 1 x worker_prefetch_multiplier 1). The cut comes as the zombie's chunk starts (its STEP_START);
RabbitMQ's count of the zombie's unacknowledged deliveries, read just after, is the figure
unacked_at_cut. It lasts until RabbitMQ has closed the zombie's connections on missed
heartbeats (rabbitmqctl list_connections) and at least 2.5 x TTL. RabbitMQ then requeues those
deliveries to other workers, while the zombie (cut from the broker only) finishes them and
stores their results in PostgreSQL: each such step runs twice, and the claim makes the second
run harmless. Figures: deliveries seen by two hosts (redeliveries), how long RabbitMQ took.

Then, as in every partition trial: whatever the run left (a failed run, a swept lease) is
finished by a plain worker (partitions._drain), and the invariants are checked: 0 double
postings, 0 lost invoices, 0 zombie writes accepted (the audit trigger of chaos.common).
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any

import psycopg

from chaos.common import AUDIT_SQL, ScenarioResult, check_common_invariants
from chaos.partition_trial import HEARTBEAT_S, TTL_S, Trial, ingest, q, wait
from pipeline_support.celery_cluster import (
    BrokerCluster,
    CeleryRig,
    celery_unavailable_reason,
    rabbitmq_unavailable_reason,
    stop_group,
)
from pipeline_support.helpers import hold_text_rows

ASYM_KINDS = ("asym_db", "asym_broker")
RABBITMQ_KINDS = ("asym_broker_rabbitmq",)
ASYM_TTL_S = 4
ASYM_HEARTBEAT_S = 1
INVOICES = 6
CHUNK = 2
DB = "partitions"
# How long the coordinator may still take after the heal. dagster-celery's loop waits for every
# task's result without a deadline: a task lost in the cut (see docs/scale-out.md) would hang the
# run forever; the trial then abandons the run (figure coordinator_abandoned) and the invoices
# are finished by the next deployment, as the sensor's next request would.
RESULT_WAIT_S = 60
# How long RabbitMQ may take to close a cut connection (two to three intervals of the broker
# heartbeat, 4 s in the cluster (CeleryRig.env); 6-12 s seen); the cut is held until then.
BROKER_NOTICE_WAIT_S = 30


def redeliveries(rig: CeleryRig) -> int:
    """Deliveries of a task to a second worker (or twice to one), from the workers' logs."""
    return sum(len(hosts) - 1 for hosts in rig.received_tasks().values())


def chunks_started(log: Path) -> int:
    """How many chunk steps this worker has started (Dagster's STEP_START lines in its log)."""
    if not log.exists():
        return 0
    return len(re.findall(r"work_chunk\[chunk_\d+\] - STEP_START", log.read_text(errors="replace")))


def asym_trial(
    cluster: BrokerCluster,
    rig: CeleryRig,
    work: Path,
    n: int,
    kind: str,
    rng: random.Random,
    result: ScenarioResult,
    fig: dict[str, Any],
) -> None:
    rabbit = cluster.broker == "rabbitmq"
    kind = kind.removesuffix("_rabbitmq")  # the same cut, the broker is the cluster's
    fig["trials"] = fig.get("trials", 0) + 1
    zombie = 1 + n % cluster.workers
    log = rig.work / f"celery-h{zombie}.log"
    url = rig.url
    ids = ingest(url, INVOICES, f"A{n}", rng)
    # RabbitMQ: every invoice's text row held (inserted, not committed) until the cut, so the
    # zombie's chunk still waits to save its text, its delivery unacknowledged, when the cut
    # comes, whatever the machine's speed (a loaded run saw a one-invoice chunk end first).
    holder = hold_text_rows(url, ids) if rabbit else None
    before = chunks_started(log)
    redelivered_before = redeliveries(rig)
    # RabbitMQ: chunks of one invoice, twice as many as workers: each worker holds the chunk it
    # runs, unacknowledged (see the module's docstring).
    rig.launch(ids, 1 if rabbit else CHUNK, timeout=180)
    cut = False
    t_cut: float | None = None
    sweeper: Trial | None = None
    in_flight: set[str] = set()  # RabbitMQ: the zombie's tasks received and not ended at the cut
    try:
        # The zombie has started a chunk of this run: the cut comes inside it.
        deadline = time.monotonic() + 90
        while (
            chunks_started(log) <= before and time.monotonic() < deadline and rig.coordinator.poll() is None
        ):
            time.sleep(0.05)
        if chunks_started(log) <= before:
            fig["zombie_got_no_chunk"] = fig.get("zombie_got_no_chunk", 0) + 1
        else:
            if not rabbit:
                time.sleep(rng.uniform(0.2, 1.0))  # somewhere inside the chunk
            # RabbitMQ: at once. The zombie holds this chunk's delivery unacknowledged (see the
            # module's docstring); a look at RabbitMQ first (rabbitmqctl,
            # ~0.5 s) could let the chunk end. Looked at after the cut, RabbitMQ's view is
            # frozen: nothing from the zombie reaches it any more.
            t_cut = time.time()
            (cluster.cut if kind == "asym_db" else cluster.cut_broker)(zombie)
            cut = True
            if rabbit:
                in_flight = rig.tasks_in_flight().get(zombie, set())
                unacked = cluster.unacked(zombie)
                if holder is not None:
                    holder.close()  # the rows go: every chunk saves its text and ends
                fig["unacked_at_cut"] = fig.get("unacked_at_cut", 0) + unacked
                fig["cuts_with_unacked_delivery"] = fig.get("cuts_with_unacked_delivery", 0) + (unacked > 0)
            if kind == "asym_db":
                # Another deployment on another host, sharing only PostgreSQL, sweeps every tick
                # (as the sweep schedule does) and takes over what the zombie's leases held.
                sweeper = Trial(cluster, DB, work, 4000 + n, ASYM_TTL_S, 0.5)
                sweeper.start(1 + zombie % cluster.workers, self_fence=True, chunk=4)
            if rabbit:
                # Held until RabbitMQ has closed every connection of the zombie on missed
                # heartbeats, requeueing what they held (each look: one rabbitmqctl call), bounded.
                until = time.monotonic() + BROKER_NOTICE_WAIT_S
                while (left := cluster.amqp_connections(zombie)) and time.monotonic() < until:
                    time.sleep(0.5)  # rabbitmqctl costs ~0.5 s of CPU a call: not back to back
                if left:
                    fig["broker_never_noticed"] = fig.get("broker_never_noticed", 0) + 1
                else:
                    fig.setdefault("broker_noticed_s", []).append(round(time.time() - t_cut, 2))
            time.sleep(max(0.0, t_cut + ASYM_TTL_S * 2.5 - time.time()))
            (cluster.heal if kind == "asym_db" else cluster.heal_broker)(zombie)
            cut = False
        try:
            run = rig.result(timeout=RESULT_WAIT_S)
            fig["runs_succeeded" if run["success"] else "runs_failed"] = (
                fig.get("runs_succeeded" if run["success"] else "runs_failed", 0) + 1
            )
            steps = run["steps"].values()
            zombie_out = [s["output"] for s in steps if s.get("output", {}).get("host") == f"host{zombie}"]
            fig["zombie_invoices_finished"] = fig.get("zombie_invoices_finished", 0) + sum(
                o["finished"] for o in zombie_out
            )
            fig["zombie_invoices_lost_or_fenced"] = fig.get("zombie_invoices_lost_or_fenced", 0) + sum(
                o["lost"] for o in zombie_out
            )
            # At-least-once delivery: a step whose task two workers ran (its ack lost in a cut).
            fig["steps_delivered_twice"] = fig.get("steps_delivered_twice", 0) + sum(
                1 for s in steps if len(s.get("celery_workers", [])) > 1
            )
            fig.setdefault("run_seconds", []).append(run["seconds"])
        except Exception as exc:  # a coordinator that never got a result: the run is abandoned
            fig["coordinator_abandoned"] = fig.get("coordinator_abandoned", 0) + 1
            fig.setdefault("abandoned_why", []).append(f"{type(exc).__name__}: {exc}"[:200])
            stop_group(rig.coordinator)
    finally:
        if holder is not None:
            holder.close()
        if cut:
            (cluster.heal if kind == "asym_db" else cluster.heal_broker)(zombie)
        if sweeper is not None:
            sweeper.finish(60)  # it exits once nothing is due
    if rabbit:
        # A duplicate may still run after its run ended: let every worker end what it received
        # (the next trial's cut waits on the zombie's log), then count what went to two hosts.
        if not rig.wait_idle(60):
            fig["workers_still_busy"] = fig.get("workers_still_busy", 0) + 1
        fig["redeliveries"] = fig.get("redeliveries", 0) + redeliveries(rig) - redelivered_before
        if t_cut is not None:
            seen = rig.received_tasks()
            # What the zombie held at the cut and another host received afterwards: requeued.
            fig["requeued_to_another_host"] = fig.get("requeued_to_another_host", 0) + sum(
                1 for t in in_flight if any(h != zombie for h in seen.get(t, []))
            )
    if t_cut is not None and kind == "asym_db":
        # The first job another host started on an invoice a run's step had claimed before.
        first = q(
            url,
            "SELECT min(extract(epoch FROM b.started_at)) FROM processing_jobs a JOIN processing_jobs b "
            "ON a.invoice_id = b.invoice_id AND b.started_at > a.started_at "
            "WHERE a.invoice_id = ANY(%s::uuid[]) AND a.owner NOT LIKE 'host%%' AND b.owner LIKE 'host%%'",
            (ids,),
        )[0][0]
        if first is not None:
            fig.setdefault("takeover_s_from_cut", []).append(round(float(first) - t_cut, 2))
    if kind == "asym_broker":
        # The zombie kept its leases: no invoice of this run was claimed twice.
        twice = q(
            url,
            "SELECT count(*) FROM (SELECT invoice_id FROM processing_jobs WHERE invoice_id = ANY(%s::uuid[]) "
            "GROUP BY 1 HAVING count(*) > 1) t",
            (ids,),
        )[0][0]
        fig["invoices_claimed_twice"] = fig.get("invoices_claimed_twice", 0) + twice
    else:
        taken = q(
            url,
            "SELECT count(*) FROM (SELECT invoice_id FROM processing_jobs WHERE invoice_id = ANY(%s::uuid[]) "
            "GROUP BY 1 HAVING count(*) > 1) t",
            (ids,),
        )[0][0]
        fig["invoices_taken_over"] = fig.get("invoices_taken_over", 0) + taken
    _drain(cluster, url, work, n, result)


def _drain(cluster: BrokerCluster, url: str, work: Path, n: int, result: ScenarioResult) -> None:
    """What the run left (a failed chunk, a swept lease): a plain engine worker on host 1 finishes
    it, as the next run would, leaving the celery workers running (partitions._drain kills a
    host's every process)."""
    pending = lambda: q(  # noqa: E731
        url,
        "SELECT count(*) FROM invoices WHERE status NOT IN ('processed', 'needs_review', 'quarantined', 'needs_attention')",
    )[0][0]
    if not pending():
        return
    trial = Trial(cluster, DB, work, 3000 + n, TTL_S, HEARTBEAT_S)
    trial.start(1, self_fence=True, chunk=8)
    trial.stop.touch()  # it exits once nothing is due
    ok = wait(lambda: pending() == 0, 120, 0.2)
    trial.finish(60)
    if not ok:
        result.violate(f"asym trial {n}: {pending()} invoice(s) never finished (lost)")


def run_trials(
    trials: int,
    work: Path,
    seed: int,
    result: ScenarioResult,
    figures: dict[str, Any],
    broker: str = "redis",
) -> None:
    """`trials` asymmetric trials on a cluster of their own: with redis, alternating asym_db and
    asym_broker; with RabbitMQ, asym_broker_rabbitmq. Figures per kind, and `asym_*` (redis) or
    `asym_rabbitmq_*` totals."""
    reason = celery_unavailable_reason() if broker == "redis" else rabbitmq_unavailable_reason()
    prefix = "asym" if broker == "redis" else "asym_rabbitmq"
    if reason:
        figures[f"{prefix}_skipped"] = reason
        return
    kinds = ASYM_KINDS if broker == "redis" else RABBITMQ_KINDS
    rng = random.Random(seed)
    with BrokerCluster(3, broker=broker) as cluster:
        rig = CeleryRig(
            cluster, work / prefix, ttl_s=ASYM_TTL_S, heartbeat_s=ASYM_HEARTBEAT_S, invoices_db=DB
        )
        try:
            with psycopg.connect(rig.url, autocommit=True) as conn:
                conn.execute(AUDIT_SQL)
            rig.start_workers([1, 2, 3])
            for n in range(trials):
                kind = kinds[n % len(kinds)]
                asym_trial(cluster, rig, work, n, kind, rng, result, figures.setdefault(kind, {}))
                check_common_invariants(rig.url, result, audited=True)
                result.trials += 1
                result.failures_injected += 1
            accepted = figures[f"{prefix}_zombie_writes_accepted"] = q(
                rig.url, "SELECT count(*) FROM chaos_audit WHERE job_status IS DISTINCT FROM 'running'"
            )[0][0]
            doubles = figures[f"{prefix}_double_postings"] = q(
                rig.url,
                "SELECT count(*) FROM (SELECT invoice_id FROM ledger_postings GROUP BY 1 HAVING count(*) > 1) d",
            )[0][0]
            if accepted:
                result.violate(f"{prefix}: {accepted} zombie write(s) accepted")
            if doubles:
                result.violate(f"{prefix}: {doubles} double posting(s)")
        finally:
            rig.close()
