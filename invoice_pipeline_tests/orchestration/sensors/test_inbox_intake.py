"""A hostile inbox: one bad entry never stops intake, nothing is followed, only complete files are taken."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dagster import DagsterInstance, RunRequest, build_sensor_context

from invoice_pipeline.config import ENV_INBOX
from invoice_pipeline.engine.ingest import REASON_SUFFIX, REJECTED_DIR
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.run_requests import PROCESS_INVOICE, PROCESS_INVOICE_BATCH, invoice_ids_of
from invoice_pipeline.orchestration.sensors import new_invoices_sensor
from invoice_pipeline_tests.conftest import ROOT
from invoice_pipeline_tests.factories import pipeline_resources
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.factories import json_invoice

PASSWD = Path("/etc/passwd")


@pytest.fixture
def inbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "inbox"
    path.mkdir()
    monkeypatch.setenv(ENV_INBOX, str(path))
    return path


def bytes_path(base: Path, *parts: bytes) -> Path:
    """A path with raw (possibly non-UTF-8) name bytes, as POSIX allows."""
    return Path(os.fsdecode(os.path.join(os.fsencode(base), *parts)))


def unprivileged_prefix() -> list[str]:
    """Run a child without the capabilities that let root read any file.

    Root ignores file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH); dropped from the bounding
    set before exec, the child is still uid 0, still imports from root's folders, but a mode-000
    file is unreadable to it, as it would be to any service account.
    """
    if os.geteuid() != 0:
        return []  # a mode-000 file is already unreadable to its non-root owner
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: no way to make a file unreadable")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]


def tick_in_child(database_url: str, inbox: Path, cursor: str | None) -> dict[str, Any]:
    result = subprocess.run(
        [
            *unprivileged_prefix(),
            sys.executable,
            "-m",
            "invoice_pipeline_tests.orchestration.sensors.tick_runner",
            database_url,
            cursor or "",
        ],
        env=dict(os.environ, **{ENV_INBOX: str(inbox)}),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def filenames_of(database_url: str, ids: list[str]) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT id::text, source_filename FROM invoices WHERE id = ANY(%s::uuid[])", (ids,)
        ).fetchall()
    return {r[0]: r[1] for r in rows}


def reason(path: Path) -> str:
    return path.with_name(path.name + REASON_SUFFIX).read_text()


@needs_tool("setpriv")  # as root: unprivileged_prefix skips without it
def test_poisoned_inbox_never_stops_intake_and_every_good_file_is_planned_and_processed(
    database_url: str, store: InvoiceStore, inbox: Path
) -> None:
    # Distinct numbers and totals: no two of them look like copies of each other.
    waiting = store.documents.store_document(
        json_invoice("W-100", total="100.00"), "acme", "waiting.json"
    ).invoice_id
    good = {
        inbox / "loose.json": json_invoice("L-201", total="201.00"),
        inbox / "acme" / "good-1.json": json_invoice("A-302", total="302.00"),
        inbox / "acme" / "sub" / "good-2.json": json_invoice("A-403", total="403.00"),
        inbox / "globex" / "good-3.json": json_invoice("G-504", total="504.00"),
        # A name that is not UTF-8 is only a label: the bytes are an invoice all the same.
        bytes_path(inbox, b"acme", b"caf\xe9.json"): json_invoice("C-605", total="605.00"),
    }
    # Stamped an hour ahead: "quiet for QUIET_SECONDS" can never hold, however slowly this
    # machine gets to the first tick, so only the second scan's agreement takes them.
    ahead = time.time_ns() + 3600 * 1_000_000_000
    for path, content in good.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.utime(path, ns=(ahead, ahead))
    acme = inbox / "acme"
    (acme / "passwd.xml").symlink_to(PASSWD)
    (inbox / "etc").symlink_to("/etc", target_is_directory=True)
    os.mkfifo(acme / "pipe.xml")
    secret = acme / "secret.json"
    secret.write_bytes(json_invoice("UNREADABLE"))
    secret.chmod(0)
    (acme / "vanishes.json").write_bytes(json_invoice("VANISHES"))
    os.utime(acme / "vanishes.json", ns=(ahead, ahead))
    (acme / "upload.json.part").write_bytes(b'{"format_version": 1, "invoice_num')
    (acme / ".editor.swp").write_bytes(b"swap")
    (inbox / " ").mkdir()
    (inbox / " " / "blank-org.json").write_bytes(json_invoice("BLANK-ORG"))
    bad_org = bytes_path(inbox, b"\xffcorp")
    bad_org.mkdir()
    (bad_org / "x.json").write_bytes(json_invoice("BAD-ORG"))

    first = tick_in_child(database_url, inbox, None)
    assert [r["invoice_ids"] for r in first["run_requests"]] == [[str(waiting)]], (
        "the poison did not stop planning the invoice that was already due"
    )
    rejected = inbox / REJECTED_DIR
    assert (rejected / "acme" / "passwd.xml").is_symlink(), "the link itself was moved aside"
    assert os.readlink(rejected / "acme" / "passwd.xml") == str(PASSWD)
    assert "symbolic link" in reason(rejected / "acme" / "passwd.xml")
    assert (rejected / "etc").is_symlink() and "never followed" in reason(rejected / "etc")
    assert stat.S_ISFIFO(os.lstat(rejected / "acme" / "pipe.xml").st_mode)
    assert "FIFO" in reason(rejected / "acme" / "pipe.xml")
    assert "blank" in reason(rejected / " " / "blank-org.json")
    assert "not valid UTF-8" in reason(bytes_path(rejected, b"\xffcorp", b"x.json"))
    assert all(path.exists() for path in good), "a file is taken only when unchanged in two scans"

    (acme / "vanishes.json").unlink()  # listed by the first scan, gone by the second
    second = tick_in_child(database_url, inbox, first["cursor"])

    planned = [i for r in second["run_requests"] for i in r["invoice_ids"]]
    names = filenames_of(database_url, planned)
    assert sorted(names.values()) == sorted(
        ["loose.json", "good-1.json", "good-2.json", "good-3.json", "caf\\xe9.json"]
    ), "every good file was ingested and planned in the same tick"
    assert [r["job_name"] for r in second["run_requests"]] == [PROCESS_INVOICE_BATCH], "one tick, one run"
    for path in good:
        assert not path.exists() and (path.parent / ".ingested" / path.name).exists()
    assert (rejected / "acme" / "secret.json").exists()
    assert "Permission denied" in reason(rejected / "acme" / "secret.json")
    assert (acme / "upload.json.part").exists() and (acme / ".editor.swp").exists(), "never touched"

    with psycopg.connect(database_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM documents WHERE content = %s", (PASSWD.read_bytes(),)
        ).fetchone() == (0,), "the symlink's target was never stored"
        stored = {r[0] for r in conn.execute("SELECT source_filename FROM invoices").fetchall()}
    assert not stored & {
        "passwd.xml",
        "pipe.xml",
        "secret.json",
        "blank-org.json",
        "x.json",
        "upload.json.part",
    }

    jobs = dict(
        zip(
            (PROCESS_INVOICE, PROCESS_INVOICE_BATCH), make_jobs(pipeline_resources(database_url)), strict=True
        )
    )
    for request in first["run_requests"] + second["run_requests"]:
        assert jobs[request["job_name"]].execute_in_process(run_config=request["run_config"]).success
    for invoice_id in [str(waiting), *planned]:
        state = store.documents.invoice_state(invoice_id)
        assert state is not None and state.status == "processed", (invoice_id, state)


# -- a writer that is still writing ----------------------------------------------------------

WRITER = """
import os, sys
path = sys.argv[1]
chunks = [c.encode() for c in sys.argv[2:]]
with open(path, "wb", buffering=0) as out:
    for i, chunk in enumerate(chunks):
        if i:
            assert sys.stdin.readline() == "next\\n"
        out.write(chunk)
        os.fsync(out.fileno())
        print(f"wrote {i + 1}", flush=True)
print("closed", flush=True)
"""


class Sensor:
    """Ticks the sensor in this process, carrying its cursor from tick to tick as the daemon does."""

    def __init__(self, database_url: str, **db: Any) -> None:
        self.defs = make_definitions(pipeline_resources(database_url, **db))
        self.cursor: str | None = None

    def tick(self) -> list[RunRequest]:
        with DagsterInstance.ephemeral() as instance:
            context = build_sensor_context(
                instance=instance, definitions=self.defs, resources=self.defs.resources, cursor=self.cursor
            )
            results = list(new_invoices_sensor(context))  # type: ignore[arg-type]
        self.cursor = context.cursor
        return [r for r in results if isinstance(r, RunRequest)]


@pytest.fixture
def writer_procs() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def test_slow_writer_is_not_ingested_until_complete_and_then_whole(
    database_url: str, store: InvoiceStore, inbox: Path, writer_procs: list[subprocess.Popen[str]]
) -> None:
    content = json_invoice("SLOW-1", buyer="B" * 3000).decode()
    chunks = [content[:1000], content[1000:2500], content[2500:]]
    target = inbox / "acme" / "slow.json"
    target.parent.mkdir()
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(target), *chunks],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    writer_procs.append(writer)
    assert writer.stdin is not None and writer.stdout is not None
    sensor = Sensor(database_url)

    def next_chunk() -> None:
        assert writer.stdin is not None
        writer.stdin.write("next\n")
        writer.stdin.flush()

    assert writer.stdout.readline() == "wrote 1\n"
    assert sensor.tick() == [], "first sight: it may still be growing"
    next_chunk()
    assert writer.stdout.readline() == "wrote 2\n"
    assert sensor.tick() == [], "it grew since the last scan: still being written"
    next_chunk()
    assert writer.stdout.readline() == "wrote 3\n"
    assert writer.stdout.readline() == "closed\n"
    assert writer.wait(30) == 0
    assert sensor.tick() == [], "changed since the last scan once more"
    assert target.exists() and not (target.parent / ".ingested").exists()

    (request,) = sensor.tick()
    (invoice_id,) = invoice_ids_of(request.run_config)
    document = store.documents.load_document(invoice_id)
    assert document is not None and document.content == content.encode(), "stored whole"
    assert (target.parent / ".ingested" / "slow.json").read_bytes() == content.encode()


def test_a_write_then_rename_file_is_invisible_until_renamed(
    database_url: str, store: InvoiceStore, inbox: Path
) -> None:
    (inbox / "acme").mkdir()
    partial = inbox / "acme" / "renamed.json.part"
    partial.write_bytes(json_invoice("RENAMED")[:20])
    sensor = Sensor(database_url)
    assert sensor.tick() == [] and sensor.tick() == [], "a .part file is never taken"
    partial.write_bytes(json_invoice("RENAMED"))
    partial.rename(inbox / "acme" / "renamed.json")
    assert sensor.tick() == []
    (request,) = sensor.tick()
    document = store.documents.load_document(invoice_ids_of(request.run_config)[0])
    assert document is not None and document.content == json_invoice("RENAMED")


def test_planning_goes_on_when_intake_fails_as_a_whole(
    database_url: str, store: InvoiceStore, inbox: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    due = store.documents.store_document(json_invoice(), "acme", "a.json").invoice_id
    # An inbox the file system refuses to look at (its name is longer than any file name may
    # be): listing it fails, so intake fails as a whole; the tick does not.
    sensor = Sensor(database_url, inbox=str(inbox / ("x" * 300)))
    (request,) = sensor.tick()
    assert invoice_ids_of(request.run_config) == [str(due)]
    assert sensor.cursor is None  # intake failed: a pass that ran would have saved what it saw
