"""The parse worker process: `python -m invoice_pipeline.documents.sandbox_worker LIMITS_JSON`.

Reads requests from stdin and answers on stdout, one document at a time, until end of input
(its parent closed the pipe or died). See `documents.sandbox` for the protocol and the bounds.
Kept apart from `sandbox` so that running it as __main__ does not import that module twice.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

from invoice_pipeline.documents import ExtractedText, extract_fields, extract_text, ocr
from invoice_pipeline.documents.errors import BadDocument
from invoice_pipeline.documents.sandbox import EXIT_OUT_OF_MEMORY, MIB, read_frame, run_parser, write_frame

# Built before any document: answering "out of memory" must not need memory.
_OUT_OF_MEMORY = json.dumps({"limit": "memory"}).encode()


def _cpu_budget(seconds: int) -> None:
    """RLIMIT_CPU counts the whole process life: allow `seconds` more from now.

    Past the soft limit the kernel sends SIGXCPU, whose default action ends the worker; the
    parent sees the signal and names the bound. The hard limit stays where it was, so the next
    document can be given its own budget.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime) + 1 + seconds
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _answer(parse: Callable[[], Any]) -> dict[str, Any]:
    """A parser's result as the parent reads it (`sandbox._answer`): ok, or the refusal."""
    try:
        return {"ok": run_parser(parse)}
    except BadDocument as exc:
        return {"bad": {"code": exc.code, "reason": exc.reason}}


def _handle(header: dict[str, Any], payload: bytes) -> dict[str, Any] | None:
    op = header["op"]
    if op == "text":
        extracted = extract_text(
            payload,
            header.get("filename"),
            max_bytes=int(header["max_bytes"]),
            max_text_chars=int(header["max_text_chars"]),
            max_pdf_pages=int(header["max_pdf_pages"]),
        )
        reply: dict[str, Any] = {"text": extracted.to_json()}
        if extracted.structured is not None and not ocr.engine_used():
            # A structured invoice's fields cost less than its parse: read them now, within this
            # document's CPU and wall-clock budget, and spare the fields stage a second round
            # trip (`Sandbox.read_fields`). A refusal travels as the fields' answer, not as a
            # failed text read: the fields stage raises it, as if it had asked.
            compare_page = bool(header.get("compare_page", True))
            reply["fields"] = _answer(lambda: extract_fields(extracted, compare_page=compare_page).to_json())
        return reply
    if op == "fields":
        extracted = ExtractedText.from_json(json.loads(payload))
        return extract_fields(extracted, compare_page=bool(header.get("compare_page", True))).to_json()
    if op == "einvoice_check":
        # Imported here: only the validator's workers load Saxon (einvoice_rules explains why).
        from invoice_pipeline.documents.einvoice_rules import check_extracted

        check = check_extracted(ExtractedText.from_json(json.loads(payload)))
        return check.to_json() if check is not None else None
    if op == "ping":
        return {"pid": os.getpid()}
    if op in ("page_sizes", "page_png"):
        # The review page's page images, drawn here under the same bounds as any parse.
        from invoice_pipeline.documents.page_images import sandboxed

        return sandboxed(header, payload)
    raise ValueError(f"unknown sandbox operation {op!r}")


def main() -> int:
    limits = json.loads(sys.argv[1])
    memory = int(limits["memory_mib"]) * MIB
    # OCR may lift the soft limit up to this hard one (documents.ocr.engine); see SandboxLimits.
    ocr_memory = max(memory, int(limits.get("ocr_memory_mib", limits["memory_mib"])) * MIB)
    cpu_seconds = int(limits["cpu_seconds"])
    # The protocol owns the real stdout; anything a library prints goes to stderr instead.
    inp, out = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # The parent reports what matters; parser chatter about damaged files is noise here.
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGXCPU would otherwise dump core
    if limits.get("memory_kind") == "data":
        # Memory written to, not reserved: SandboxLimits.memory_kind says why.
        resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    else:
        resource.setrlimit(resource.RLIMIT_AS, (memory, ocr_memory))
    write_frame(out, json.dumps({"ready": os.getpid()}).encode())
    while True:
        header_frame = read_frame(inp)
        payload = read_frame(inp) if header_frame is not None else None
        if header_frame is None or payload is None:
            return 0
        header = json.loads(header_frame)
        _cpu_budget(cpu_seconds)
        try:
            reply = _answer(partial(_handle, header, payload))
            # OCR lifted this process's address-space limit (documents.ocr.engine) and it stays
            # lifted: answer, then make way for a fresh worker under the general limit.
            retire = ocr.engine_used()
            if retire:
                reply["retire"] = True
            encoded = json.dumps(reply).encode()
        except MemoryError:
            write_frame(out, _OUT_OF_MEMORY)
            os._exit(EXIT_OUT_OF_MEMORY)
        del reply
        write_frame(out, encoded)
        if retire:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
