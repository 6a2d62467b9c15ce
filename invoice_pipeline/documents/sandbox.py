"""Parsing untrusted documents in worker processes that cannot exhaust the pipeline's process.

A few kilobytes of PDF can ask for minutes of CPU and gigabytes of memory (a flood of glyphs
behind a compressed stream, forms drawing forms). In-process, that stalls a run while its lease
keeps heartbeating, or takes the whole run worker down. Here each document is parsed in a
long-lived worker process (`sandbox_worker`) with

- an address-space limit (RLIMIT_AS, set once when the worker starts),
- a CPU limit per document (RLIMIT_CPU, moved to "used so far + limit" before each one),
- a wall-clock limit per document, enforced from this side by killing the worker's process group
  (OCR children included).

A document over a bound is a `BadDocument("too_complex")` naming the bound and its value; the
worker that hit it is replaced. Workers are reused across documents, so the cost per document is
one round trip over a pipe, not an interpreter start (see benchmarks/sandbox_overhead.py).

This bounds resources; it is not a security boundary (same user, no syscall filter).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import struct
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ..child_python import child_environment, python_command
from ..domain.einvoice import EinvoiceCheck
from ..domain.fields import InvoiceFields
from .errors import BadDocument, too_complex
from .extracted import ExtractedText

T = TypeVar("T")

_HEADER = struct.Struct(">Q")
# A worker imports lxml and the readers (~0.3 s on an idle core; the PDF and JSON-schema
# libraries on its first such document); generous, because a loaded machine is exactly when
# workers get replaced.
STARTUP_TIMEOUT_S = 120.0
# Recycled after this many documents, so slow growth (fragmentation, caches) never reaches the
# memory limit by itself and gets blamed on an innocent document.
MAX_DOCUMENTS_PER_WORKER = 500
# Workers kept idle per pool; a run executes its stages one at a time, so one is the usual need.
MAX_IDLE_WORKERS = 2
# Exit status a worker uses after reporting that it ran out of memory (its heap is suspect).
EXIT_OUT_OF_MEMORY = 3
WORKER_MODULE = "invoice_pipeline.documents.sandbox_worker"
MIB = 1024 * 1024


# What a worker's memory limit bounds (SandboxLimits.memory_kind).
MemoryKind = Literal["address_space", "data"]


@dataclass(frozen=True)
class SandboxLimits:
    """Per-document bounds of the worker processes."""

    wall_seconds: float = 60.0
    cpu_seconds: int = 30
    memory_mib: int = 1024
    # Address space while OCRing a scan. ONNX Runtime, OpenCV and NumPy map ~700 MB before the
    # first page and a 200-dpi A4 page peaks at ~1 GB (measured; resident is ~450 MB), so the
    # general 1 GiB would fail every scan. The worker keeps 1 GiB as its soft limit and this
    # as the hard one; OCR lifts the soft limit, and the worker is retired after that document.
    ocr_memory_mib: int = 2048
    # What `memory_mib` bounds: the address space (RLIMIT_AS), or the data segment (RLIMIT_DATA:
    # memory written to, not merely reserved). The e-invoice validator's workers use "data":
    # SaxonC's native image reserves ~32 GiB of address space before it allocates anything
    # (documents/einvoice_rules.py), which no address-space limit worth having allows.
    memory_kind: MemoryKind = "address_space"

    def to_json(self) -> dict[str, Any]:
        return {
            "wall_seconds": self.wall_seconds,
            "cpu_seconds": self.cpu_seconds,
            "memory_mib": self.memory_mib,
            "ocr_memory_mib": self.ocr_memory_mib,
            "memory_kind": self.memory_kind,
        }


# -- framing (shared with the worker) -------------------------------------------------------------


def write_frame(fd: int, payload: bytes) -> None:
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def read_frame(fd: int, deadline: float | None = None) -> bytes | None:
    """One frame, or None at end of file. Raises TimeoutError past `deadline` (monotonic)."""
    head = _read_exact(fd, _HEADER.size, deadline)
    if head is None:
        return None
    (size,) = _HEADER.unpack(head)
    return _read_exact(fd, size, deadline) if size else b""


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    chunks: list[bytes] = []
    remaining = size
    poller = select.poll() if deadline is not None else None
    if poller is not None:
        poller.register(fd, select.POLLIN)
    while remaining:
        if poller is not None and deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


# -- what a parser exception means -----------------------------------------------------------------


def run_parser(parse: Callable[[], T]) -> T:
    """Call a pure parser; any exception it raises is about the input, so it becomes a BadDocument.

    The parsers touch no database and no network: the same bytes fail the same way every time,
    and retrying (then dead-lettering) an unreadable file only delays its quarantine.
    MemoryError propagates: the caller knows which memory bound applies.
    """
    try:
        return parse()
    except BadDocument:
        raise
    except RecursionError:
        raise too_complex(
            "the document is nested too deeply to read", "ask the sender to re-export the invoice"
        ) from None
    except MemoryError:
        raise
    except Exception as exc:
        raise unreadable(type(exc).__name__, str(exc)) from None


def unreadable(kind: str, message: str) -> BadDocument:
    shown = " ".join(message.split())[:200]
    return BadDocument(
        "unreadable_document",
        f"the parser failed on this document ({kind}: {shown}); ask the sender to re-export it "
        "(if the file opens fine elsewhere, report it: it may be a parser bug)",
    )


# -- the worker processes ----------------------------------------------------------------------------


class SandboxUnavailable(RuntimeError):
    """A worker could not be started or died for a reason outside the document: transient."""


class _Worker:
    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self.documents = 0
        self.ready = False
        # Its own session: the wall-clock kill reaches OCR children too, and a Ctrl-C meant for
        # `dagster dev` does not kill a parse mid-document (the worker exits on end of input).
        # `-P` and the child environment: the installed package, never an `invoice_pipeline`
        # folder that happens to lie in the current directory (child_python.py).
        self.proc = subprocess.Popen(
            python_command("-m", WORKER_MODULE, json.dumps(limits.to_json())),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_environment(),
            start_new_session=True,
            close_fds=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()

    def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            frame = read_frame(self._out, time.monotonic() + STARTUP_TIMEOUT_S)
        except TimeoutError:
            frame = None
        if frame is None:
            self.kill()
            raise SandboxUnavailable(
                f"document sandbox worker did not start (exit status {self.proc.returncode}); "
                f"check that `{' '.join(python_command('-m', WORKER_MODULE))}` runs"
            )
        self.ready = True

    def call(self, header: dict[str, Any], payload: bytes) -> dict[str, Any]:
        """The worker's reply; raises BadDocument(too_complex) if it hit a bound and was lost."""
        self.wait_ready()
        self.documents += 1
        deadline = time.monotonic() + self.limits.wall_seconds
        try:
            write_frame(self._in, json.dumps(header).encode())
            write_frame(self._in, payload)
            frame = read_frame(self._out, deadline)
        except TimeoutError:
            self.kill()
            raise too_complex(
                f"reading this document took longer than {self.limits.wall_seconds:g} s, the per-document "
                "time limit (DocumentReader.parse_timeout_seconds)",
                _ADVICE,
            ) from None
        except BrokenPipeError:
            frame = None
        if frame is None:
            raise self._died()
        reply: dict[str, Any] = json.loads(frame)
        if "limit" in reply:
            self.kill()
            raise self._memory_exceeded()
        return reply

    def _died(self) -> Exception:
        status = self.proc.wait()
        self.kill()
        if status == -signal.SIGXCPU:
            return too_complex(
                f"reading this document used more than {self.limits.cpu_seconds} s of CPU, the per-document "
                "CPU limit (DocumentReader.parse_cpu_seconds)",
                _ADVICE,
            )
        if status == EXIT_OUT_OF_MEMORY:
            return self._memory_exceeded()
        if status in (-signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS):
            # C code that cannot allocate aborts instead of raising MemoryError.
            return too_complex(
                f"the parser crashed ({signal.Signals(-status).name}) reading this document, most likely "
                f"out of its {self.limits.memory_mib} MiB per-document memory limit "
                "(DocumentReader.parse_memory_mb)",
                _ADVICE,
            )
        # SIGKILL from the OOM killer or a person, or an exit we did not ask for: nothing says
        # the document did it, so this is a transient failure and the attempt is retried.
        return SandboxUnavailable(f"document sandbox worker died (exit status {status}) while parsing")

    def _memory_exceeded(self) -> BadDocument:
        return too_complex(
            f"reading this document needed more than {self.limits.memory_mib} MiB of memory "
            f"({self.limits.ocr_memory_mib} MiB for a scan), the per-document memory limit "
            "(DocumentReader.parse_memory_mb, parse_ocr_memory_mb)",
            _ADVICE,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """Politely: end of input makes an idle worker exit."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        self._close_pipes()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


_ADVICE = (
    "a genuine invoice is read well within it, so the file is probably a decompression bomb or "
    "absurdly complex; ask the sender for a plain export or an e-invoice XML (or raise the limit "
    "if this really is one invoice)"
)


def _answer(reply: dict[str, Any]) -> Any:
    """A worker's answer: the result, or the BadDocument it stands for."""
    if "ok" in reply:
        return reply["ok"]
    if "bad" in reply:
        raise BadDocument(reply["bad"]["code"], reply["bad"]["reason"])
    raise unreadable(reply["error"]["type"], reply["error"]["message"])


class _FieldsAhead:
    """Fields a worker read together with a structured document's text, until they are asked for.

    Keyed by the whole ExtractedText: fields are a pure function of it, so an answer is reused
    only for exactly the text it was read from (the same text loaded back from the database,
    in the same process); anything else, or an entry pushed out by the bound, is read in the
    sandbox as before. Taking an answer removes it.
    """

    MAX_ENTRIES = 1024  # a few chunks of structured invoices; about 3 KB each

    def __init__(self) -> None:
        self._answers: OrderedDict[ExtractedText, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, extracted: ExtractedText, answer: dict[str, Any]) -> None:
        with self._lock:
            self._answers[extracted] = answer
            self._answers.move_to_end(extracted)
            while len(self._answers) > self.MAX_ENTRIES:
                self._answers.popitem(last=False)

    def take(self, extracted: ExtractedText) -> dict[str, Any] | None:
        with self._lock:
            return self._answers.pop(extracted, None)


class Sandbox:
    """A pool of parse workers with one set of limits, shared by the threads of a process."""

    def __init__(self, limits: SandboxLimits) -> None:
        self.limits = limits
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self.workers_started = 0
        self._fields_ahead = _FieldsAhead()

    def read_text(
        self,
        content: bytes,
        filename: str | None,
        *,
        max_bytes: int,
        max_text_chars: int,
        max_pdf_pages: int,
        compare_page: bool = True,
    ) -> ExtractedText:
        header = {
            "op": "text",
            "filename": filename,
            "max_bytes": max_bytes,
            "max_text_chars": max_text_chars,
            "max_pdf_pages": max_pdf_pages,
            "compare_page": compare_page,
        }
        reply = self._call(header, content)
        extracted = ExtractedText.from_json(reply["text"])
        if "fields" in reply:
            self._fields_ahead.put(extracted, reply["fields"])
        return extracted

    def read_fields(self, extracted: ExtractedText, compare_page: bool = True) -> InvoiceFields:
        ahead = self._fields_ahead.take(extracted)
        if ahead is not None:
            return InvoiceFields.from_json(_answer(ahead))
        payload = json.dumps(extracted.to_json()).encode()
        return InvoiceFields.from_json(self._call({"op": "fields", "compare_page": compare_page}, payload))

    def check_einvoice(self, extracted: ExtractedText) -> EinvoiceCheck | None:
        """The EN 16931 check of a structured e-invoice (None: not one); in a pool whose limits
        bound data, not address space (`SandboxLimits.memory_kind`)."""
        payload = json.dumps(extracted.to_json()).encode()
        answer = self._call({"op": "einvoice_check"}, payload)
        return EinvoiceCheck.from_json(answer) if answer is not None else None

    def call(self, header: dict[str, Any], payload: bytes) -> Any:
        """Another operation the worker knows (the review page's page images:
        `page_images.sandboxed`), under the same bounds."""
        return self._call(header, payload)

    def ping(self) -> int:
        """The pid of the worker that answered (tests and benchmarks use it to see replacement)."""
        return int(self._call({"op": "ping"}, b"")["pid"])

    def _call(self, header: dict[str, Any], payload: bytes) -> Any:
        worker = self._checkout()
        try:
            reply = worker.call(header, payload)
        except BaseException:
            worker.kill()
            self._replace()
            raise
        if reply.get("retire"):
            # It OCRed a scan under the larger OCR allowance: that must not carry over to the
            # next document, so this worker ends here (it exits after replying).
            worker.close()
            self._replace()
        else:
            self._checkin(worker)
        return _answer(reply)

    def _checkout(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("document sandbox is closed")
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    return worker
                worker.kill()
            self.workers_started += 1
        return _Worker(self.limits)

    def _checkin(self, worker: _Worker) -> None:
        with self._lock:
            keep = not self._closed and len(self._idle) < MAX_IDLE_WORKERS
            if keep and worker.documents < MAX_DOCUMENTS_PER_WORKER:
                self._idle.append(worker)
                return
        # Not replaced here: the next document starts a worker if there is one. A worker
        # recycled for its count is often done at the end of a run (a chunk of 250 invoices is
        # 500 documents read), where an eager replacement was 0.3 s of imports for nothing.
        worker.close()

    def prestart(self) -> None:
        """Have a worker starting (not waited for) unless one is idle already."""
        self._replace()

    def _replace(self) -> None:
        """Start the next worker now: it imports while this process does its database work."""
        with self._lock:
            if self._closed or self._idle:
                return
            self.workers_started += 1
            self._idle.append(_Worker(self.limits))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()


_sandboxes: dict[tuple[int, SandboxLimits], Sandbox] = {}
_sandboxes_lock = threading.Lock()


def shared_sandbox(limits: SandboxLimits) -> Sandbox:
    """One pool per process and limits; keyed by pid so a forked child never uses its parent's pipes."""
    key = (os.getpid(), limits)
    with _sandboxes_lock:
        sandbox = _sandboxes.get(key)
        if sandbox is None:
            sandbox = _sandboxes[key] = Sandbox(limits)
        return sandbox


def close_shared_sandboxes() -> None:
    with _sandboxes_lock:
        mine = [s for (pid, _), s in _sandboxes.items() if pid == os.getpid()]
        for key in [k for k in _sandboxes if k[0] == os.getpid()]:
            del _sandboxes[key]
    for sandbox in mine:
        sandbox.close()


atexit.register(close_shared_sandboxes)
