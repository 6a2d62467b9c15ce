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

`BrokerCluster(workers, broker="rabbitmq")`: the broker host runs a private RabbitMQ node
instead (`rabbit@localhost` of the broker namespace, with its own epmd on that namespace's
loopback; its data, logs, config, empty plugin list and Erlang cookie all in the cluster's
directory). It listens on the broker ends of the links (10.214.i.1) and on the namespace's
loopback only. AMQP has no Unix socket, so the run's coordinator runs INSIDE the broker
namespace (`coordinator_ns`) and publishes over its loopback, never cut; it reaches PostgreSQL
through the Unix socket directory, which works across network namespaces. The node's one user
has a password generated at start (never in the repo, gone with the directory).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline_support.netns import ROOT, Cluster, ip

BROKER_SUBNET = "10.214"
REDIS_PORT = 6379
AMQP_PORT = 5672
BROKERS = ("redis", "rabbitmq")
RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
AMQP_USER = "invoice"


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


def rabbitmq_unavailable_reason() -> str | None:
    """One line saying why a RabbitMQ broker host cannot run here, or None."""
    reason = celery_unavailable_reason()
    if reason:
        return reason
    try:
        import amqp  # noqa: F401
    except ImportError:
        return "py-amqp not importable: pip install -e '.[celery]'"
    # The scripts themselves, not /usr/sbin's wrapper (it switches to the `rabbitmq` user and
    # the machine's own node's environment file).
    if not (RABBITMQ_BIN / "rabbitmq-server").exists() or shutil.which("erl") is None:
        return f"no rabbitmq-server in {RABBITMQ_BIN} (or no Erlang) for the broker host"
    return None


def start_redis_server(
    where: Path, args: Sequence[str], *, prefix: Sequence[str] = (), timeout: float = 30
) -> subprocess.Popen[bytes]:
    """A redis-server keeping nothing on disk, also listening on the Unix socket `where/redis.sock`
    (log: `where/redis.log`), its own process group; returns once it answers there."""
    import redis

    socket_path = where / "redis.sock"
    with open(where / "redis.log", "ab") as log:
        proc = subprocess.Popen(
            [*prefix, "redis-server", *args, "--save", "", "--appendonly", "no",
             "--unixsocket", str(socket_path), "--unixsocketperm", "700", "--dir", str(where)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        try:
            if redis.Redis(unix_socket_path=str(socket_path), socket_timeout=2).ping():
                return proc
        except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}; see {where}/redis.log")
        if time.monotonic() > deadline:
            raise TimeoutError("redis-server did not answer in time")
        time.sleep(0.05)


class BrokerCluster(Cluster):
    """A Cluster plus a broker host (redis or RabbitMQ) on its own links to every worker host."""

    def __init__(self, workers: int = 3, *, broker: str = "redis", **kwargs: Any) -> None:
        if broker not in BROKERS:
            raise ValueError(f"broker: one of {BROKERS}")
        super().__init__(workers, **kwargs)
        self.broker = broker
        self.mq_ns = f"{self.tag}-mq"
        self._redis: subprocess.Popen[bytes] | None = None
        self._rabbit: subprocess.Popen[bytes] | None = None
        # A throwaway password for the node's one user: made here, known to this process and the
        # environments it gives its children, never written to the repo.
        self._amqp_password = secrets.token_hex(16)

    def __enter__(self) -> BrokerCluster:
        super().__enter__()
        return self

    def mq_end(self, host: int) -> str:
        return f"{self.tag}m{host}"

    def worker_mq_end(self, host: int) -> str:
        return f"{self.tag}q{host}"

    def worker_broker_address(self, host: int) -> str:
        """Worker host `host`'s end of its broker link: where its broker connections come from."""
        self._check_host(host)
        return f"{BROKER_SUBNET}.{host}.2"

    def broker_address(self, host: int) -> str:
        self._check_host(host)
        return f"{BROKER_SUBNET}.{host}.1"

    @property
    def broker_socket(self) -> Path:
        assert self.dir is not None
        return self.dir / "redis.sock"

    @property
    def coordinator_ns(self) -> str | None:
        """Where the run's coordinator runs: the root namespace (None) for redis (its Unix
        socket), the broker namespace for RabbitMQ (AMQP over that namespace's loopback)."""
        return self.mq_ns if self.broker == "rabbitmq" else None

    def broker_url(self, host: int | None = None) -> str:
        """Worker host `host`'s URL of the broker, over its broker link; None: the coordinator's
        (redis: the Unix socket; RabbitMQ: the broker namespace's loopback)."""
        if self.broker == "rabbitmq":
            where = "127.0.0.1" if host is None else self.broker_address(host)
            return f"pyamqp://{AMQP_USER}:{self._amqp_password}@{where}:{AMQP_PORT}//"
        if host is None:
            return f"redis+socket://{self.broker_socket}"
        return f"redis://{self.broker_address(host)}:{REDIS_PORT}/0"

    def _build(self) -> None:
        super()._build()
        self._add_ns(self.mq_ns)
        ip("link", "set", "lo", "up", ns=self.mq_ns)
        for host in range(1, self.workers + 1):
            m, q = self.mq_end(host), self.worker_mq_end(host)
            ip(
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
            ip("addr", "add", f"{self.broker_address(host)}/30", "dev", m, ns=self.mq_ns)
            ip("addr", "add", f"{self.worker_broker_address(host)}/30", "dev", q, ns=self.ns(host))
            ip("link", "set", m, "up", ns=self.mq_ns)
            ip("link", "set", q, "up", ns=self.ns(host))
        self.start_broker()

    def start_broker(self, timeout: float = 30) -> None:
        if self.broker == "rabbitmq":
            self._start_rabbitmq(timeout=max(timeout, 90))
        else:
            self._start_redis(timeout)

    def _start_redis(self, timeout: float) -> None:
        assert self.dir is not None
        binds = [self.broker_address(h) for h in range(1, self.workers + 1)]
        self._redis = start_redis_server(
            self.dir,
            ["--port", str(REDIS_PORT), "--bind", *binds, "--protected-mode", "no", "--tcp-keepalive", "5"],
            prefix=["ip", "netns", "exec", self.mq_ns],
            timeout=timeout,
        )

    # -- RabbitMQ ----------------------------------------------------------------------------

    @property
    def rabbit_dir(self) -> Path:
        assert self.dir is not None
        return self.dir / "rabbitmq"

    def _rabbit_env(self) -> dict[str, str]:
        """The node's and rabbitmqctl's environment: everything in the cluster's directory."""
        d = self.rabbit_dir
        return {
            **os.environ,
            "HOME": str(d / "home"),  # the Erlang cookie: made by the node, read by rabbitmqctl
            # Not /etc/rabbitmq/rabbitmq-env.conf: that is the machine's own node's.
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": "rabbit@localhost",
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(d / "rabbit.pid"),
            # epmd and the Erlang distribution port on the broker namespace's loopback only.
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    def rabbitmqctl(self, *args: str, timeout: float = 30) -> str:
        """`rabbitmqctl ARGS` against the node, from inside the broker namespace (bounded)."""
        done = subprocess.run(
            ["ip", "netns", "exec", self.mq_ns, str(RABBITMQ_BIN / "rabbitmqctl"), *args],
            env=self._rabbit_env(), capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)}: {done.returncode} {done.stderr[-1000:]}")
        return done.stdout

    def _start_rabbitmq(self, timeout: float) -> None:
        d = self.rabbit_dir
        for sub in ("home", "mnesia", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o700)  # the config holds the throwaway password
        (d / "rabbitmq-env.conf").write_text("")
        (d / "enabled_plugins").write_text("[].\n")  # no management plugin, no other listener
        listeners = [
            f"listeners.tcp.{h} = {self.broker_address(h)}:{AMQP_PORT}" for h in range(1, self.workers + 1)
        ]
        (d / "rabbitmq.conf").write_text(
            "\n".join(
                [
                    *listeners,
                    f"listeners.tcp.local = 127.0.0.1:{AMQP_PORT}",  # the coordinator, same namespace
                    # The one user, created on the node's first boot; not `guest`, which may only
                    # log in over loopback (RabbitMQ's loopback_users default, kept).
                    f"default_user = {AMQP_USER}",
                    f"default_pass = {self._amqp_password}",
                    "log.console = false",
                    "log.file.level = info",
                    "",
                ]
            )
        )
        log = open(self.dir / "rabbitmq.log" if self.dir else os.devnull, "ab")
        self._rabbit = subprocess.Popen(
            ["ip", "netns", "exec", self.mq_ns, str(RABBITMQ_BIN / "rabbitmq-server")],
            cwd=d, env=self._rabbit_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()
        # An event, bounded: `rabbitmqctl wait` returns once the pid file exists and the rabbit
        # application runs (or fails when the node's OS process exits first).
        try:
            self.rabbitmqctl(
                "--timeout", str(int(timeout)), "wait", str(d / "rabbit.pid"), timeout=timeout + 15
            )
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            tail = (self.dir / "rabbitmq.log").read_text(errors="replace")[-2000:] if self.dir else ""
            raise RuntimeError(f"RabbitMQ did not start in the broker namespace: {exc}\n{tail}") from exc

    def unacked(self, host: int) -> int:
        """Deliveries RabbitMQ has made to host's connections and not yet seen acknowledged."""
        peer = f"{self.worker_broker_address(host)}:"
        total = 0
        for line in self.rabbitmqctl("-q", "list_channels", "name", "messages_unacknowledged").splitlines():
            name, _, count = line.rpartition("\t")
            if name.startswith(peer) and count.strip().isdigit():
                total += int(count)
        return total

    def amqp_connections(self, host: int) -> int:
        """How many AMQP connections RabbitMQ still holds open from host."""
        peer = self.worker_broker_address(host)
        out = self.rabbitmqctl("-q", "list_connections", "peer_host")
        return sum(1 for line in out.splitlines() if line.strip() == peer)

    def close(self) -> None:
        super().close()  # kills every process of every namespace: the node, its epmd, redis
        for proc in (self._rabbit, self._redis):
            if proc is not None:
                try:
                    proc.wait(10)  # reap it: no zombie left in this process's table
                except subprocess.TimeoutExpired:
                    pass
        self._rabbit = self._redis = None

    def cut_broker(self, host: int) -> None:
        """Take the broker end of host's broker link down; its database link stays up."""
        ip("link", "set", self.mq_end(host), "down", ns=self.mq_ns)

    def heal_broker(self, host: int) -> None:
        ip("link", "set", self.mq_end(host), "up", ns=self.mq_ns)


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
        if create and cluster.broker == "rabbitmq":
            # Celery's result tables, made once here: the workers' first results would otherwise
            # race to create them.
            import sqlalchemy
            from celery.backends.database.session import ResultModelBase

            engine = sqlalchemy.create_engine(self._dagster_url(None))
            try:
                ResultModelBase.metadata.create_all(engine)
            finally:
                engine.dispose()
        self.workers: dict[int, subprocess.Popen[bytes]] = {}

    def _dagster_url(self, host: int | None) -> str:
        c = self.cluster
        if host is None:
            return f"postgresql+psycopg2://postgres@/{self.dagster_db}?host={c.sockdir}&port=5432"
        # Dagster's storage over the link, with libpq timeouts: a cut is noticed in seconds.
        return (
            f"postgresql+psycopg2://postgres@{c.db_address(host)}:5432/{self.dagster_db}"
            f"?{DAGSTER_PG_TIMEOUTS}"
        )

    def env(self, host: int | None) -> dict[str, str]:
        """The environment of a process on worker host `host` (None: the root namespace)."""
        c = self.cluster
        db = c.url(self.invoices_db) if host is None else c.host_url(host, self.invoices_db)
        dagster = self._dagster_url(host)
        amqp: dict[str, str] = {}
        if c.broker == "rabbitmq":
            # Results in PostgreSQL (celery's database backend, in Dagster's storage database),
            # not over AMQP: a worker stores its step's result over the same path as the step's
            # own events, so a cut BROKER link (the fault under test) does not touch it, and
            # the coordinator reads it through the Unix socket the moment it is written.
            # `rpc://` would send it over the cut link as a transient message, lost when
            # published into a connection that is dead but not yet known to be; a redis
            # backend would be a second server on the cut path, its retries bounding the cut.
            amqp["INVOICE_PIPELINE_CELERY_BACKEND"] = f"db+{dagster}"
            # A cut consumer noticed in seconds: the trials' steps (one invoice) are far
            # shorter than the two intervals a solo worker can go without a heartbeat.
            amqp["INVOICE_PIPELINE_CELERY_BROKER_HEARTBEAT_SECONDS"] = "4"
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
            **amqp,
        }

    def start_workers(self, hosts: list[int], timeout: float = 90) -> None:
        """One celery worker (one process, one task at a time) per host; wait until each is ready."""
        for host in hosts:
            log = self.work / f"celery-h{host}.log"
            # --concurrency 1: the prefetch is concurrency x worker_prefetch_multiplier, and a solo
            # worker's concurrency defaults to the CPU count (it then held two chunks, not one).
            self.workers[host] = self.cluster.run(
                host,
                ["-m", "celery", "-A", "invoice_pipeline.orchestration.celery_worker", "worker",
                 "-Q", "dagster", "--hostname", f"host{host}@cluster", "--pool", "solo", "--concurrency", "1",
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
        root namespace, reaching PostgreSQL and redis by Unix sockets (RabbitMQ: in the broker
        namespace, see BrokerCluster.coordinator_ns)."""
        cfg = self.work / f"run-{len(list(self.work.glob('run-*.log')))}.json"
        cfg.write_text(json.dumps({"invoice_ids": invoice_ids, "chunk_size": chunk_size, "timeout": timeout}))
        log = open(cfg.with_suffix(".log"), "ab")
        ns = self.cluster.coordinator_ns
        proc = subprocess.Popen(
            (["ip", "netns", "exec", ns] if ns else [])
            + [str(ROOT / ".venv" / "bin" / "python"), "-m", "pipeline_support.celery_cluster", str(cfg)],
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

    def _task_log(self, host: int, event: str) -> list[str]:
        """The celery task ids host's worker log shows at `event` (a regex), in order."""
        text = (self.work / f"celery-h{host}.log").read_text(errors="replace")
        return re.findall(rf"Task \S+\[([0-9a-f-]{{36}})\] {event}", text)

    def received_tasks(self) -> dict[str, list[int]]:
        """Every celery task id the workers' logs show received, and by which hosts (a task
        RabbitMQ or redis redelivered appears twice)."""
        seen: dict[str, list[int]] = {}
        for host in self.workers:
            for task_id in self._task_log(host, "received"):
                seen.setdefault(task_id, []).append(host)
        return seen

    def tasks_in_flight(self) -> dict[int, set[str]]:
        """Per worker host, the celery task ids its log shows received and not yet ended."""
        return {
            host: set(self._task_log(host, "received"))
            - set(self._task_log(host, "(?:succeeded|raised|failed)"))
            for host in self.workers
        }

    def wait_idle(self, timeout: float) -> bool:
        """Until every worker has ended every task it received (a redelivered duplicate still
        running after its run ended, say); False when the time is up."""
        deadline = time.monotonic() + timeout
        while any(self.tasks_in_flight().values()):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

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

    from invoice_pipeline.engine.runs import InvoiceRef
    from invoice_pipeline.orchestration.celery_definitions import celery_batch_job
    from invoice_pipeline.orchestration.run_requests import batch_run_config

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
