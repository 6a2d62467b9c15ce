"""The command line as a newcomer meets it (issue 59): a second home on a port already taken gets
one line naming the setting and leaves nothing behind; `status | head` ends quietly; `status`
names every org; `ingest` says which org it used; `show` gives each field's source, the page's
arithmetic and each taking of the lock as what it was. Real subprocesses, real PostgreSQL."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from uuid import UUID

import pytest

from invoice_pipeline.db import embedded
from invoice_pipeline.db.embedded import EmbeddedPostgres, PortInUse
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples import generate_samples
from invoice_pipeline_tests.support import process_now
from pipeline_support.helpers import free_port, run_cli

cli = run_cli
EXIT_USAGE = 2


def embedded_env(home: Path, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INVOICE_PIPELINE_DATABASE_URL"}
    return env | {"INVOICE_PIPELINE_HOME": str(home), "INVOICE_PIPELINE_PG_PORT": str(port)}


def test_a_second_home_on_a_taken_port_gets_one_line_naming_the_setting_and_nothing_is_left(
    tmp_path: Path,
) -> None:
    port = free_port()
    first, second = tmp_path / "first", tmp_path / "second"
    try:
        started = cli("db", "start", env=embedded_env(first, port))
        assert started.returncode == 0, started.stderr
        for command in (["status"], ["db", "start"], ["demo", "--count", "3"], ["ingest", str(tmp_path)]):
            refused = cli(*command, env=embedded_env(second, port))
            assert refused.returncode == EXIT_USAGE, (command, refused.stderr)
            assert refused.stderr.count("\n") == 1, refused.stderr
            assert refused.stderr.startswith(
                f"invoice-pipeline: error: port {port} on 127.0.0.1 is already in use"
            )
            assert "INVOICE_PIPELINE_PG_PORT" in refused.stderr and str(second) in refused.stderr
        assert not second.exists(), "no home, password, samples or note made for the second home"
        assert not EmbeddedPostgres(second / "pgdata", port).pgdata.exists(), "and no cluster"
        assert cli("db", "status", env=embedded_env(first, port)).stdout.startswith("running")
        # The remedy the line names works: another port, the same second home.
        other = embedded_env(second, free_port())
        assert cli("db", "start", env=other).returncode == 0
        assert cli("db", "stop", env=other).returncode == 0
    finally:
        cli("db", "stop", env=embedded_env(first, port))
        EmbeddedPostgres(first / "pgdata", port).destroy()
        EmbeddedPostgres(second / "pgdata", port).destroy()


def test_a_port_taken_between_the_check_and_the_start_removes_the_cluster_just_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before initdb can lose a race; PostgreSQL's own refusal then ends the same way."""
    port = free_port()
    with socket_listening_on(port):
        monkeypatch.setattr(embedded, "port_taken", lambda listen, port: False)  # the race, lost
        server = EmbeddedPostgres(tmp_path / "home" / "pgdata", port)
        with pytest.raises(PortInUse, match="INVOICE_PIPELINE_PG_PORT"):
            server.start()
    assert not server.pgdata.exists(), "the half-made cluster is gone"
    assert not (tmp_path / "home" / embedded.DATA_DIR_NOTE).exists()


@contextmanager
def socket_listening_on(port: int) -> Iterator[None]:
    """A plain TCP listener on 127.0.0.1:`port`: what another program holding the port looks like."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> dict[str, str]:
    return dict(
        os.environ, INVOICE_PIPELINE_HOME=str(tmp_path / "home"), INVOICE_PIPELINE_DATABASE_URL=database_url
    )


def test_status_into_a_reader_that_stopped_reading_ends_quietly(env: dict[str, str]) -> None:
    """`status | head`: the reader is gone before `status` writes a byte (the read end of the
    pipe is closed before the command starts), so the write fails, every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "invoice_pipeline.cli", "status"],
            env=env,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


def test_ingest_names_its_org_status_lists_orgs_and_show_tells_sources_and_each_attempt(
    env: dict[str, str], tmp_path: Path, store: InvoiceStore
) -> None:
    samples = generate_samples(tmp_path / "samples", count=6, seed=1)
    pdf = next(f.path for f in samples.files if f.path.name.endswith("_invoice_pdf.pdf"))
    ingested = cli("ingest", str(pdf), env=env)
    assert ingested.returncode == 0, ingested.stderr
    assert "ingested 1 file(s) into org default" in ingested.stdout
    assert (
        ingested.stderr
        == "no --org given: stored in org default (`invoice-pipeline status` lists every org)\n"
    )
    assert cli("ingest", str(pdf), "--org", "acme", env=env).stderr == ""

    invoice_id = UUID(ingested.stdout.split()[1])
    process_now(store, [invoice_id], owner="newcomer-test")
    # No vendor registry: the page-read seller is held for a person (vendor_unconfirmed).
    assert store.documents.invoice_state(invoice_id).status == "needs_review"  # type: ignore[union-attr]
    alice = Actor("os-user:alice", "review:alice@test:1")
    stale = act(store, "approve", invoice_id, alice, expect_version="what alice saw an hour ago")
    assert not stale.done
    assert act(store, "approve", invoice_id, alice).done

    status = cli("status", env=env)
    [orgs] = [line for line in status.stdout.splitlines() if line.startswith("orgs")]
    assert "acme 1 (0 held)" in orgs and "default 1 (0 held)" in orgs, orgs

    shown = cli("show", str(invoice_id), env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    [total] = [line for line in lines if line.split()[:1] == ["payable_total"]]
    assert "pdf-text:page 1:" in total and "confidence" in total, "the value's source is shown"
    [check] = [line for line in lines if line.startswith("amount check: ")]
    assert check.startswith("amount check: confirmed: ") and "{" not in check, "readable, not a dict"
    history = lines[
        lines.index("attempts (each time the invoice's lock was taken, oldest first):") + 1 : lines.index(
            "review actions:"
        )
    ]
    taken = [line for line in history if line.startswith("  20")]
    assert len(taken) == 3, history
    assert "processing attempt 1 succeeded by newcomer-test" in taken[0]
    assert "a person's action by review:alice@test:1: review approve refused: " in taken[1]
    assert taken[2].endswith("a person's action by review:alice@test:1: done (see review actions)")
