"""Fixtures: one real PostgreSQL per test session, a fresh migrated database per test.

By default the session starts its own embedded PostgreSQL in a temporary home on a free
port; with INVOICE_PIPELINE_DATABASE_URL set, the tests create their databases on that
server instead (its database in the URL is only used to connect).

Hypothesis profiles, chosen by the environment variable HYPOTHESIS_PROFILE (registered here,
once, for every property test; a test keeps only what matters to it, such as max_examples or
a deadline, and never pins its own seed):

* ``fixed`` (the default, what ``make test`` runs): derandomized, so every run tries the same
  examples, and no example database is read or written (nothing carried over between runs).
* ``chaos`` (what ``make chaos`` runs the property tests with: ``HYPOTHESIS_PROFILE=chaos
  pytest -m hypothesis``): a new random seed every run and more examples (tests that set their
  own max_examples keep it), no deadline. A failure prints its falsifying example and, with
  print_blob, the ``@reproduce_failure(...)`` line to paste onto the test to replay exactly
  that example; the example is also saved in ``.hypothesis/`` and tried first on the next
  chaos run.

``@given`` tests carry the ``hypothesis`` marker by themselves; a test that runs a property
defined inside it is marked ``@pytest.mark.hypothesis`` so that ``-m hypothesis`` finds it.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from hypothesis import Phase, settings

from invoice_pipeline.config import ENV_DATABASE_URL
from invoice_pipeline.db.embedded import COMBINED_PREFIX, ENV_SERVER_ROOT, EmbeddedPostgres
from invoice_pipeline.db.migrate import migrate
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.resources.invoice_database import close_shared_stores
from invoice_pipeline_tests.dagster_guard import _no_dagster_instance_left_current
from invoice_pipeline_tests.scheduling import (
    pytest_terminal_summary,
    pytest_xdist_make_scheduler,
    pytest_xdist_node_collection_finished,
)
from invoice_pipeline_tests.tools import pytest_runtest_makereport, pytest_runtest_setup
from pipeline_support.helpers import create_database, drop_database, free_port, with_database

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"

ENV_HYPOTHESIS_PROFILE = "HYPOTHESIS_PROFILE"
# No deadline in either profile: an example preempted on a loaded machine is not a failure
# (timing goals live in benchmarks).
settings.register_profile("fixed", derandomize=True, database=None, deadline=None)
settings.register_profile("chaos", derandomize=False, max_examples=1000, deadline=None, print_blob=True)
# Only the explicit @example cases: HYPOTHESIS_PROFILE=explicit with `python -m
# pipeline_support.mutants --only NAME` proves a property's sabotage entry is killed by its
# explicit case alone, not by what the derandomized draw happens to make of the test's source.
settings.register_profile("explicit", parent=settings.get_profile("fixed"), phases=[Phase.explicit])
settings.load_profile(os.environ.get(ENV_HYPOTHESIS_PROFILE) or "fixed")

# `make test` runs the suite in parallel workers (pytest-xdist); each worker has its own embedded
# PostgreSQL (server_url below), its own server root and password file. Which tests run together
# on one worker, in what order they are handed out, and the podman images built in the background:
# invoice_pipeline_tests/scheduling.py (its hooks are registered here).


@pytest.fixture(scope="session", autouse=True)
def _server_root() -> Iterator[None]:
    """As root, every embedded server the tests start (theirs, the CLI's, dagster dev's) keeps
    its binaries and data in one folder of this session's, removed at the end: none is left
    behind in /var/lib/invoice-pipeline. It must be reachable by the server user, so it is made
    under /tmp, not in pytest's private tmp_path."""
    root = Path(tempfile.mkdtemp(prefix="invoice-pipeline-server-"))
    root.chmod(0o755)
    previous = os.environ.get(ENV_SERVER_ROOT)
    os.environ[ENV_SERVER_ROOT] = str(root)
    # One password file for every embedded server of the session, extended as servers start:
    # worker processes forked from a forkserver started early still find later servers' entries.
    passfile = Path(tempfile.gettempdir()) / f"{COMBINED_PREFIX}session-{os.getpid()}"
    passfile.touch(mode=0o600)
    os.environ["PGPASSFILE"] = str(passfile)
    try:
        yield
    finally:
        passfile.unlink(missing_ok=True)
        if previous is None:
            os.environ.pop(ENV_SERVER_ROOT, None)
        else:
            os.environ[ENV_SERVER_ROOT] = previous
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _children_stop_on_sigterm() -> Iterator[None]:
    """No child a test starts may inherit an ignored SIGTERM. A run started in the background
    (`make test &`, a CI script) inherits SIGINT ignored; Dagster, run inside a test, copies
    SIGINT's disposition onto SIGTERM (dagster._utils.interrupts), and an ignored signal stays
    ignored across exec. Every process a later test started then ignored SIGTERM, and each
    stop_process_group waited its 60 s before SIGKILL (Prometheus's metrics endpoint, issue 53).
    Python's own SIGINT handler instead: a handler, which exec resets (as `invoice-pipeline
    dev` does for its children, issue 26)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal.signal works only there
        return
    inherited = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    if inherited[signal.SIGINT] is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if inherited[signal.SIGTERM] is signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in inherited.items():
            if handler is not None:
                signal.signal(sig, handler)


@pytest.fixture(scope="session")
def server_url(_server_root: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A URL to a database on the server under test, used to create and drop test databases."""
    external = os.environ.get(ENV_DATABASE_URL)
    if external:
        yield external
        return
    home = tmp_path_factory.mktemp("pg")
    server = EmbeddedPostgres(home / "pgdata", free_port())
    server.start()
    try:
        url = server.url("postgres")
        # The test server only: no fsync. Each test's CREATE DATABASE from the template took
        # 168 ms with it and 28 ms without on a quiet machine, mostly waiting on the disk, and so
        # did every commit's WAL flush. What fsync guards against, the machine itself crashing,
        # no test does; a killed server or worker still finds everything it committed (the page
        # cache holds it), so every crash and restart test means what it meant. The product's
        # servers, and every server a test starts through the product, keep fsync on.
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("SELECT pg_reload_conf()")
        yield url
    finally:
        server.destroy()


@pytest.fixture(scope="session")
def template_database(server_url: str) -> Iterator[str]:
    url = create_database(server_url, prefix="ip_template")
    migrate(url)
    yield url.rsplit("/", 1)[1]
    drop_database(server_url, url)


@pytest.fixture
def database_url(server_url: str, template_database: str) -> Iterator[str]:
    url = create_database(server_url, template=template_database)
    yield url
    drop_database(server_url, url)


@pytest.fixture
def empty_database_url(server_url: str) -> Iterator[str]:
    url = create_database(server_url)
    yield url
    drop_database(server_url, url)


@pytest.fixture(autouse=True)
def _close_pools_after_each_test() -> Iterator[None]:
    """Resources cache one pool per database; a dropped test database must not leave one reconnecting."""
    yield
    close_shared_stores()


@pytest.fixture
def store(database_url: str) -> Iterator[InvoiceStore]:
    s = InvoiceStore(database_url, max_size=8)
    yield s
    s.close()


# The needs_tool marker's hooks (invoice_pipeline_tests/tools.py), the scheduling's
# (invoice_pipeline_tests/scheduling.py) and the Dagster guard's fixture
# (invoice_pipeline_tests/dagster_guard.py) are exported to be registered.
__all__ = [
    "CORPUS",
    "ROOT",
    "_no_dagster_instance_left_current",
    "pytest_runtest_makereport",
    "pytest_runtest_setup",
    "pytest_terminal_summary",
    "pytest_xdist_make_scheduler",
    "pytest_xdist_node_collection_finished",
    "with_database",
]
