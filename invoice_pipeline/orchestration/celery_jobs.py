"""Scale-out, opt-in: the batch job's chunks spread over worker hosts by Dagster's celery executor.

The single-machine default (`make demo`, `make dev`, the in-process batch job of jobs.py) does
not import this module and needs no broker. A deployment that outgrows one machine installs the
`celery` extra, sets INVOICE_PIPELINE_CELERY_BROKER (e.g. `redis://broker:6379/0` or
`pyamqp://guest@rabbit//`), loads the code location `invoice_pipeline.orchestration.celery_definitions`,
and starts workers on any number of hosts:

    celery -A invoice_pipeline.orchestration.celery_worker worker -Q dagster --hostname host1@%h

Machines then share only PostgreSQL (the invoice database and Dagster's storage) and the broker:

- each chunk of a batch run is ONE step (`work_chunk`): claim, every stage, release, in one
  process on one host, with the leases heartbeated by that process for the whole chunk. The
  in-process job's per-stage ops would hand a chunk's leases from host to host between stages,
  with nobody heartbeating them while a step waits in the broker's queue;
- what steps pass each other (the fan-out's lists of invoice refs, each chunk's summary) goes
  through `PostgresJsonIOManager`, a table in the invoice database, never a local disk;
- every chunk records the address PostgreSQL saw it connect from (`inet_client_addr()`) and the
  celery worker that ran it, in its output's metadata: which host did what is in the run's log.

The fence stays the guarantee: a chunk whose host lost its leases (cut off, frozen) gets every
late write refused, wherever it runs; the TTL sweep releases them for another run.
"""

import os
import socket
from collections.abc import Sequence
from typing import Any

from dagster import (
    ConfigurableIOManager,
    InputContext,
    JobDefinition,
    OpExecutionContext,
    Out,
    Output,
    ResourceDependency,
    graph,
    op,
)

from invoice_pipeline.config import Settings
from invoice_pipeline.engine.runs import InvoiceRef
from invoice_pipeline.engine.stages import Lost
from invoice_pipeline.engine.store import as_uuid
from invoice_pipeline.orchestration.ops import TRANSIENT_RETRY, chunk_loop, dagster_hooks, fan_out
from invoice_pipeline.orchestration.resources import DocumentReader, InvoiceDatabase
from invoice_pipeline.orchestration.run_requests import PROCESS_INVOICE_BATCH, run_owner

ENV_CELERY_BROKER = "INVOICE_PIPELINE_CELERY_BROKER"
# Where workers store task results and the run's coordinator reads them; default: the broker.
ENV_CELERY_BACKEND = "INVOICE_PIPELINE_CELERY_BACKEND"
# A name for this host in the chunks' metadata (default: the machine's host name).
ENV_HOST_LABEL = "INVOICE_PIPELINE_HOST_LABEL"
PROCESS_INVOICE_BATCH_CELERY = f"{PROCESS_INVOICE_BATCH}_celery"


def celery_enabled(env: dict[str, str] | None = None) -> bool:
    return bool((env if env is not None else os.environ).get(ENV_CELERY_BROKER))


def celery_app_args(env: dict[str, str] | None = None) -> dict[str, Any]:
    """broker, backend and the celery settings both sides use (the executor and the workers)."""
    env = env if env is not None else dict(os.environ)
    broker = env.get(ENV_CELERY_BROKER)
    if not broker:
        raise RuntimeError(f"{ENV_CELERY_BROKER} is not set: the celery scale-out is opt-in")
    return {
        "broker": broker,
        "backend": env.get(ENV_CELERY_BACKEND) or broker,
        "config_source": celery_settings(env),
    }


def celery_settings(env: dict[str, str] | None = None) -> dict[str, Any]:
    """CELERY_SETTINGS with the broker heartbeat this environment asks for (config.py's
    INVOICE_PIPELINE_CELERY_BROKER_HEARTBEAT_SECONDS: why its default is 120 s)."""
    heartbeat = Settings.from_env(env).celery_broker_heartbeat
    return {**CELERY_SETTINGS, "broker_heartbeat": int(heartbeat.total_seconds())}


# Timeouts everywhere (DESIGN.md section 3): a cut link to the broker is noticed in seconds.
CELERY_SETTINGS: dict[str, Any] = {
    "worker_prefetch_multiplier": 1,  # a worker takes one chunk at a time: chunks spread over hosts
    "broker_connection_retry_on_startup": True,
    "broker_connection_timeout": 5,
    "broker_transport_options": {
        "max_retries": 3,
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.5,
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
        "health_check_interval": 5,
        # AMQP only (see broker_heartbeat below); kombu's redis channel reads only the options
        # it knows, py-amqp's connection ignores the redis ones.
        "confirm_publish": True,
    },
    "redis_socket_timeout": 10,
    "redis_socket_connect_timeout": 5,
    # No redis_socket_keepalive: celery's redis backend passes it to a Unix-socket connection too,
    # which refuses it (redis+socket:// URLs); the socket timeout bounds a silent cut instead.
    "redis_retry_on_timeout": True,
    "result_backend_transport_options": {"retry_policy": {"timeout": 30.0}},
    # -- AMQP (RabbitMQ, pyamqp://); the redis transport has no heartbeats and ignores these. --
    # broker_heartbeat: celery_settings(), from the environment.
    # Publisher confirms: a task published into a connection RabbitMQ already closed (an idle
    # coordinator sends no heartbeats between its ticks) raises and is retried, instead of being
    # written into a dead socket and lost: the option is confirm_publish in
    # broker_transport_options, above.
    # Not task_acks_late: dagster-celery leaves celery's default, the ack as the task starts.
    # With the prefork pool a step running on a cut worker is then not redelivered; with the
    # solo pool the ack is scheduled on the worker's event loop, which turns again only once the
    # step is over, so a cut (or heartbeat-closed) worker's running step is redelivered anyway.
    # Either way a step run twice claims nothing (chaos.asymmetric: asym_broker_rabbitmq).
}


# -- what steps pass each other: JSON in the invoice database ------------------------------------


def _encode(value: Any) -> Any:
    if isinstance(value, list) and all(isinstance(v, InvoiceRef) for v in value):
        return {"refs": [[r.invoice_id, r.attempt, r.redrive] for r in value]}
    return {"value": value}


def _decode(data: Any) -> Any:
    if "refs" in data:
        return [InvoiceRef(i, a, d) for i, a, d in data["refs"]]
    return data["value"]


class PostgresJsonIOManager(ConfigurableIOManager):
    """Step outputs as JSON rows of the invoice database: what every host already reaches.

    Only plain JSON values and lists of InvoiceRef; nothing is unpickled from the database.
    """

    invoice_db: ResourceDependency[InvoiceDatabase]

    def _key(self, identifier: Sequence[str]) -> str:
        return "/".join(identifier)

    def handle_output(self, context: Any, obj: Any) -> None:
        ident = context.get_identifier()
        self.invoice_db.store.step_outputs.save_step_output(self._key(ident), ident[0], _encode(obj))

    def load_input(self, context: InputContext) -> Any:
        assert context.upstream_output is not None
        key = self._key(context.upstream_output.get_identifier())
        value = self.invoice_db.store.step_outputs.load_step_output(key)
        if value is None:
            raise RuntimeError(f"no stored output {key}")
        return _decode(value)


# -- one chunk, one step, one host --------------------------------------------------------------


def host_label() -> str:
    return os.environ.get(ENV_HOST_LABEL) or socket.gethostname()


@op(
    out=Out(dict),
    retry_policy=TRANSIENT_RETRY,
    description="Claim a chunk, run every stage over it and release it, on one host, leases heartbeated throughout.",
)
def work_chunk(
    context: OpExecutionContext,
    refs: list[InvoiceRef],
    invoice_db: InvoiceDatabase,
    document_reader: DocumentReader,
) -> Output[dict]:
    store = invoice_db.store
    client_addr = store.step_outputs.connected_from() or "local socket"
    env = invoice_db.stage_env(document_reader)
    loop = chunk_loop(invoice_db)
    wanted = [(as_uuid(r.invoice_id), r.attempt) for r in refs]
    claims = loop.claim(wanted, run_owner(context.run_id))
    # Every stage in this one step, and a failed chunk released at once, so a retry of this step,
    # on any host, claims it afresh; when the database is what failed, the sweep does after the TTL.
    result = loop.run(env, claims, dagster_hooks(context, store))
    finished = result.finished
    lost = sum(report.count(Lost) for report in result.reports)
    summary: dict[str, str | int] = {
        "host": host_label(),
        "client_addr": client_addr,
        "pid": os.getpid(),
        "asked": len(refs),
        "claimed": len(claims),
        "finished": len(finished.written),
        "lost": lost + len(finished.lost),
    }
    context.log.info(f"chunk on {summary['host']} ({client_addr}): {summary}")
    return Output(summary, metadata={k: v for k, v in summary.items() if k != "pid"})


@graph(name=PROCESS_INVOICE_BATCH_CELERY)
def process_invoice_batch_celery_graph() -> None:
    fan_out().map(work_chunk)


def make_celery_batch_job(resources: dict[str, Any]) -> JobDefinition:
    """The batch job over worker hosts (config as process_invoice_batch: invoice_ids, chunk_size).

    The executor's broker and backend are given by the environment variables' names, so
    Dagster's storage keeps the names, never a URL with its password.
    """
    from dagster_celery import celery_executor

    backend_env = ENV_CELERY_BACKEND if os.environ.get(ENV_CELERY_BACKEND) else ENV_CELERY_BROKER
    executor = celery_executor.configured(
        {
            "broker": {"env": ENV_CELERY_BROKER},
            "backend": {"env": backend_env},
            "config_source": celery_settings(),
        },
        name="celery",
    )
    return process_invoice_batch_celery_graph.to_job(
        description=(
            "Process many invoices in one run, each chunk a step on some celery worker host "
            "(config as process_invoice_batch)."
        ),
        executor_def=executor,
        resource_defs={**resources, "io_manager": PostgresJsonIOManager(invoice_db=resources["invoice_db"])},
    )
