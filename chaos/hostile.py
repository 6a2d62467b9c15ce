"""Scenario 6, the hostile input catalogue through the real pipeline.

Three sources, ingested and processed by the batch job in a worker process:

- every class of `pipeline_support/hostile_corpus.py` (bombs, nested and huge PDFs, JavaScript,
  attachments, a 19 MB text node, BOM-less UTF-16/32, NULs, duplicate JSON keys, a zip bomb
  named .pdf, a 5,000-digit integer, ...): each must end quarantined with its own code and a
  reason that says what its class needs said (which bound, which encoding, which key);
- every bad-input class of the sample generator (empty, truncated, encrypted, cover letter, XXE,
  purchase order, schema violation, wrong encoding, missing total, negative total, unknown
  currency, impossible date), each with its expected code;
- seeded fuzzed variants of valid PDF/XML/JSON invoices (byte flips, truncations, inserted
  garbage, repeated slices, structure-aware edits).

The run must complete (it runs under a timeout), every invoice must end processed or
quarantined with a reason, nothing may stay processing, and the original bytes must be kept.
Parsing runs in the DocumentReader sandbox with tight limits, so a bomb costs seconds;
`corpus_classes` and `quarantined_by_code` in the figures count what was refused how.

A parser crash on any input is a violation naming the input (its label, the sample it was
fuzzed from, the scenario seed that rebuilds it) and the exception. A crash is an exception no
parser turned into a BadDocument with its own code: either it escaped the stage, so the invoice
ends needs_attention with the error (max_attempts 1, so in one run), or the sandbox's catch-all
(`run_parser`, `Sandbox._call`) mapped it to `unreadable_document` "the parser failed on this
document (KeyError: ...)". Both used to be counted in `unexpected_errors` only (issue 24). What
breaking it showed (2026-12-01, fast sizes): a temporary patch in batch_worker making
DocumentReader.read_fields raise KeyError for every fifth document, and the sandbox's
unreadable(...) BadDocument for every seventh, made the run fail with one violation per
document, 11 violations (7 needs_attention, 4 quarantined) such as "parser crash on
fuzz:facturx-pdf:flip:21 (sample 021_avoir_as_invoice.pdf, seed 32377171), ended
needs_attention: extract_fields failed: KeyError: 'boom-from-breakage'". Before, only a
corpus document's wrong code was a violation: the crashes on fuzzed and valid documents
added to the `unexpected_errors` figure (the needs_attention ones) or to nothing at all (the
ones mapped to unreadable_document).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

from chaos.common import (
    ChaosContext,
    ScenarioResult,
    check_common_invariants,
    timed,
    worker_context,
)
from chaos.worker import batch_worker
from invoice_pipeline.documents.sandbox import unreadable
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.generator import generate_samples
from pipeline_support import hostile_corpus

CHUNK = 60  # invoices per batch run
# Sandbox bounds for this scenario: a bomb ends too_complex after ~2 s of CPU, not 30.
READER = {"parse_cpu_seconds": 2, "parse_memory_mb": 512, "parse_timeout_seconds": 120}
# How the sandbox reports a parser exception it could not attribute to the input: the start of
# the reason of unreadable(kind, message) ("the parser failed on this document (").
_PROBE = unreadable("X", "")
PARSER_FAILED = (_PROBE.code, _PROBE.reason.split("(", 1)[0] + "(")


@dataclass(frozen=True)
class Doc:
    label: str
    content: bytes
    code: str = ""  # the quarantine code it must end with ("" for fuzz: any clear outcome)
    says: str = ""  # what its reason must mention
    filename: str | None = None
    source: str = ""  # the generated sample file it is (catalogue) or was fuzzed from


def mutate(rng: random.Random, content: bytes, fmt: str) -> tuple[bytes, str]:
    data = bytearray(content)
    kind = rng.choice(["flip", "flip", "truncate", "insert", "repeat", "structure"])
    if kind == "flip":
        for _ in range(rng.randint(1, 12)):
            i = rng.randrange(len(data))
            data[i] = rng.randrange(256)
    elif kind == "truncate":
        data = data[: rng.randrange(1, len(data))]
    elif kind == "insert":
        i = rng.randrange(len(data))
        data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    elif kind == "repeat":
        i = rng.randrange(len(data))
        j = min(len(data), i + rng.randint(1, 200))
        data[j:j] = data[i:j] * rng.randint(2, 20)
    else:
        text = bytes(data)
        if fmt == "json":
            doc = json.loads(text)
            key = rng.choice(list(doc))
            doc[key] = rng.choice([None, "", -1, 1e308, "9" * 400, {"x": [1]}, "\u202e\u0000evil", True])
            data = bytearray(json.dumps(doc).encode())
        elif fmt in ("ubl", "cii"):
            tags = [i for i in range(len(text)) if text[i : i + 2] == b"</"]
            i = rng.choice(tags) if tags else 0
            data = bytearray(text[:i] + text[text.find(b">", i) + 1 :])  # drop one closing tag
        else:
            data = bytearray(text.replace(b"/Length", b"/Lenght", 1).replace(b"endobj", b"endobk", 1))
    return bytes(data), kind


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    fuzzed = params["trials"]
    result = ScenarioResult("hostile_inputs", seed, dict(params))
    rng = random.Random(seed)
    url = ctx.new_database()
    work = ctx.scratch_dir("hostile")
    with timed(result):
        corpus = hostile_corpus.build(seed)
        docs = [Doc(f"corpus:{c.name}", c.content, c.code, c.says, c.filename) for c in corpus]
        catalogue = generate_samples(work / "catalogue", count=5, seed=seed % 1000)
        for f in catalogue.files:
            docs.append(
                Doc(
                    f"catalogue:{f.quarantine_code or 'valid'}",
                    f.path.read_bytes(),
                    f.quarantine_code or "",
                    source=f.path.name,
                )
            )
        valid = [f for f in generate_samples(work / "valid", count=10, seed=seed % 1000 + 1, bad=False).files]
        kinds: Counter[str] = Counter()
        for i in range(fuzzed):
            f = rng.choice(valid)
            content, kind = mutate(rng, f.path.read_bytes(), f.format)
            kinds[f"{f.format}:{kind}"] += 1
            docs.append(Doc(f"fuzz:{f.format}:{kind}:{i}", content, source=f.path.name))
        store = InvoiceStore(url, max_size=2)
        ids: dict[str, Doc] = {}
        for n, doc in enumerate(docs):
            # One org per document: a byte-identical fuzz result must still be its own invoice.
            ingested = store.documents.store_document(doc.content, f"hostile-{n}", doc.filename or doc.label)
            ids[str(ingested.invoice_id)] = doc
        result.figures["corpus_classes"] = len(corpus)
        result.figures["catalogue_classes"] = len(
            {d.code for d in docs if d.label.startswith("catalogue:") and d.code}
        )
        store.close()
        result.failures_injected = len(docs)
        mp = worker_context()
        invoice_ids = list(ids)
        for c in range(0, len(invoice_ids), CHUNK):
            chunk = invoice_ids[c : c + CHUNK]
            out = work / f"run-{c}.json"
            proc = mp.Process(
                target=batch_worker,
                args=(url, chunk, str(out), {"max_attempts": 1, "lock_ttl_seconds": 30}, READER),
            )
            proc.start()
            proc.join(120 + 10 * len(chunk))
            if proc.is_alive():
                proc.kill()
                proc.join(30)
                result.violate(f"batch run over invoices {c}..{c + len(chunk)} hung; killed")
                continue
            outcome = json.loads(out.read_text()) if out.exists() else {"error": "no report"}
            if "error" in outcome:
                result.violate(f"batch run crashed: {outcome['error'][-800:]}")
            result.count("runs_completed")
        _check_outcomes(url, ids, result, seed)
        result.figures["fuzz_kinds"] = dict(sorted(kinds.items()))
        result.figures["invoices_by_status"] = check_common_invariants(url, result)
        result.trials = len(docs)
    ctx.cleanup()
    return result


def parser_crash(status: str, code: str | None, reason: str | None, error: str | None) -> str | None:
    """The exception of a parser crash (see the module docstring), or None."""
    if status == "needs_attention":
        return error or "needs_attention without an error"
    if status == "quarantined" and code == PARSER_FAILED[0] and (reason or "").startswith(PARSER_FAILED[1]):
        return (reason or "")[len(PARSER_FAILED[1]) :].split("); ", 1)[0]
    return None


def _check_outcomes(url: str, ids: dict[str, Doc], result: ScenarioResult, seed: int) -> None:
    codes: Counter[str] = Counter()
    corpus_codes: Counter[str] = Counter()
    unexpected: Counter[str] = Counter()
    crashes: Counter[str] = Counter()
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT i.id::text, i.status, i.quarantine_code, i.quarantine_reason, i.last_error, d.sha256, d.content "
            "FROM invoices i LEFT JOIN documents d ON d.sha256 = i.document_sha256"
        ).fetchall()
    for inv, status, code, reason, error, sha, content in rows:
        doc = ids[inv]
        label, original, expected = doc.label, doc.content, doc.code
        if sha is None or bytes(content) != original or hashlib.sha256(bytes(content)).hexdigest() != sha:
            result.violate(f"{label}: original bytes not kept intact")
        crash = parser_crash(status, code, reason, error)
        if crash is not None:
            # A parser raised something it should have turned into a BadDocument of its own.
            first = crash.split(":")[0:3]
            unexpected[":".join(first)[:120]] += 1
            crashes[status] += 1
            source = f"sample {doc.source}, " if doc.source else ""
            result.violate(f"parser crash on {label} ({source}seed {seed}), ended {status}: {crash[:400]}")
        if status == "quarantined":
            codes[code] += 1
            if not reason or not code:
                result.violate(f"{label}: quarantined without code and reason")
        elif status == "needs_attention":
            pass  # a parser crash, reported above
        elif status not in ("processed", "needs_review"):
            # needs_review: a valid document a person must decide on (a business exception such as
            # a fuzzed date, or a look-alike of another valid sample held as a suspected copy).
            result.violate(f"{label}: ended {status}")
        if expected and (status != "quarantined" or code != expected):
            result.violate(
                f"{label}: expected quarantine {expected}, got {status} {code}: {(reason or error or '')[:200]}"
            )
        elif doc.says and doc.says.lower() not in (reason or "").lower():
            result.violate(f"{label}: reason does not say {doc.says!r}: {(reason or '')[:200]}")
        if label.startswith("corpus:") and status == "quarantined":
            corpus_codes[code] += 1
    result.figures["quarantine_codes"] = dict(sorted(codes.items()))
    result.figures["corpus_quarantined"] = sum(corpus_codes.values())
    result.figures["corpus_quarantined_by_code"] = dict(sorted(corpus_codes.items()))
    result.figures["unexpected_errors"] = dict(sorted(unexpected.items()))
    result.figures["parser_crashes"] = sum(crashes.values())
    result.figures["parser_crashes_by_outcome"] = dict(sorted(crashes.items()))


__all__ = ["Path"]
