"""The image (deploy/Dockerfile), built and run: the demo in it against PostgreSQL in a second
container, its commands, its user and what it does not hold.

The base comes from Debian's packages (debootstrap, then `podman import`), built only when podman
does not have it yet; PostgreSQL is Debian's postgresql-15 in a container of its own. Both
containers share the host's network and listen on loopback. The first build takes minutes (base
about 3, dependencies a few more); later ones reuse podman's layers and rebuild the code only.

Skipped with a one-line reason where podman, runc, debootstrap or root is missing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from invoice_pipeline_tests.tools import needs_tool
from pipeline_support import containers
from pipeline_support.helpers import answers, free_port, wait_for

pytestmark = needs_tool("podman", containers.unavailable_reason())


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return containers.environment(tmp_path_factory.mktemp("podman"))


@pytest.fixture(scope="module")
def image(podman_env: dict[str, str]) -> str:
    ready = containers.ready_image(podman_env)
    print(f"\n{ready.describe()}")
    return ready.image


@pytest.fixture(scope="module")
def postgres(podman_env: dict[str, str], image: str) -> Iterator[str]:
    """PostgreSQL in its own container on a free loopback port; the URL of a fresh database."""
    containers.ensure_postgres_image(podman_env)
    port = free_port()
    name = f"ip-test-pg-{uuid.uuid4().hex[:8]}"
    containers.podman(
        podman_env,
        "run",
        "-d",
        "--rm",
        "--network=host",
        "--name",
        name,
        containers.POSTGRES_IMAGE,
        "-p",
        str(port),
    )
    try:
        server = f"postgresql://postgres@127.0.0.1:{port}/postgres"

        def accepts() -> bool:
            try:
                with psycopg.connect(server, connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                return False

        wait_for(accepts, timeout=60, interval=0.2, what="PostgreSQL in its container")
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute("CREATE DATABASE invoices")
        yield f"postgresql://postgres@127.0.0.1:{port}/invoices"
    finally:
        containers.podman(podman_env, "rm", "-f", "-t", "5", name, check=False)


def run_in_image(env: dict[str, str], image: str, database_url: str, *command: str) -> str:
    done = containers.podman(
        env,
        "run",
        "--rm",
        "--network=host",
        "-e",
        f"INVOICE_PIPELINE_DATABASE_URL={database_url}",
        "-e",
        "INVOICE_PIPELINE_HOME=/tmp/home",
        # `demo` and `process` write the dagster.yaml of their own instance: not over the
        # image's production one (root's, read-only to the image's user).
        "-e",
        "DAGSTER_HOME=/tmp/home/dagster_home",
        image,
        *command,
    )
    return done.stdout


def test_the_image_runs_as_a_non_root_user_and_holds_no_secret(
    podman_env: dict[str, str], image: str
) -> None:
    (inspected,) = json.loads(containers.podman(podman_env, "image", "inspect", image).stdout)
    config = inspected["Config"]
    assert config.get("User") == "dagster", "the image runs as root"
    env_names = {e.split("=", 1)[0] for e in config.get("Env", [])}
    assert not env_names & {
        "INVOICE_PIPELINE_DATABASE_URL",
        "DAGSTER_PG_URL",
        "INVOICE_PIPELINE_CELERY_BROKER",
    }
    assert not [e for e in config.get("Env", []) if "PASSWORD" in e.upper() or "://" in e]
    uid = containers.podman(podman_env, "run", "--rm", image, "id", "-u").stdout.strip()
    assert uid == "10001"


def test_the_demo_in_the_image_posts_every_invoice_once(
    podman_env: dict[str, str], image: str, postgres: str
) -> None:
    t = time.monotonic()
    out = run_in_image(podman_env, image, postgres, "invoice-pipeline", "demo", "--count", "12")
    print(f"\ndemo in the image: {time.monotonic() - t:.0f} s\n{out[-1500:]}")
    with psycopg.connect(postgres) as conn:
        posted_twice = conn.execute(
            "SELECT invoice_id FROM ledger_postings GROUP BY invoice_id HAVING count(*) > 1"
        ).fetchall()
        approved_unposted = conn.execute(
            "SELECT a.invoice_id FROM approvals a LEFT JOIN ledger_postings l USING (invoice_id) "
            "WHERE a.decision = 'approved' AND l.id IS NULL"
        ).fetchall()
        copies_posted = conn.execute(
            "SELECT i.id FROM invoices i JOIN ledger_postings l ON l.invoice_id = i.id "
            "WHERE i.duplicate_status IN ('duplicate', 'suspected')"
        ).fetchall()
        unfinished = conn.execute(
            "SELECT id, status FROM invoices WHERE status IN ('pending', 'processing', 'failed')"
        ).fetchall()
        (postings,) = conn.execute("SELECT count(*) FROM ledger_postings").fetchone() or (0,)
    assert postings > 0, out
    assert posted_twice == [] and approved_unposted == [] and copies_posted == []
    assert unfinished == [], unfinished


def test_each_command_of_the_image_starts(podman_env: dict[str, str], image: str, postgres: str) -> None:
    """The code server answers its health check; the review page and the metrics endpoint answer."""
    grpc, review, metrics = free_port(), free_port(), free_port()
    common = ["run", "-d", "--rm", "--network=host", "-e", f"INVOICE_PIPELINE_DATABASE_URL={postgres}"]
    commands = {
        "code": [
            "dagster",
            "api",
            "grpc",
            "-h",
            "127.0.0.1",
            "-p",
            str(grpc),
            "-m",
            "invoice_pipeline.orchestration.definitions",
        ],
        "review": ["invoice-pipeline", "review-ui", "--port", str(review)],
        "metrics": ["invoice-pipeline", "metrics", "--port", str(metrics)],
    }
    names = {what: f"ip-test-{what}-{uuid.uuid4().hex[:8]}" for what in commands}
    try:
        for what, command in commands.items():
            containers.podman(podman_env, *common, "--name", names[what], image, *command)
        wait_for(
            lambda: (
                containers.podman(
                    podman_env,
                    "exec",
                    names["code"],
                    "dagster",
                    "api",
                    "grpc-health-check",
                    "-p",
                    str(grpc),
                    check=False,
                ).returncode
                == 0
            ),
            timeout=120,
            interval=1,
            what="the code server's health check",
        )
        wait_for(
            lambda: answers(f"http://127.0.0.1:{review}/healthz"),
            timeout=60,
            interval=0.5,
            what="the review page",
        )
        wait_for(
            lambda: answers(f"http://127.0.0.1:{metrics}/metrics"), timeout=60, interval=0.5, what="metrics"
        )
    finally:
        for name in names.values():
            containers.podman(podman_env, "rm", "-f", "-t", "5", name, check=False)
