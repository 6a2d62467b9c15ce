"""The deployment run from its manifests with `podman kube play`, and a run worker SIGKILLed.

deploy/kube/migrate.yaml, then deploy/kube/invoice-pipeline.yaml (Dagster's webserver, daemon and
the celery code location in one pod; two celery run workers, the Deployment's two replicas), on
PostgreSQL 15 and a redis broker started from backing.yaml beside this file. All from images built
here: the product's from deploy/Dockerfile, the backing ones from Debian's packages.

What the test changes to play the manifests on one machine (`localised`): unique names (the
pods, the ConfigMap and the podman secrets: reruns and other sessions never collide), the images
built here, free ports in place of the fixed ones, every pod on the host's network (so the test
reaches PostgreSQL and the webserver on loopback, as test_container_image.py does), and
INVOICE_PIPELINE_BATCH_SIZE=10, so that 30 invoices make three runs of one ten-invoice chunk each,
spread over both workers. The secrets are made by the test (podman's secret store), never written
to the manifests.

Then: invoices are stored, the first one's text row held by the test (inserted, uncommitted); once
a chunk waits on that row (pg_blocking_pids), its leases held, the worker running it (Dagster's
engine event names the celery worker) has its container killed with SIGKILL and the row is let
go; its leases are back-dated past the TTL instead of waiting 30 s; the sensor's sweep frees them
and requests the invoices again, and the other worker processes them. Every invoice
is posted exactly once, the dead worker's leases were swept, and the killed container stays dead
(podman does not restart it: the restart policy is not applied to a killed container here).

Skipped with a one-line reason where podman, runc, debootstrap or root is missing.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from invoice_pipeline_tests.tools import needs_tool
from pipeline_support import containers
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import answers, blocks_someone, free_port, hold_text_rows, wait_for

pytestmark = [needs_tool("podman", containers.unavailable_reason()), pytest.mark.timeout(1200)]

KUBE = containers.ROOT / "deploy" / "kube"
BACKING = Path(__file__).with_name("backing.yaml")
INVOICES = 30
BATCH_SIZE = 10
# The manifests' fixed ports, each replaced by a free one (every pod is on the host's network).
PORTS = {"postgres": 5432, "redis": 6379, "code": 3030, "webserver": 3000, "review": 3100}
# The review pod's authenticating proxy (oauth2-proxy) has no image here and no identity provider to
# log in with: it is left out, and the test speaks to the page as that proxy would, from loopback.
LEFT_OUT = {"auth-proxy"}
PRODUCT_IMAGE = "registry.example.com/invoice-pipeline:1.0.0"
CELERY_JOB = "process_invoice_batch_celery"


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return containers.environment(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def images(podman_env: dict[str, str]) -> dict[str, str]:
    ready = containers.ready_image(podman_env)
    containers.ensure_postgres_image(podman_env)
    containers.ensure_redis_image(podman_env)
    print(f"\n{ready.describe()}")
    return {
        PRODUCT_IMAGE: ready.image,
        "postgres": containers.POSTGRES_IMAGE,
        "redis": containers.REDIS_IMAGE,
    }


@dataclass
class Stack:
    """The manifests as played here: names, ports, URLs; what to tear down."""

    env: dict[str, str]
    images: dict[str, str]
    dir: Path
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    ports: dict[str, int] = field(default_factory=lambda: {k: free_port() for k in PORTS})
    played: list[Path] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)

    def name(self, name: str) -> str:
        return f"{name}-{self.suffix}"

    def url(self, database: str, scheme: str = "postgresql") -> str:
        return f"{scheme}://postgres@127.0.0.1:{self.ports['postgres']}/{database}"

    @property
    def database_url(self) -> str:
        return self.url("invoices")

    @property
    def dagster_url(self) -> str:
        return self.url("invoices_dagster", "postgresql+psycopg2")

    def worker_pods(self) -> list[str]:
        return [f"{self.name('worker')}-pod-{i}" for i in range(2)]

    def localised(self, source: Path) -> Path:
        """The manifest with this run's names, images, ports, host networking and batch size."""
        text = source.read_text()
        for what, port in PORTS.items():
            text = re.sub(rf"\b{port}\b", str(self.ports[what]), text)
        docs = [d for d in yaml.safe_load_all(text) if d]
        for doc in docs:
            doc["metadata"]["name"] = self.name(doc["metadata"]["name"])
            if doc["kind"] in ("Pod", "Deployment"):
                self._localise_pod(
                    doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
                )
        out = self.dir / source.name
        out.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return out

    def _localise_pod(self, spec: dict[str, Any]) -> None:
        spec["hostNetwork"] = True
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["name"] = self.name(volume["configMap"]["name"])
        spec["containers"] = [c for c in spec["containers"] if c["name"] not in LEFT_OUT]
        for container in spec["containers"]:
            # Podman 4.3 refuses a containerPort on the host's network ("PortMappings can only be
            # used with Bridge or slirp4netns networking"); Kubernetes ignores it there.
            container.pop("ports", None)
            container["image"] = self.images.get(container["image"]) or self.images[container["name"]]
            for source in container.get("envFrom", []):
                source["secretRef"]["name"] = self.name(source["secretRef"]["name"])
            for variable in container.get("env", []):
                if variable["name"] == "INVOICE_PIPELINE_BATCH_SIZE":
                    variable["value"] = str(BATCH_SIZE)

    def create_secrets(self) -> None:
        values = {
            "invoice-pipeline-db": {
                "INVOICE_PIPELINE_DATABASE_URL": self.database_url,
                "DAGSTER_PG_URL": self.dagster_url,
            },
            "invoice-pipeline-broker": {
                "INVOICE_PIPELINE_CELERY_BROKER": f"redis://127.0.0.1:{self.ports['redis']}/0"
            },
        }
        for name, data in values.items():
            containers.create_secret(self.env, self.name(name), data)
            self.secrets.append(self.name(name))

    def play(self, source: Path) -> None:
        manifest = self.localised(source)
        self.played.append(manifest)
        containers.kube_play(self.env, manifest)

    def down(self) -> None:
        for manifest in reversed(self.played):
            containers.kube_down(self.env, manifest)
        for name in self.secrets:
            containers.remove_secret(self.env, name)


def _accepts(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


@pytest.fixture
def stack(podman_env: dict[str, str], images: dict[str, str], tmp_path: Path) -> Iterator[Stack]:
    """Backing pod, databases, the migrate pod run to its end, then the deployment."""
    started = time.monotonic()
    stack = Stack(podman_env, images, tmp_path)
    try:
        stack.create_secrets()
        stack.play(BACKING)
        server = stack.url("postgres")
        wait_for(lambda: _accepts(server), timeout=60, interval=0.2, what="PostgreSQL in the backing pod")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("CREATE DATABASE invoices")
            conn.execute("CREATE DATABASE invoices_dagster")
        stack.play(KUBE / "migrate.yaml")
        migrate = containers.pod_container(stack.name("invoice-pipeline-migrate"), "migrate")
        state = wait_for(
            lambda: (s := containers.container_state(podman_env, migrate)).get("Status") == "exited" and s,
            timeout=180,
            interval=0.5,
            what="the migrate pod to end",
        )
        assert state["ExitCode"] == 0, containers.container_logs(podman_env, migrate)
        stack.play(KUBE / "invoice-pipeline.yaml")
        web = f"http://127.0.0.1:{stack.ports['webserver']}/server_info"
        wait_for(lambda: answers(web), timeout=240, interval=1, what="Dagster's webserver in its pod")
        print(f"\nstack up in {time.monotonic() - started:.0f} s (suffix {stack.suffix})")
        yield stack
    finally:
        stack.down()


def _store_invoices(database_url: str, count: int, first: int = 0) -> list[str]:
    from invoice_pipeline.engine.store import InvoiceStore

    store = InvoiceStore(database_url, max_size=1)
    try:
        return [
            str(
                store.documents.store_document(
                    json_invoice(f"KUBE-{i:03d}", total=f"{100 + 7 * i}.00"), "acme", f"kube-{i:03d}.json"
                ).invoice_id
            )
            for i in range(first, first + count)
        ]
    finally:
        store.close()


def _instance(stack: Stack) -> Any:
    """A Dagster instance on the stack's storage, for reading its runs and events."""
    from dagster import DagsterInstance

    home = stack.dir / "dagster_home"
    home.mkdir(exist_ok=True)
    config = {"storage": {"postgres": {"postgres_url": stack.dagster_url}}, "telemetry": {"enabled": False}}
    (home / "dagster.yaml").write_text(yaml.safe_dump(config))
    return DagsterInstance.from_config(str(home))


@dataclass(frozen=True)
class ChunkOnWorker:
    run_id: str
    step_key: str
    worker_pod: str


def _chunks_on_workers(instance: Any, run_id: str) -> list[ChunkOnWorker]:
    """dagster-celery's engine event as a worker takes a step: 'Executing steps … in celery
    worker', with the worker's name (`celery@<pod>`) in its metadata."""
    from dagster import DagsterEventType

    found = []
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        if event is None or "in celery worker" not in (event.message or ""):
            continue
        worker = event.event_specific_data.metadata.get("Celery worker")
        if entry.step_key and entry.step_key.startswith("work_chunk") and worker is not None:
            found.append(ChunkOnWorker(run_id, entry.step_key, str(worker.value).split("@", 1)[1]))
    return found


def _running_leases(database_url: str, owner: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM processing_jobs WHERE owner = %s AND status = 'running'", (owner,)
        ).fetchone()
    return int(row[0]) if row else 0


def _status(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _review_page_answers_only_whom_its_proxy_names(stack: Stack) -> None:
    """The review pod's page, in proxy mode: a name its users file lists gets the page; nobody
    named, or a name it does not list, gets 403."""
    page = f"http://127.0.0.1:{stack.ports['review']}/"
    wait_for(lambda: answers(page + "healthz"), timeout=120, interval=0.5, what="the review page in its pod")
    assert _status(page, {}) == 403
    assert _status(page, {"X-Forwarded-User": "mallory"}) == 403
    assert _status(page, {"X-Forwarded-User": "alice"}) == 200


def _holding_run(database_url: str, invoice_id: str) -> str | None:
    """The run whose lease holds `invoice_id`, if one does."""
    from invoice_pipeline.orchestration.run_requests import run_id_of

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT owner FROM processing_jobs WHERE invoice_id = %s AND status = 'running'", (invoice_id,)
        ).fetchone()
    return run_id_of(row[0]) if row else None


def test_a_worker_killed_mid_chunk_leaves_every_invoice_posted_once(stack: Stack) -> None:
    from dagster import DagsterRunStatus

    from invoice_pipeline.orchestration.run_requests import run_owner

    _review_page_answers_only_whom_its_proxy_names(stack)
    started = time.monotonic()
    instance = _instance(stack)
    # The first invoice's text row, held: the chunk that claims it waits there when it saves its
    # texts, leases held, until the kill. So the kill lands mid-chunk whatever the machine's speed
    # (loaded run 12 found a chunk that ended between being seen and being killed).
    ids = _store_invoices(stack.database_url, 1)
    with hold_text_rows(stack.database_url, ids) as holder:
        ids += _store_invoices(stack.database_url, INVOICES - 1, first=1)
        holder_pid = holder.info.backend_pid
        wait_for(
            lambda: blocks_someone(stack.database_url, holder_pid),
            timeout=300,
            interval=0.1,
            what="a chunk waiting on the held invoice",
        )
        run_id = _holding_run(stack.database_url, ids[0])
        assert run_id is not None, "the waiting chunk holds no lease on the held invoice"
        (victim, *_) = wait_for(
            lambda: _chunks_on_workers(instance, run_id), timeout=60, interval=0.1, what="its worker"
        )
        killed_at = time.monotonic()
        (survivor,) = [p for p in stack.worker_pods() if p != victim.worker_pod]
        victim_container = containers.pod_container(victim.worker_pod, "celery")
        containers.podman(stack.env, "kill", "-s", "KILL", victim_container)
        owner = run_owner(victim.run_id)
        held = _running_leases(stack.database_url, owner)
        assert held > 0, "the chunk ended before the kill: not mid-chunk"
        holder.rollback()  # the held row goes; whoever takes the invoice over can save its text
    # The dead worker cannot heartbeat any more: its leases are back-dated past the TTL instead of
    # waiting for it; the sensor's sweep (every tick) then frees them.
    with psycopg.connect(stack.database_url) as conn:
        conn.execute(
            "UPDATE processing_jobs SET heartbeat_at = heartbeat_at - interval '1 hour' "
            "WHERE owner = %s AND status = 'running'",
            (owner,),
        )

    def all_finished() -> bool:
        with psycopg.connect(stack.database_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM invoices WHERE id = ANY(%s::uuid[]) "
                "AND status NOT IN ('pending', 'processing', 'failed')",
                (ids,),
            ).fetchone()
        return bool(row and row[0] == len(ids))

    wait_for(all_finished, timeout=300, interval=0.5, what="every invoice to finish after the kill")
    finished_at = time.monotonic()

    with psycopg.connect(stack.database_url) as conn:
        postings = dict(
            conn.execute(
                "SELECT invoice_id::text, count(*) FROM ledger_postings WHERE invoice_id = ANY(%s::uuid[]) "
                "GROUP BY invoice_id",
                (ids,),
            ).fetchall()
        )
        swept = conn.execute(
            "SELECT invoice_id::text FROM processing_jobs WHERE owner = %s AND status = 'failed' "
            "AND error LIKE 'swept:%%'",
            (owner,),
        ).fetchall()
        taken_over_by = conn.execute(
            "SELECT DISTINCT j.owner FROM processing_jobs j WHERE j.invoice_id = ANY(%s::uuid[]) "
            "AND j.status = 'succeeded' AND j.owner <> %s",
            ([s[0] for s in swept], owner),
        ).fetchall()
        still_running = conn.execute(
            "SELECT count(*) FROM processing_jobs WHERE status = 'running'"
        ).fetchone()
    assert sorted(postings) == sorted(ids), f"{len(ids) - len(postings)} invoice(s) not posted"
    assert set(postings.values()) == {1}, {k: v for k, v in postings.items() if v != 1}
    assert len(swept) == held, (swept, held)
    assert still_running == (0,)

    # The invoices the dead worker held were finished by other runs, on the surviving worker.
    takeover_runs = [row[0].removeprefix(run_owner("")) for row in taken_over_by]
    assert takeover_runs
    for run_id in takeover_runs:
        assert {c.worker_pod for c in _chunks_on_workers(instance, run_id)} == {survivor}

        def ended(run_id: str = run_id) -> Any:
            run = instance.get_run_by_id(run_id)
            return run if run is not None and run.is_finished else None

        run = wait_for(ended, timeout=120, interval=0.5, what=f"takeover run {run_id} to end")
        assert run.status == DagsterRunStatus.SUCCESS, run.status
    # The killed container stays dead; the other worker is still up.
    state = containers.container_state(stack.env, victim_container)
    assert state.get("Status") == "exited" and state.get("ExitCode") == 137, state
    assert (
        containers.container_state(stack.env, containers.pod_container(survivor, "celery")).get("Status")
        == "running"
    )
    victim_run = instance.get_run_by_id(victim.run_id)
    print(
        f"\nthe killed chunk's run is {victim_run.status.value if victim_run else None} (its deadline ends it)"
        f"\n{INVOICES} invoices; killed {victim.worker_pod} holding {held} lease(s) of run {victim.run_id[:8]} "
        f"{killed_at - started:.0f} s after they were stored; all posted once {finished_at - killed_at:.0f} s "
        f"after the kill, taken over by {len(takeover_runs)} run(s) on {survivor}"
    )
