"""The parse sandbox: each bound quarantines as too_complex, names itself, and costs only a worker.

Real worker processes and real hostile files; the tests assert outcomes (code, reason, which
process survived), never durations. The limits are tight so that each bomb costs seconds.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from invoice_pipeline.documents import BadDocument, ExtractedText
from invoice_pipeline.documents.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, run_parser
from pipeline_support import hostile_corpus

VALID_JSON = json.dumps(hostile_corpus.invoice_json()).encode()


@pytest.fixture(scope="module")
def corpus() -> dict[str, hostile_corpus.HostileInput]:
    return hostile_corpus.by_name(seed=11)


def sandbox_with(**limits: float) -> Iterator[Sandbox]:
    sandbox = Sandbox(SandboxLimits(**limits))  # type: ignore[arg-type]
    try:
        yield sandbox
    finally:
        sandbox.close()


@pytest.fixture
def tight() -> Iterator[Sandbox]:
    yield from sandbox_with(cpu_seconds=1, memory_mib=400, wall_seconds=120)


def read(sandbox: Sandbox, content: bytes) -> ExtractedText:
    return sandbox.read_text(
        content, "upload.bin", max_bytes=20 << 20, max_text_chars=1_000_000, max_pdf_pages=500
    )


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_one_worker_serves_many_documents(tight: Sandbox) -> None:
    first = tight.ping()
    for _ in range(3):
        fields = tight.read_fields(read(tight, VALID_JSON))
        assert fields.invoice_number == "H-1"
    assert tight.ping() == first, "the worker is long-lived, not one interpreter per document"


def test_cpu_bound_is_too_complex_and_only_the_worker_is_lost(
    tight: Sandbox, corpus: dict[str, hostile_corpus.HostileInput]
) -> None:
    before = tight.ping()
    with pytest.raises(BadDocument) as info:
        read(tight, corpus["pdf_decompression_bomb"].content)
    assert info.value.code == "too_complex"
    assert "1 s of CPU" in info.value.reason and "parse_cpu_seconds" in info.value.reason
    assert gone(before), "the worker that hit the bound was ended"
    after = tight.ping()
    assert after != before, "a fresh worker took over"
    assert read(tight, VALID_JSON).format == "json"


def test_memory_bound_is_too_complex(corpus: dict[str, hostile_corpus.HostileInput]) -> None:
    # CPU and the wall clock would allow minutes; the memory bound alone stops it (with the tight
    # sandbox's 1 s of CPU, a loaded machine hit the CPU bound first).
    for sandbox in sandbox_with(cpu_seconds=3600, memory_mib=400, wall_seconds=300):
        with pytest.raises(BadDocument) as info:
            read(sandbox, corpus["xml_element_flood"].content)
        assert info.value.code == "too_complex"
        assert "400 MiB" in info.value.reason and "parse_memory_mb" in info.value.reason
        assert read(sandbox, VALID_JSON).format == "json"


def test_wall_clock_bound_is_too_complex(corpus: dict[str, hostile_corpus.HostileInput]) -> None:
    # CPU and memory would allow minutes; the wall clock alone stops it. 5 s, not 1: the same bound
    # applies to the valid document read next by a fresh worker (its first parse imports its
    # readers), which took over 1 s on a loaded machine running the suite in parallel.
    for sandbox in sandbox_with(cpu_seconds=3600, memory_mib=4096, wall_seconds=5):
        with pytest.raises(BadDocument) as info:
            read(sandbox, corpus["pdf_form_xobject_bomb"].content)
        assert info.value.code == "too_complex"
        assert "longer than 5 s" in info.value.reason and "parse_timeout_seconds" in info.value.reason
        assert read(sandbox, VALID_JSON).format == "json"


def test_fields_are_read_in_the_sandbox_too(tight: Sandbox) -> None:
    extracted = ExtractedText("json", "x", b'{"invoice_number": "A\\u0000"}'.decode(), "json")
    with pytest.raises(BadDocument) as info:
        tight.read_fields(extracted)
    assert info.value.code == "unstorable_character"


def test_a_structured_documents_fields_come_with_its_text_and_only_for_that_text() -> None:
    refused = json.dumps(hostile_corpus.invoice_json() | {"invoice_number": "A\u0000"}).encode()
    for sandbox in sandbox_with():
        extracted = read(sandbox, VALID_JSON)
        other = ExtractedText(extracted.format, extracted.text, extracted.structured + " ", extracted.method)
        read_as_refused = read(sandbox, refused)
        sandbox.close()  # from here on, anything that needs a worker raises SandboxUnavailable
        with pytest.raises(SandboxUnavailable):
            sandbox.read_fields(other)  # differs by one character: not answered from the read-ahead
        # An equal text (as loaded back from the database) is answered without a worker, once.
        same = ExtractedText.from_json(json.loads(json.dumps(extracted.to_json())))
        assert sandbox.read_fields(same).invoice_number == "H-1"
        with pytest.raises(SandboxUnavailable):
            sandbox.read_fields(same)
        with pytest.raises(BadDocument) as info:
            sandbox.read_fields(read_as_refused)
        assert info.value.code == "unstorable_character", "a refusal read ahead is raised by the fields read"


def test_an_unexpected_parser_exception_is_bad_input_not_a_retry() -> None:
    with pytest.raises(BadDocument) as info:
        run_parser(lambda: json.loads("9" * 5000))
    assert info.value.code == "unreadable_document" and "ValueError" in info.value.reason
    with pytest.raises(BadDocument) as deep:
        run_parser(lambda: _nest(10**6))
    assert deep.value.code == "too_complex"


def _nest(n: int) -> int:
    return 0 if n == 0 else 1 + _nest(n - 1)


CHILD = """
import sys
from invoice_pipeline.documents.sandbox import Sandbox, SandboxLimits
sandbox = Sandbox(SandboxLimits())
print(sandbox.ping(), flush=True)
sys.stdin.read()
"""


def test_a_worker_exits_when_its_parent_dies() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    pidfd = os.pidfd_open(worker)
    try:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        # End of input on its request pipe is the worker's signal to leave; wait for the exit
        # event itself (the generous timeout only keeps a regression from hanging the suite).
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        assert poller.poll(120_000), f"worker {worker} outlived its parent"
    finally:
        os.close(pidfd)
        if parent.stdin is not None:
            parent.stdin.close()
        parent.stdout.close()


def test_a_worker_recycled_for_its_count_is_replaced_by_the_next_document_not_before(
    tight: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    from invoice_pipeline.documents import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "MAX_DOCUMENTS_PER_WORKER", 2)
    first = tight.ping()
    assert tight.ping() == first  # its second document: recycled after it
    assert gone_soon(first)
    assert tight.workers_started == 1, "a replacement was started with no document to read"
    second = tight.ping()
    assert second != first and tight.workers_started == 2


def gone_soon(pid: int) -> bool:
    """The worker exits on the end of its input; wait for it, bounded (not a sleep and hope)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    return gone(pid)
