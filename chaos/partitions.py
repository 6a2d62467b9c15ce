"""Scenario: network partitions between real hosts (network namespaces), zombies and the fence.

A Cluster (pipeline_support.netns) of a database host and three worker hosts, each host
joined to the database by its own veth link. Workers are plain engine workers
(pipeline_support.partition_worker) that share only PostgreSQL: independent deployments on one
invoice table. Each trial: the "zombie" worker (host rotating) claims a chunk and stops inside
its first document read (a gate), then a fault is injected, the two other hosts are started,
and the fault is healed; then the gate opens and the zombie goes on.

Trial kinds:
- cut_long: the zombie's link is down past the TTL (until the others finished its invoices).
  Its leases are swept and taken over (takeover time measured from the cut); on heal every
  write it attempts must be refused by the fence, none accepted (audit trigger);
- cut_short: down for 0.3 x TTL: no takeover, the zombie resumes and finishes its chunk, and
  no invoice's text is extracted twice;
- db_restart: the zombie's link is down while the database host's server restarts
  (fast or immediate); the others reconnect and take over; then as cut_long;
- freeze: every process of the zombie's host SIGSTOPped past the TTL, then SIGCONT;
- lossy: the zombie's link loses 30 % of its packets at random and delays the rest by 200 ms,
  each direction (tc netem when the kernel has it, else the same in user space: Cluster.netem)
  while three hosts drain a backlog: its throughput drops, nothing breaks.
cut_long, db_restart and freeze alternate the zombie's self-fencing off (the fence alone: the
zombie must attempt writes, all refused) and on (it must abandon the chunk: no write attempted
on a lost lease). After every trial: 0 double postings, 0 lost invoices (all terminal), 0
zombie writes accepted (chaos.common.check_common_invariants with the audit trigger).
- asym_db / asym_broker (params["asym_trials"], chaos.asymmetric): celery workers on hosts
  with a link to PostgreSQL and another to a broker; one of the two is cut, not the other.
- asym_broker_rabbitmq (params["asym_rabbitmq_trials"]): the broker cut with RabbitMQ as the
  broker (chaos.asymmetric).
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg

from chaos.common import AUDIT_SQL, ChaosContext, ScenarioResult, check_common_invariants, timed
from invoice_pipeline.db.migrate import migrate
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.factories import json_invoice
from pipeline_support.netns import Cluster, unavailable_reason

KINDS = ("cut_long", "cut_short", "db_restart", "freeze", "lossy")
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


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    result = ScenarioResult("partitions", seed, dict(params))
    reason = unavailable_reason()
    if reason:
        result.figures["skipped"] = reason
        return result
    rng = random.Random(seed)
    kinds = [k for k in KINDS if params.get(k, 1)]
    plan = [kinds[i % len(kinds)] for i in range(params["trials"])]
    figures: dict[str, Any] = {k: {"trials": 0} for k in kinds}
    takeovers: list[float] = []
    with timed(result), Cluster(3) as cluster:
        url = cluster.create_database("partitions")
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(AUDIT_SQL)
        work = ctx.scratch_dir("partitions")
        for n, kind in enumerate(plan):
            self_fence = kind in ("cut_short", "lossy") or n % 2 == 1
            trial_one(
                cluster, url, work, n, kind, self_fence, TTL_S, HEARTBEAT_S, rng, result, figures, takeovers
            )
            check_common_invariants(url, result, audited=True)
            result.trials += 1
            result.failures_injected += 1
        for _ in range(params.get("default_ttl_trials", 0)):
            # One trial with the default TTL (30 s, heartbeat a third), for the takeover figure.
            n = len(plan) + _
            f: dict[str, Any] = {"cut_long": {"trials": 0}}
            t: list[float] = []
            trial_one(cluster, url, work, n, "cut_long", True, 30.0, 10.0, rng, result, f, t)
            check_common_invariants(url, result, audited=True)
            result.trials += 1
            result.failures_injected += 1
            figures["default_ttl_30s"] = f["cut_long"] | {"takeover_s": t}
        result.figures["invoices_by_status"] = check_common_invariants(url, result, audited=True)
        result.figures["zombie_writes_accepted"] = q(
            url, "SELECT count(*) FROM chaos_audit WHERE job_status IS DISTINCT FROM 'running'"
        )[0][0]
        result.figures["double_postings"] = q(
            url,
            "SELECT count(*) FROM (SELECT invoice_id FROM ledger_postings GROUP BY 1 HAVING count(*) > 1) d",
        )[0][0]
    if params.get("asym_trials", 0):
        from chaos.asymmetric import run_trials

        run_trials(params["asym_trials"], ctx.scratch_dir("partitions-asym"), seed, result, figures)
    if params.get("asym_rabbitmq_trials", 0):
        from chaos.asymmetric import run_trials

        run_trials(
            params["asym_rabbitmq_trials"],
            ctx.scratch_dir("partitions-asym-rabbitmq"),
            seed,
            result,
            figures,
            broker="rabbitmq",
        )
    result.figures["ttl_s"] = TTL_S
    result.figures["heartbeat_s"] = HEARTBEAT_S
    result.figures["by_kind"] = figures
    if takeovers:
        result.figures["takeover_s_from_cut"] = {
            "median": round(statistics.median(takeovers), 2),
            "max": round(max(takeovers), 2),
            "n": len(takeovers),
            "ttl_plus_tick_s": TTL_S + TICK_S,
        }
    return result


def _count(fig: dict[str, Any], key: str, by: int | float = 1) -> None:
    fig[key] = fig.get(key, 0) + by


def trial_one(
    cluster: Cluster,
    url: str,
    work: Path,
    n: int,
    kind: str,
    self_fence: bool,
    ttl: float,
    hb: float,
    rng: random.Random,
    result: ScenarioResult,
    figures: dict[str, Any],
    takeovers: list[float],
) -> None:
    fig = figures[kind]
    fig["trials"] += 1
    zombie_host = 1 + n % cluster.workers
    others = [h for h in range(1, cluster.workers + 1) if h != zombie_host]
    trial = Trial(cluster, "partitions", work, n, ttl, hb)
    try:
        if kind == "lossy":
            _lossy(cluster, url, trial, zombie_host, others, rng, result, fig)
            return
        ids = ingest(url, 4, f"T{n}", rng)
        zev = trial.start(zombie_host, self_fence=self_fence, gate=True, chunk=4)
        if not wait(lambda: (trial.dir / "reached").exists(), 90):
            result.violate(f"trial {n} ({kind}): the zombie never reached its first document")
            return
        claimed: dict[str, str] = next((e["jobs"] for e in events_of(zev) if e["ev"] == "claimed"), {})
        zombie_jobs = set(claimed.values())
        # The other hosts run (and sweep every tick) before the fault: the takeover time is the
        # product's, not a process start's.
        started = [trial.start(h, self_fence=True, chunk=4) for h in others]
        if not wait(lambda: all(any(e["ev"] == "started" for e in events_of(p)) for p in started), 90):
            result.violate(f"trial {n} ({kind}): the other hosts did not start")
        t_fault = time.time()
        if kind == "freeze":
            cluster.freeze(zombie_host)
        else:
            cluster.cut(zombie_host)
        if kind == "db_restart":
            mode = rng.choice(["fast", "immediate"])
            cluster.restart_database(mode, down_seconds=rng.uniform(0.3, 1.5))
            _count(fig, f"restarts_{mode}")
        if kind == "cut_short":
            time.sleep(ttl * 0.3)  # the injected cut itself
            cluster.heal(zombie_host)
            healed = time.time()
            # The zombie's heartbeat gets through again (connections re-established).
            renewed = wait(
                lambda: (
                    q(
                        url,
                        "SELECT count(*) FROM processing_jobs WHERE id = ANY(%s::uuid[]) AND status = 'running' "
                        "AND extract(epoch FROM heartbeat_at) > %s",
                        (list(zombie_jobs), healed),
                    )[0][0]
                    == len(zombie_jobs)
                ),
                ttl * 3,
            )
            if not renewed:
                result.violate(f"trial {n} (cut_short): the zombie's leases were not renewed after the heal")
        else:
            # Past the TTL: until the other hosts finished every one of the zombie's invoices.
            done = wait(
                lambda: (
                    q(
                        url,
                        "SELECT count(*) FROM invoices WHERE id = ANY(%s::uuid[]) "
                        "AND status IN ('processed', 'needs_review', 'quarantined', 'needs_attention')",
                        (ids,),
                    )[0][0]
                    == len(ids)
                ),
                ttl * 4 + 60,
            )
            if not done:
                result.violate(f"trial {n} ({kind}): the other hosts did not take the zombie's invoices over")
            first, last_beat = q(
                url,
                "SELECT (SELECT min(extract(epoch FROM started_at)) FROM processing_jobs "
                "WHERE invoice_id = ANY(%(ids)s::uuid[]) AND NOT (id = ANY(%(jobs)s::uuid[]))), "
                "(SELECT max(extract(epoch FROM heartbeat_at)) FROM processing_jobs WHERE id = ANY(%(jobs)s::uuid[]))",
                {"ids": ids, "jobs": list(zombie_jobs)},
            )[0]
            if first is not None:
                takeover = float(first) - t_fault
                takeovers.append(takeover)
                fig.setdefault("takeover_s", []).append(round(takeover, 2))
                if last_beat is not None:
                    # From the zombie's last renewal: the TTL plus how long until a tick swept it.
                    fig.setdefault("takeover_s_from_last_heartbeat", []).append(
                        round(float(first) - float(last_beat), 2)
                    )
            if kind == "freeze":
                cluster.thaw(zombie_host)
            else:
                cluster.heal(zombie_host)
        (trial.dir / "open").touch()
        wait(lambda: any(e["ev"] in ("chunk_done", "error") for e in events_of(zev)), 60)
        trial.finish()
        _judge_zombie(n, kind, self_fence, zev, zombie_jobs, ids, url, hb, result, fig)
    finally:
        cluster.heal(zombie_host)
        cluster.thaw(zombie_host)
        codes = trial.finish(30)
        for h in list(cluster._procs):
            cluster.kill_host_processes(h)
        if any(c not in (0, None) for c in codes):
            _count(fig, "worker_nonzero_exits")
        _drain(cluster, url, work, n, result)


def _judge_zombie(
    n: int,
    kind: str,
    self_fence: bool,
    zev: Path,
    zombie_jobs: set[str],
    ids: list[str],
    url: str,
    hb: float,
    result: ScenarioResult,
    fig: dict[str, Any],
) -> None:
    evs = events_of(zev)
    gate_t = next((e["t"] for e in evs if e["ev"] == "gate_passed"), None)
    after = [e for e in evs if gate_t is not None and e["t"] >= gate_t]
    attempted = refused = accepted = 0
    touches: list[float] = []
    for e in after:
        if e["ev"] != "write":
            continue
        mine = [j for j in e["jobs"] if j in zombie_jobs]
        if not mine:
            continue
        touches.append(e["t"])
        attempted += len(mine)
        refused += len([j for j in e.get("refused", []) if j in zombie_jobs])
        accepted += len([j for j in e.get("written", []) if j in zombie_jobs])
    _count(fig, "zombie_writes_attempted", attempted)
    _count(fig, "zombie_writes_refused", refused)
    _count(fig, "zombie_writes_accepted", accepted)
    abandoned = [
        e for e in after if e["ev"] == "chunk_done" for why in e["lost"].values() if "self-fenced" in why
    ]
    _count(fig, "zombie_self_fenced_invoices", len(abandoned))
    if kind == "cut_short":
        others = q(
            url,
            "SELECT count(*) FROM processing_jobs WHERE invoice_id = ANY(%s::uuid[]) AND NOT (id = ANY(%s::uuid[]))",
            (ids, list(zombie_jobs)),
        )[0][0]
        if others:
            result.violate(
                f"trial {n} (cut_short): {others} takeover job(s) after a cut shorter than the TTL"
            )
        twice = q(
            url,
            "SELECT count(*) FROM (SELECT invoice_id FROM step_events WHERE invoice_id = ANY(%s::uuid[]) "
            "AND step = 'extract_text' AND event = 'started' GROUP BY 1 HAVING count(*) > 1) t",
            (ids,),
        )[0][0]
        if twice:
            result.violate(f"trial {n} (cut_short): {twice} invoice(s) extracted twice")
        fig.setdefault("zombie_resumed_and_finished", 0)
        fig["zombie_resumed_and_finished"] += int(accepted > 0 and not others)
        return
    if accepted:
        result.violate(f"trial {n} ({kind}): {accepted} zombie write(s) accepted after its leases were swept")
    if refused != attempted:
        result.violate(f"trial {n} ({kind}): {attempted} zombie write(s) attempted but {refused} refused")
    if not self_fence and attempted == 0:
        result.violate(f"trial {n} ({kind}): the zombie (no self-fencing) attempted no write: fence untested")
    if self_fence and attempted:
        _count(fig, "self_fence_missed")  # the fence refused them: safe, only work was wasted
    # How long the zombie kept touching its old invoices after it learned the lease was gone.
    learned = [
        e["t"]
        for e in after
        if (e["ev"] == "beat" and set(e.get("lost", [])) & zombie_jobs)
        or (e["ev"] == "write" and set(e.get("refused", [])) & zombie_jobs)
    ]
    if learned and touches:
        late = max(0.0, max(touches) - min(learned))
        fig["zombie_touch_after_learning_max_s"] = max(
            fig.get("zombie_touch_after_learning_max_s", 0), round(late, 3)
        )
        if late > hb + 1.0:
            result.violate(f"trial {n} ({kind}): zombie touched its old invoices {late:.2f}s after learning")


def _drain(cluster: Cluster, url: str, work: Path, n: int, result: ScenarioResult) -> None:
    """Whatever a trial left unfinished (a failed attempt, a swept lease): one host finishes it."""
    pending = lambda: q(  # noqa: E731
        url,
        "SELECT count(*) FROM invoices WHERE status NOT IN ('processed', 'needs_review', 'quarantined', 'needs_attention')",
    )[0][0]
    if not pending():
        return
    trial = Trial(cluster, "partitions", work, 1000 + n, TTL_S, HEARTBEAT_S)
    trial.start(1, self_fence=True, chunk=8)
    trial.stop.touch()  # exits once nothing is due
    ok = wait(lambda: pending() == 0, 120, 0.2)
    trial.finish(60)
    cluster.kill_host_processes(1)
    if not ok:
        result.violate(f"trial {n}: {pending()} invoice(s) never finished (lost)")


def _lossy(
    cluster: Cluster,
    url: str,
    trial: Trial,
    shaped: int,
    others: list[int],
    rng: random.Random,
    result: ScenarioResult,
    fig: dict[str, Any],
) -> None:
    ids = ingest(url, 48, f"L{trial.dir.name}", rng)
    rule = cluster.netem(shaped, loss_pct=30, delay_ms=200, seed=rng.randrange(2**31))
    fig["link_rule"] = rule
    packets: dict[str, int] = {}
    try:
        evs = {h: trial.start(h, self_fence=True, chunk=4, delay=0.02) for h in (shaped, *others)}
        trial.stop.touch()
        t0 = time.time()
        done = wait(
            lambda: (
                q(
                    url,
                    "SELECT count(*) FROM invoices WHERE id = ANY(%s::uuid[]) "
                    "AND status IN ('processed', 'needs_review', 'quarantined', 'needs_attention')",
                    (ids,),
                )[0][0]
                == len(ids)
            ),
            180,
            0.2,
        )
        elapsed = time.time() - t0
        trial.finish(60)
    finally:
        packets = cluster.clear_netem(shaped)
    for key, count in packets.items():  # the user-space link's counts (none from tc netem)
        _count(fig, f"link_packets_{key}", count)
    if not done:
        result.violate("lossy: the backlog was not finished within 180 s")
    for h, path in evs.items():
        finished = sum(len(e["finished"]) for e in events_of(path) if e["ev"] == "chunk_done")
        key = "shaped_host_invoices" if h == shaped else "clean_host_invoices"
        fig.setdefault(key, []).append(finished)
        _count(fig, "worker_errors", sum(1 for e in events_of(path) if e["ev"] == "error"))
    fig.setdefault("backlog_seconds", []).append(round(elapsed, 2))
