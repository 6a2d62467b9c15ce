"""A namespace cluster with a broker host, and celery workers on the worker hosts.

    with BrokerCluster(workers=3) as cluster:
        rig = CeleryRig(cluster, work_dir, ttl_s=4)   # databases, DAGSTER_HOME, env per host
        rig.start_workers([1, 2, 3])                  # `celery ... worker` in each host's namespace
        run = rig.launch(invoice_ids, chunk_size=4)   # the run's coordinator, in the root namespace
        cluster.cut_broker(2); cluster.heal_broker(2) # the broker link only (the database link stays)

Topology, on top of pipeline_support.netns.Cluster (database host, worker hosts 1..N on
10.213.i.0/30 links): a broker host, namespace `ipn<pid>-mq`, running a redis-server, joined
to each worker host by a SECOND veth link of its own, 10.214.i.1 (broker end) / 10.214.i.2
(worker end). The broker and the database are thus on separate paths: either can be cut
without the other (the asymmetric partitions). Those are the only addresses added, all on
links made here, inside namespaces made here. The redis-server also listens on a Unix socket
in the cluster's directory: the run's coordinator (the test process, root namespace) reaches it
there, unaffected by cuts, as it reaches PostgreSQL. Teardown is the Cluster's: every process
in every namespace killed, the namespaces (and their links) deleted, the directory removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from pipeline_support.netns import ROOT, Cluster, _ip

BROKER_SUBNET = "10.214"
REDIS_PORT = 6379


def celery_unavailable_reason() -> str | None:
    """One line saying why celery workers cannot run here, or None."""
    try:
        import dagster_celery  # noqa: F401
        import redis  # noqa: F401
    except ImportError as exc:
        return f"dagster-celery not importable ({exc.name}): pip install -e '.[celery]'"
    if shutil.which("redis-server") is None:
        return "no redis-server binary for the broker host"
    return None


class BrokerCluster(Cluster):
    """A Cluster plus a broker host (redis) on its own links to every worker host."""

    def __init__(self, workers: int = 3, **kwargs: Any) -> None:
        super().__init__(workers, **kwargs)
        self.mq_ns = f"{self.tag}-mq"
        self._redis: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> BrokerCluster:
        super().__enter__()
        return self

    def mq_end(self, host: int) -> str:
        return f"{self.tag}m{host}"

    def worker_mq_end(self, host: int) -> str:
        return f"{self.tag}q{host}"

    def broker_address(self, host: int) -> str:
        self._check_host(host)
        return f"{BROKER_SUBNET}.{host}.1"

    @property
    def broker_socket(self) -> Path:
        assert self.dir is not None
        return self.dir / "redis.sock"

    def broker_url(self, host: int | None = None) -> str:
        """Worker host `host`'s URL of the broker, over its broker link; None: the Unix socket."""
        if host is None:
            return f"redis+socket://{self.broker_socket}"
        return f"redis://{self.broker_address(host)}:{REDIS_PORT}/0"

    def _build(self) -> None:
        super()._build()
        self._add_ns(self.mq_ns)
        _ip("link", "set", "lo", "up", ns=self.mq_ns)
        for host in range(1, self.workers + 1):
            m, q = self.mq_end(host), self.worker_mq_end(host)
            _ip(
                "link",
                "add",
                m,
                "netns",
                self.mq_ns,
                "type",
                "veth",
                "peer",
                "name",
                q,
                "netns",
                self.ns(host),
            )
            _ip("addr", "add", f"{self.broker_address(host)}/30", "dev", m, ns=self.mq_ns)
            _ip("addr", "add", f"{BROKER_SUBNET}.{host}.2/30", "dev", q, ns=self.ns(host))
            _ip("link", "set", m, "up", ns=self.mq_ns)
            _ip("link", "set", q, "up", ns=self.ns(host))
        self.start_broker()

    def start_broker(self, timeout: float = 30) -> None:
        assert self.dir is not None
        binds = [self.broker_address(h) for h in range(1, self.workers + 1)]
        log = open(self.dir / "redis.log", "ab")
        self._redis = subprocess.Popen(
            ["ip", "netns", "exec", self.mq_ns, "redis-server", "--port", str(REDIS_PORT),
             "--bind", *binds, "--protected-mode", "no", "--save", "", "--appendonly", "no",
             "--unixsocket", str(self.broker_socket), "--unixsocketperm", "700", "--dir", str(self.dir),
             "--tcp-keepalive", "5"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        import redis

        deadline = time.monotonic() + timeout
        while True:
            try:
                if redis.Redis(unix_socket_path=str(self.broker_socket), socket_timeout=2).ping():
                    return
            except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
                pass
            if self._redis.poll() is not None:
                raise RuntimeError(
                    f"redis-server exited with {self._redis.returncode}; see {self.dir}/redis.log"
                )
            if time.monotonic() > deadline:
                raise TimeoutError("redis-server did not answer in time")
            time.sleep(0.05)

    def cut_broker(self, host: int) -> None:
        """Take the broker end of host's broker link down; its database link stays up."""
        _ip("link", "set", self.mq_end(host), "down", ns=self.mq_ns)

    def heal_broker(self, host: int) -> None:
        _ip("link", "set", self.mq_end(host), "up", ns=self.mq_ns)


DAGSTER_PG_TIMEOUTS = (
    "connect_timeout=3&keepalives=1&keepalives_idle=2&keepalives_interval=1&keepalives_count=3"
    "&tcp_user_timeout=5000"
)
DAGSTER_YAML = """\
storage:
  postgres:
    postgres_url: {env: DAGSTER_PG_URL}
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
telemetry: {enabled: false}
nux: {enabled: false}
"""


class CeleryRig:
    """The invoice database, Dagster's storage and celery workers on a BrokerCluster."""

    def __init__(
        self,
        cluster: BrokerCluster,
        work: Path,
        *,
        ttl_s: float = 30,
        heartbeat_s: int | None = None,
        invoices_db: str = "invoices",
        dagster_db: str = "dagster",
        create: bool = True,
    ) -> None:
        self.cluster, self.work = cluster, work
        self.invoices_db, self.dagster_db = invoices_db, dagster_db
        self.ttl_s, self.heartbeat_s = ttl_s, heartbeat_s or max(1, int(ttl_s // 3))
        work.mkdir(parents=True, exist_ok=True)
        self.home = work / "dagster_home"
        self.home.mkdir(exist_ok=True)
        (self.home / "dagster.yaml").write_text(DAGSTER_YAML)
        if create:
            from invoice_pipeline.db.migrate import migrate

            self.url = cluster.create_database(invoices_db)
            migrate(self.url)
            cluster.create_database(dagster_db)
        else:
            self.url = cluster.url(invoices_db)
        self.workers: dict[int, subprocess.Popen[bytes]] = {}

    def env(self, host: int | None) -> dict[str, str]:
        """The environment of a process on worker host `host` (None: the root namespace)."""
        c = self.cluster
        if host is None:
            db = c.url(self.invoices_db)
            dagster = f"postgresql+psycopg2://postgres@/{self.dagster_db}?host={c.sockdir}&port=5432"
        else:
            db = c.host_url(host, self.invoices_db)
            # Dagster's storage over the link, with libpq timeouts: a cut is noticed in seconds.
            dagster = (
                f"postgresql+psycopg2://postgres@{c.db_address(host)}:5432/{self.dagster_db}"
                f"?{DAGSTER_PG_TIMEOUTS}"
            )
        return {
            "DAGSTER_HOME": str(self.home),
            "DAGSTER_PG_URL": dagster,
            "INVOICE_PIPELINE_DATABASE_URL": db,
            "INVOICE_PIPELINE_CELERY_BROKER": c.broker_url(host),
            "INVOICE_PIPELINE_HOST_LABEL": f"host{host}" if host else "coordinator",
            "INVOICE_PIPELINE_LOCK_TTL_SECONDS": str(int(self.ttl_s)),
            "INVOICE_PIPELINE_HEARTBEAT_SECONDS": str(self.heartbeat_s),
            "INVOICE_PIPELINE_RETRY_BASE_SECONDS": "0",
            "PYTHONUNBUFFERED": "1",
        }

    def start_workers(self, hosts: list[int], timeout: float = 90) -> None:
        """One celery worker (one process, one task at a time) per host; wait until each is ready."""
        for host in hosts:
            log = self.work / f"celery-h{host}.log"
            self.workers[host] = self.cluster.run(
                host,
                ["-m", "celery", "-A", "invoice_pipeline.orchestration.celery_worker", "worker",
                 "-Q", "dagster", "--hostname", f"host{host}@cluster", "--pool", "solo",
                 "--without-gossip", "--without-mingle", "-l", "INFO"],
                env=self.env(host), log=log,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        for host in hosts:
            log = self.work / f"celery-h{host}.log"
            while not (log.exists() and " ready." in log.read_text(errors="replace")):
                if self.workers[host].poll() is not None:
                    raise RuntimeError(f"celery worker on host {host} exited: {log.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"celery worker on host {host} not ready: {log.read_text()[-2000:]}")
                time.sleep(0.1)

    def launch(
        self, invoice_ids: list[str], chunk_size: int, timeout: float = 180
    ) -> subprocess.Popen[bytes]:
        """The run's coordinator: `python -m pipeline_support.celery_cluster RUN_CONFIG` in the
        root namespace (it reaches PostgreSQL and the broker by Unix sockets)."""
        cfg = self.work / f"run-{len(list(self.work.glob('run-*.log')))}.json"
        cfg.write_text(json.dumps({"invoice_ids": invoice_ids, "chunk_size": chunk_size, "timeout": timeout}))
        log = open(cfg.with_suffix(".log"), "ab")
        proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "python"), "-m", "pipeline_support.celery_cluster", str(cfg)],
            cwd=ROOT, env={**os.environ, **self.env(None)}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        self.coordinator = proc
        self.run_file = cfg.with_suffix(".result.json")
        return proc

    def result(self, timeout: float) -> dict[str, Any]:
        try:
            self.coordinator.wait(timeout)
        except subprocess.TimeoutExpired:
            stop_group(self.coordinator)
            raise
        if not self.run_file.exists():
            log = self.run_file.with_suffix("").with_suffix(".log")
            raise RuntimeError(f"the coordinator wrote no result: {log.read_text()[-3000:]}")
        return dict(json.loads(self.run_file.read_text()))

    def close(self) -> None:
        coordinator = getattr(self, "coordinator", None)
        if coordinator is not None:
            stop_group(coordinator)
        for host in list(self.workers):
            self.cluster.kill_host_processes(host)
        self.workers.clear()


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    import signal

    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pass


def chunk_hosts(instance: Any, run_id: str) -> dict[str, dict[str, Any]]:
    """Each `work_chunk` step of a run: the celery worker that ran it (dagster-celery's engine
    event) and the summary metadata the step recorded (host label, client address)."""
    from dagster import DagsterEventType

    steps: dict[str, dict[str, Any]] = {}
    for record in instance.all_logs(run_id):
        ev = record.dagster_event
        if ev is None or not ev.step_key or not ev.step_key.startswith("work_chunk"):
            continue
        entry = steps.setdefault(ev.step_key, {})
        if ev.event_type == DagsterEventType.ENGINE_EVENT and "celery worker" in (ev.message or ""):
            md = ev.event_specific_data.metadata
            worker = md.get("Celery worker")
            entry.setdefault("celery_workers", []).append(getattr(worker, "value", worker))
        elif ev.event_type == DagsterEventType.STEP_OUTPUT:
            md = ev.event_specific_data.metadata
            entry["output"] = {k: getattr(v, "value", v) for k, v in md.items()}
        elif ev.event_type == DagsterEventType.STEP_SUCCESS:
            entry["success"] = True
        elif ev.event_type == DagsterEventType.STEP_FAILURE:
            entry["failures"] = entry.get("failures", 0) + 1
    return steps


def _coordinate(config_path: str) -> int:
    """Launch one celery batch run and wait for it; write its status and who ran which chunk."""
    from dagster import DagsterInstance, execute_job, reconstructable

    from invoice_pipeline.engine.runs import InvoiceRef, batch_run_config
    from invoice_pipeline.orchestration.celery_definitions import celery_batch_job

    cfg = json.loads(Path(config_path).read_text())
    out = Path(config_path).with_suffix(".result.json")
    run_config = batch_run_config([InvoiceRef(i) for i in cfg["invoice_ids"]], cfg["chunk_size"])
    started = time.time()
    with DagsterInstance.get() as instance:
        result = execute_job(
            reconstructable(celery_batch_job), instance=instance, run_config=run_config, raise_on_error=False
        )
        out.write_text(
            json.dumps(
                {
                    "run_id": result.run_id,
                    "success": result.success,
                    "seconds": round(time.time() - started, 2),
                    "steps": chunk_hosts(instance, result.run_id),
                },
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(_coordinate(sys.argv[1]))
