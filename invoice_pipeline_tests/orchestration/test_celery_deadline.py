"""The celery code location launched by its own sensor, and a task the broker lost.

dagster-celery's coordinator waits for every task's result with no deadline of its own. A task
the broker loses (redis hands a popped message to a worker whose link just died, and keeps no
copy: docs/scale-out.md) would keep its run STARTED, and its invoices requested, for ever.

Everything here is real and in separate processes: a redis-server of the test's own (on a Unix
socket, no TCP port), `dagster-daemon run` on the celery code location with the dagster.yaml
invoice-pipeline writes (run monitoring and run retries on; only the monitoring poll made
faster), and a celery worker. The test plays the broker losing the run's task: it deletes the
queued message before any worker exists. Then:

- the sensor launched `process_invoice_batch_celery` (not the in-process job) with the deadline
  tag from INVOICE_PIPELINE_CELERY_MAX_RUN_SECONDS;
- Dagster's run monitoring failed that run at its deadline;
- the invoices were processed by a later run, each posted exactly once, no lease left running.

Skips with one line without dagster-celery or a redis-server binary.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from invoice_pipeline.orchestration.run_requests import invoice_ids_of
from invoice_pipeline_tests.support import outcome
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.celery_cluster import celery_unavailable_reason, start_redis_server
from pipeline_support.helpers import create_database, drop_database, stop_process_group, wait_for
from pipeline_support.netns import ROOT

pytestmark = needs_tool("redis-server", celery_unavailable_reason())

INVOICES = 5
DEADLINE_S = 15
QUEUE = "dagster"


class Broker:
    """A redis-server on a Unix socket in `where`; stopped by close()."""

    def __init__(self, where: Path) -> None:
        import redis

        self.socket = where / "redis.sock"
        self.proc = start_redis_server(where, ["--port", "0"])
        self.client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=5)

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket}"

    def queued_messages(self) -> list[bytes]:
        """The task queue's lists: kombu keeps one per priority step (`dagster`, `dagster\\x06\\x163`, ...)."""
        return [k for k in self.client.scan_iter(match=f"{QUEUE}*") if self.client.type(k) == b"list"]

    def lose_queued_tasks(self) -> int:
        """What a broker that lost the messages leaves: the queue empty, nobody to redeliver."""
        keys = self.queued_messages()
        lost = sum(int(self.client.llen(k)) for k in keys)  # type: ignore[arg-type, misc]
        if keys:
            self.client.delete(*keys)
        return lost

    def close(self) -> None:
        stop_process_group(self.proc)


def dagster_yaml() -> str:
    """The dagster.yaml `invoice-pipeline dev` writes, with run monitoring polled every second
    (its 30 s would only make the test slower)."""
    from invoice_pipeline.orchestration.dagster_home import DAGSTER_YAML

    config = yaml.safe_load(DAGSTER_YAML.format(max_concurrent_runs=4))
    assert config["run_monitoring"]["enabled"] is True and config["run_retries"]["enabled"] is True
    config["run_monitoring"]["poll_interval_seconds"] = 1
    return yaml.safe_dump(config)


@pytest.fixture
def deployment(
    database_url: str, server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, Any]]:
    from invoice_pipeline.orchestration.dagster_home import dagster_database_url

    dagster_db = create_database(server_url, prefix="ip_dagster")
    broker = Broker(tmp_path)
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(dagster_yaml())
    (tmp_path / "inbox").mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_URL": dagster_database_url(dagster_db, dagster_db.rsplit("/", 1)[1].split("?")[0]),
        "INVOICE_PIPELINE_DATABASE_URL": database_url,
        "INVOICE_PIPELINE_HOME": str(tmp_path / "home"),
        "INVOICE_PIPELINE_INBOX": str(tmp_path / "inbox"),
        "INVOICE_PIPELINE_CELERY_BROKER": broker.url,
        "INVOICE_PIPELINE_CELERY_MAX_RUN_SECONDS": str(DEADLINE_S),
        "PYTHONUNBUFFERED": "1",
    }
    for name in ("DAGSTER_HOME", "DAGSTER_PG_URL"):
        monkeypatch.setenv(name, env[name])
    procs: list[subprocess.Popen[bytes]] = []

    def start(args: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(tmp_path / log, "ab") as out:
            proc = subprocess.Popen(
                args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        procs.append(proc)
        return proc

    try:
        yield {"env": env, "broker": broker, "start": start, "dir": tmp_path}
    finally:
        for proc in reversed(procs):
            stop_process_group(proc)
        broker.close()
        drop_database(server_url, dagster_db)


def celery_runs(instance: Any) -> list[Any]:
    from invoice_pipeline.orchestration.celery_jobs import PROCESS_INVOICE_BATCH_CELERY

    return sorted(
        (r for r in instance.get_runs() if r.job_name == PROCESS_INVOICE_BATCH_CELERY),
        key=lambda r: instance.get_run_record_by_id(r.run_id).create_timestamp,
    )


def test_a_run_whose_task_the_broker_lost_is_failed_at_its_deadline_and_its_invoices_are_processed(
    deployment: dict[str, Any], database_url: str
) -> None:
    from dagster import DagsterInstance, DagsterRunStatus

    from chaos.partition_trial import ingest

    bin_dir = Path(sys.executable).parent
    ids = ingest(database_url, INVOICES, "deadline", random.Random(7))
    broker: Broker = deployment["broker"]
    daemon = deployment["start"](
        [str(bin_dir / "dagster-daemon"), "run", "-m", "invoice_pipeline.orchestration.celery_definitions"],
        "daemon.log",
    )
    with DagsterInstance.get() as instance:

        def first_run_waiting_on_its_task() -> Any:
            assert daemon.poll() is None, (deployment["dir"] / "daemon.log").read_text()[-3000:]
            runs = celery_runs(instance)
            if runs and runs[0].status == DagsterRunStatus.STARTED and broker.queued_messages():
                return runs[0]
            return None

        first = wait_for(
            first_run_waiting_on_its_task, timeout=180, interval=0.2, what="the celery run's task"
        )
        assert broker.lose_queued_tasks() >= 1
        # The celery location's sensor launched the celery job, with the deadline, for every invoice.
        assert first.tags["dagster/sensor_name"] == "new_invoices_celery_sensor"
        assert first.tags["dagster/max_runtime"] == str(DEADLINE_S)
        assert sorted(invoice_ids_of(first.run_config)) == sorted(ids)

        worker = deployment["start"](
            [str(bin_dir / "python"), "-m", "celery", "-A", "invoice_pipeline.orchestration.celery_worker",
             "worker", "-Q", QUEUE, "--pool", "solo", "--without-gossip", "--without-mingle",
             "--hostname", "w1@test", "-l", "INFO"],
            "worker.log",
        )  # fmt: skip

        def ended(run_id: str) -> Any:
            assert worker.poll() is None, (deployment["dir"] / "worker.log").read_text()[-3000:]
            run = instance.get_run_by_id(run_id)
            return run if run is not None and run.is_finished else None

        failed = wait_for(lambda: ended(first.run_id), timeout=120, interval=0.5, what="the deadline")
        assert failed.status == DagsterRunStatus.FAILURE
        messages = [r.message for r in instance.all_logs(first.run_id)]
        assert f"Exceeded maximum runtime of {DEADLINE_S} seconds." in messages, messages[-10:]

        # Dagster's run retry (on in the dagster.yaml invoice-pipeline writes) re-executes the
        # failed run, deadline tag and run key included; its tasks reach the worker.
        def retry_of_first() -> Any:
            runs = [r for r in celery_runs(instance) if r.tags.get("dagster/parent_run_id") == first.run_id]
            return runs[0] if runs else None

        retry = wait_for(retry_of_first, timeout=120, interval=0.5, what="the failed run's retry")
        assert retry.tags["dagster/max_runtime"] == str(DEADLINE_S)
        assert retry.tags["dagster/run_key"] == first.tags["dagster/run_key"]
        done = wait_for(lambda: ended(retry.run_id), timeout=240, interval=0.5, what="the retry to end")
        retry_log = [r.message for r in instance.all_logs(retry.run_id)]
        assert done.status == DagsterRunStatus.SUCCESS, retry_log[-10:]

    done = outcome(database_url)
    assert done.statuses == {"processed": INVOICES}, done
    assert done.postings == done.posted_invoices == INVOICES, done
    assert done.running_leases == 0
