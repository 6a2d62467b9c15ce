"""sandbox_overhead: what parsing in a bounded worker process costs per document.

Each generated sample (PDF, Factur-X, UBL, CII, JSON) is read in-process (extract_text +
extract_fields) and through the DocumentReader sandbox (the same two calls in a long-lived
worker under RLIMIT_AS / RLIMIT_CPU and a wall clock), alternating, so both see the same machine
state. The overhead per document is the paired difference. Also measured: a worker's cold
start (interpreter + imports, paid once per process and after each bound was hit), what a new
interpreter per document would cost instead, and (full mode) how long a decompression bomb
holds a worker under the default limits before it is quarantined.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import BenchContext, BenchResult, register
from invoice_pipeline.documents import BadDocument, extract_fields, extract_text
from invoice_pipeline.documents.sandbox import Sandbox, SandboxLimits
from invoice_pipeline.samples import generate_samples

NAME = "sandbox_overhead"
MAX_BYTES = 20 * 1024 * 1024


@register(NAME, "per-document cost of parsing in the bounded worker process vs in-process")
def run(ctx: BenchContext) -> BenchResult:
    rounds = ctx.pick(5, 30)
    result = BenchResult(
        NAME,
        "Per-document time of extract_text + extract_fields in-process vs through the sandbox worker "
        "(paired, same documents), the worker's cold start, and a new interpreter per document.",
        params={"rounds": rounds, "limits": SandboxLimits().to_json()},
    )
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        samples = generate_samples(Path(tmp), count=10, seed=1, bad=False)
        docs: dict[str, list[bytes]] = {}
        for f in samples.files:
            docs.setdefault(f.format, []).append(f.path.read_bytes())
    sandbox = Sandbox(SandboxLimits())
    try:
        started = time.perf_counter()
        sandbox.ping()
        result.figure("worker_cold_start", "ms", note="interpreter + imports, once per process").add(
            (time.perf_counter() - started) * 1000
        )
        overall: list[float] = []
        for _ in range(rounds):
            for fmt, contents in sorted(docs.items()):
                for content in contents:
                    t0 = time.perf_counter()
                    fields = extract_fields(extract_text(content, max_bytes=MAX_BYTES))
                    t1 = time.perf_counter()
                    boxed = sandbox.read_fields(
                        sandbox.read_text(
                            content, None, max_bytes=MAX_BYTES, max_text_chars=1_000_000, max_pdf_pages=500
                        )
                    )
                    t2 = time.perf_counter()
                    assert boxed == fields, f"{fmt}: the sandbox read different fields"
                    result.figure(f"in_process_{fmt}", "ms").add((t1 - t0) * 1000)
                    result.figure(f"sandboxed_{fmt}", "ms").add((t2 - t1) * 1000)
                    overhead = (t2 - t1) - (t1 - t0)
                    result.figure(f"overhead_{fmt}", "ms", note="sandboxed minus in-process, paired").add(
                        overhead * 1000
                    )
                    overall.append(overhead * 1000)
        result.figure("overhead_per_document", "ms", note="median over every format and round").add(
            statistics.median(overall)
        )
        for _ in range(ctx.pick(2, 5)):
            cold = Sandbox(SandboxLimits())
            started = time.perf_counter()
            cold.ping()
            result.figure("worker_cold_start", "ms").add((time.perf_counter() - started) * 1000)
            cold.close()
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import invoice_pipeline.documents"], check=True)
            result.figure(
                "interpreter_per_document", "ms", note="what a fresh interpreter per document would add"
            ).add((time.perf_counter() - started) * 1000)
        if not ctx.quick:
            bomb = _decompression_bomb()
            started = time.perf_counter()
            try:
                sandbox.read_text(
                    bomb, None, max_bytes=MAX_BYTES, max_text_chars=1_000_000, max_pdf_pages=500
                )
                code = "read"
            except BadDocument as exc:
                code = exc.code
            result.figure("bomb_held_worker_default_limits", "s", note=f"ended as {code}").add(
                time.perf_counter() - started
            )
    finally:
        sandbox.close()
    result.notes.append(
        f"workers started: {sandbox.workers_started}; one worker served every document of every round"
    )
    return result


def _decompression_bomb() -> bytes:
    from pipeline_support.hostile_corpus import by_name

    return by_name(seed=0)["pdf_decompression_bomb"].content
