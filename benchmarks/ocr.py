"""OCR of scans: accuracy per degradation, seconds per page, and what recovery saves.

ocr_accuracy: generated invoices (benchmarks' own seed; every fourth from the visual layer of its
Factur-X form; English, German and French layouts) are scanned with each degradation of
`samples.scans.DEGRADATIONS` (clean 200 dpi image-only PDF, turned 90/180/270 as PNG/PDF/TIFF,
skewed JPEG, 150-dpi PDF, speckled low-quality JPEG, grey PNG), then read by the product's own
extract_text + extract_fields. Per degradation and key field: correct, null (with a reason: not
guessed) and wrong. The seller counts as correct when it names the same vendor as the truth under
the product's vendor normalisation (case, accents, punctuation, legal form), which is what
duplicate detection compares; the exact spelling rate is reported beside it. Two worker
processes share the pages (this machine has two cores).

Linking: each scan is also compared, as dedupe would, with the e-invoice it was drawn from,
decided before it in the same org: exact or suspected counts as linked.

ocr_recovery: the payoff of the extract_text checkpoint, through the CLI and the database only.
A 3-page scan is processed by `invoice-pipeline process` from scratch (baseline). A second copy
(another org) is processed by a worker that is SIGKILLed as soon as the database holds its
extracted text; after the lease's TTL `invoice-pipeline sweep` and `invoice-pipeline process` run
again, and the retry is timed. The saving is the baseline minus the retry, beside the OCR time
itself; `count_step_executions(invoice, 'extract_text')` must stay 1.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.harness import BenchContext, BenchResult, register
from invoice_pipeline.documents import BadDocument, extract_fields, extract_text
from invoice_pipeline.documents.reading.ocr_layout import MIN_FIELD_CONFIDENCE, OcrLayout
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import search_ids
from invoice_pipeline.domain.matching import MatchCandidate, find_match
from invoice_pipeline.domain.normalize import normalize_vendor
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.render import letter_pdf, render_invoice
from invoice_pipeline.samples.scans import (
    DEGRADATIONS,
    degrade,
    draw_invoice,
    encode,
    render_pages,
    scan_corpus,
)

KEY_FIELDS = ("invoice_number", "issue_date", "payable_total", "currency", "seller_name")
SEED = 2026


def _linked(scan: InvoiceFields, einvoice: InvoiceFields) -> str:
    """Whether dedupe would link the scan to its e-invoice decided before it (same org).

    The e-invoice is compared when the store's candidate query would return it
    (`locked_duplicate_candidates`: a shared blocking key or the same number key), then
    `find_match` decides: exact, suspected (held for a person) or not linked.
    """
    try:
        new = MatchCandidate.from_fields("scan", "org", scan)
        old = MatchCandidate.from_fields("e-invoice", "org", einvoice)
    except ValueError:
        return "no key"
    compared = (
        old.block is not None and old.block.id in search_ids(new.block)
    ) or old.number.id == new.number.id
    if not compared:
        return "not compared"
    match = find_match(new, [old])
    return "not linked" if match is None else ("exact" if match.exact else "suspected")


def _read(sample: tuple[str, str, bytes, dict[str, Any], InvoiceFields]) -> dict[str, Any]:
    """One scan through the product's readers, in a pool worker; the verdict per key field."""
    name, degradation, content, truth, einvoice = sample
    started = time.perf_counter()
    out: dict[str, Any] = {"name": name, "degradation": degradation, "fields": {}, "code": None}
    try:
        extracted = extract_text(content, name)
        layout = OcrLayout.from_structured(extracted.structured)
        out["pages"] = [p.seconds for p in layout.pages] if layout else []
        fields = extract_fields(extracted)
    except BadDocument as exc:
        out["code"] = exc.code
        out["linked"] = f"quarantined {exc.code}"
        out["seconds"] = time.perf_counter() - started
        return out
    out["linked"] = _linked(fields, einvoice)
    for key in KEY_FIELDS:
        value, expected = getattr(fields, key), truth[key]
        if value is None:
            verdict = "null"
        elif key == "seller_name":
            same = normalize_vendor(value) == normalize_vendor(expected)
            verdict = ("exact" if value == expected else "correct") if same else "wrong"
        else:
            verdict = "exact" if value == expected else "wrong"
        out["fields"][key] = verdict
        if verdict == "wrong":
            out.setdefault("wrong", []).append(f"{key}: read {value!r}, truth {expected!r}")
    out["seconds"] = time.perf_counter() - started
    return out


@register("ocr_accuracy", "OCR field accuracy per scan degradation, and seconds per page")
def accuracy(ctx: BenchContext) -> BenchResult:
    per_degradation = ctx.pick(3, 40)
    result = BenchResult(
        "ocr_accuracy",
        "Key fields read from generated scans, per degradation: correct / null (not guessed) / wrong.",
        params={
            "invoices_per_degradation": per_degradation,
            "degradations": {k: {"kind": v[0], "dpi": v[1]} for k, v in DEGRADATIONS.items()},
            "seed": SEED,
            "min_field_confidence": MIN_FIELD_CONFIDENCE,
        },
    )
    samples = scan_corpus(per_degradation, seed=SEED, first_page_only=True)
    work = [
        (s.name, s.degradation, s.content, {k: getattr(s.expected, k) for k in KEY_FIELDS}, s.expected)
        for s in samples
    ]
    with mp.get_context("spawn").Pool(2) as pool:
        outcomes = pool.map(_read, work, chunksize=1)
    rows = ["| degradation | scans | " + " | ".join(KEY_FIELDS) + " | all five | quarantined |"]
    rows.append("|---" * (len(KEY_FIELDS) + 4) + "|")
    for degradation in DEGRADATIONS:
        mine = [o for o in outcomes if o["degradation"] == degradation]
        cells = []
        for key in KEY_FIELDS:
            verdicts = Counter(o["fields"].get(key, "quarantined") for o in mine)
            right = verdicts["exact"] + verdicts["correct"]
            share = right / len(mine)
            result.figure(f"{degradation}_{key}_correct", "%", better="higher").add(100 * share)
            result.figure(f"{degradation}_{key}_null", "count").add(verdicts["null"])
            result.figure(f"{degradation}_{key}_wrong", "count").add(verdicts["wrong"])
            cell = f"{100 * share:.0f} %"
            if verdicts["null"] or verdicts["wrong"]:
                cell += f" ({verdicts['null']} null, {verdicts['wrong']} wrong)"
            cells.append(cell)
        whole = sum(
            1
            for o in mine
            if o["code"] is None and all(v in ("exact", "correct") for v in o["fields"].values())
        )
        quarantined = Counter(o["code"] for o in mine if o["code"])
        result.figure(f"{degradation}_all_five_correct", "%", better="higher").add(100 * whole / len(mine))
        rows.append(
            f"| {degradation} | {len(mine)} | "
            + " | ".join(cells)
            + f" | {100 * whole / len(mine):.0f} % | {dict(quarantined) or '-'} |"
        )
        for o in mine:
            for wrong in o.get("wrong", []):
                result.notes.append(f"{o['name']}: {wrong}")
            if o["code"]:
                result.notes.append(f"{o['name']}: quarantined as {o['code']}")
        sellers = [o["fields"].get("seller_name") for o in mine]
        result.figure(f"{degradation}_seller_exact_spelling", "%", better="higher").add(
            100 * sum(1 for v in sellers if v == "exact") / len(mine)
        )
    result.tables.append("\n".join(rows))
    page_seconds = [s for o in outcomes for s in o.get("pages", [])]
    for seconds in page_seconds:
        result.figure("ocr_seconds_per_page", "s", note="one thread, two pool workers sharing 2 cores").add(
            seconds
        )
    clean = [o for o in outcomes if o["degradation"] == "clean"]
    for key in KEY_FIELDS:
        share = sum(1 for o in clean if o["fields"].get(key) in ("exact", "correct")) / len(clean)
        result.check(
            f"clean_200dpi_{key}_at_least_95pct",
            share >= 0.95,
            f"{100 * share:.1f} % of {len(clean)} clean scans",
            fatal=False,
        )
    linked = Counter(o["linked"] for o in outcomes)
    share = (linked["exact"] + linked["suspected"]) / len(outcomes)
    result.figure("scan_linked_to_its_einvoice", "%", better="higher").add(100 * share)
    result.notes.append(f"scan of an e-invoice decided before it: {dict(linked)}")
    result.check(
        "scan_of_an_einvoice_linked_at_least_90pct", share >= 0.90, f"{100 * share:.1f} %", fatal=False
    )
    wrong = sum(len(o.get("wrong", [])) for o in outcomes)
    result.notes.insert(0, f"{wrong} wrong values in {len(outcomes) * len(KEY_FIELDS)} key fields read")
    return result


# -- recovery ----------------------------------------------------------------------------------------


def _three_page_scan() -> bytes:
    """An invoice page and two pages of terms, scanned at 200 dpi into an image-only PDF."""
    inv = draw_invoice(SEED)
    rng = random.Random(SEED)
    terms = letter_pdf(
        [f"Terms and conditions, clause {i}: payment within 30 days of the invoice." for i in range(20)]
    )
    pages = render_pages(render_invoice(inv, "pdf"), 200)[:1] + render_pages(terms, 200) * 2
    return encode([degrade(p, "clean", rng) for p in pages], "pdf", 200)


def _cli(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "invoice_pipeline.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _run(env: dict[str, str], *args: str) -> float:
    started = time.monotonic()
    proc = _cli(env, *args)
    proc.wait(timeout=600)
    return time.monotonic() - started


def _poll(url: str, sql: str, params: tuple[object, ...], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute(sql, params).fetchone():
                return
            time.sleep(0.05)
    raise TimeoutError(sql)


@register("ocr_recovery", "time a retry saves by fast-forwarding past saved OCR after kill -9")
def recovery(ctx: BenchContext) -> BenchResult:
    rounds = ctx.pick(1, 3)
    ttl = 4
    result = BenchResult(
        "ocr_recovery",
        "A 3-page scan: full `invoice-pipeline process` vs the retry after SIGKILL right after the "
        "extract_text checkpoint was saved (the retry fast-forwards past OCR).",
        params={"rounds": rounds, "pages": 3, "lock_ttl_seconds": ttl},
    )
    url = ctx.server.fresh_database("ocr_recovery")
    scan = _three_page_scan()
    with tempfile.TemporaryDirectory(prefix="bench-ocr-recovery-") as tmp:
        path = Path(tmp) / "scan.pdf"
        path.write_bytes(scan)
        env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
        env.update(
            INVOICE_PIPELINE_DATABASE_URL=url,
            INVOICE_PIPELINE_HOME=str(Path(tmp) / "home"),
            INVOICE_PIPELINE_LOCK_TTL_SECONDS=str(ttl),
            INVOICE_PIPELINE_HEARTBEAT_SECONDS="1",
        )
        store = InvoiceStore(url)
        try:
            _run(env, "migrate")
            for r in range(rounds):
                base = store.documents.store_document(scan, f"baseline-{r}", "scan.pdf")
                result.figure("full_process_s", "s", note="ingested scan, OCR included").add(
                    _run(env, "process")
                )
                crash = store.documents.store_document(scan, f"crash-{r}", "scan.pdf")
                worker = _cli(env, "process")
                started = time.monotonic()
                _poll(url, "SELECT 1 FROM extracted_texts WHERE invoice_id = %s", (crash.invoice_id,))
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
                result.figure(
                    "killed_after_s", "s", note="from start to SIGKILL, right after OCR was saved"
                ).add(time.monotonic() - started)
                # Wait on the database clock for the dead lease to be stale, then sweep and retry.
                _poll(
                    url,
                    "SELECT 1 FROM processing_jobs WHERE invoice_id = %s AND status = 'running' "
                    "AND heartbeat_at < now() - make_interval(secs => %s)",
                    (crash.invoice_id, ttl),
                )
                _run(env, "sweep")
                result.figure("retry_process_s", "s", note="fast-forwards past the saved OCR").add(
                    _run(env, "process")
                )
                saved = store.documents.load_extracted_text(crash.invoice_id)
                layout = OcrLayout.from_structured(saved.structured if saved else None)
                result.figure("ocr_s", "s", note="OCR time of the 3 pages, as recorded").add(
                    sum(p.seconds for p in layout.pages) if layout else float("nan")
                )
                executions = store.documents.count_step_executions(crash.invoice_id, "extract_text")
                result.check(
                    f"round_{r}_ocr_not_redone",
                    executions == 1,
                    f"extract_text executed {executions} time(s) for the killed invoice",
                )
                with psycopg.connect(url) as conn:
                    statuses: dict[Any, str] = dict(
                        conn.execute(
                            "SELECT id, status FROM invoices WHERE id = ANY(%s)",
                            ([base.invoice_id, crash.invoice_id],),
                        ).fetchall()
                    )
                result.check(
                    f"round_{r}_both_finished",
                    all(s in ("processed", "needs_review") for s in statuses.values()),
                    f"statuses {sorted(statuses.values())}",
                )
        finally:
            store.close()
    full, retry = result.get("full_process_s"), result.get("retry_process_s")
    for a, b in zip(full.values, retry.values, strict=True):
        result.figure("saved_by_fast_forward_s", "s", better="higher").add(a - b)
    result.ratio("retry_over_full", "retry_process_s", "full_process_s")
    return result
