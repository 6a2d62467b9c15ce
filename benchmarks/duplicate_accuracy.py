"""duplicate_accuracy: precision and recall of duplicate detection on a labelled, seeded benchmark.

The pairs come from `invoice_pipeline.samples.twins`: twins (true duplicates: re-sends, the same
invoice in another format, OCR-confused or reformatted numbers, VAT ids and seller names written
differently) and look-alikes (not duplicates: the next number, the same number re-priced, the
same amount a month later, the same number from another seller, a credit note reusing the
number).

Every pair is decided on the product's path, in its own org so that no pair sees another:
render both documents, then for the original and then the other one: ingest the bytes
(`store_document`), take the lease (`acquire`), read text and fields with the real
`DocumentReader`, save them (fenced), validate as the `validate` op does, and `decide_duplicate`
under the blocking key's advisory locks. The other document's decision is the outcome.

A twin counts as found when it is decided `duplicate` (exact, rejected automatically) or
`suspected` (held for a person); how many were exact is reported beside. Each pair is also
decided by the pure matcher on the fields the documents were rendered from ("on true fields"),
so a miss can be blamed on extraction or on matching.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness import BenchContext, BenchResult, fmt, register
from invoice_pipeline.documents import BadDocument
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.validation import validate_fields
from invoice_pipeline.engine.dedupe import decide_duplicate
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline.samples.twin_world import TwinDocument
from invoice_pipeline.samples.twins import (
    KINDS,
    LOOKALIKE_KINDS,
    TWIN_KINDS,
    LabelledPair,
    decide_on_true_fields,
    generate_pairs,
)

NAME = "duplicate_accuracy"
SEED = 0
MAX_DOCUMENT_BYTES = 20 * 1024 * 1024
FOUND = ("duplicate", "suspected")
# Goals (issue 10). Recall counts duplicate and suspected alike: either way no copy is paid.
RECALL_GOALS: dict[str, float] = {"exact_resend": 0.99, "cross_format": 0.99}
OVERALL_RECALL_GOAL = 0.95
EXAMPLES_PER_VARIANT = 3


@dataclass(frozen=True)
class DocOutcome:
    """What the pipeline did with one document: a duplicate status, or why it stopped before."""

    status: str  # original | duplicate | suspected | quarantined | unreadable
    code: str | None
    fields: InvoiceFields | None


@dataclass(frozen=True)
class PairOutcome:
    pair: LabelledPair
    original: DocOutcome
    other: DocOutcome
    truth: str  # the pure matcher on the true fields: duplicate | suspected | original

    @property
    def status(self) -> str:
        """The pair's outcome: the other document's status, unless the original never became one."""
        if self.original.status != "original":
            return "original not accepted"
        return self.other.status

    @property
    def flagged(self) -> bool:
        return self.status in FOUND


@dataclass
class Timer:
    extract_s: float = 0.0
    database_s: float = 0.0
    documents: int = 0


def process_document(
    store: InvoiceStore, reader: DocumentReader, org: str, doc: TwinDocument, name: str, timer: Timer
) -> DocOutcome:
    """One document through ingest, extraction, validation and duplicate detection."""
    t0 = time.perf_counter()
    content = doc.render()
    t1 = time.perf_counter()
    ingested = store.documents.store_document(content, org, f"{name}.{doc.extension}")
    lease = store.claims.acquire(ingested.invoice_id, 1, owner=f"{NAME}:{org}")
    if lease is None:
        raise RuntimeError(f"{org}/{name}: could not take the lock of a fresh invoice")
    t2 = time.perf_counter()
    try:
        try:
            extracted = reader.read_text(content, f"{name}.{doc.extension}", MAX_DOCUMENT_BYTES)
            fields = reader.read_fields(extracted)
        except BadDocument as error:
            return DocOutcome("unreadable", error.code, None)
        finally:
            t3 = time.perf_counter()
            timer.extract_s += t3 - t2 + t1 - t0
        store.documents.save_extracted_text(lease, extracted)
        store.documents.save_fields(lease, fields)
        problems = validate_fields(fields)
        if problems:
            return DocOutcome("quarantined", problems[0].code, fields)
        decision = decide_duplicate(store, lease, org, fields)
        return DocOutcome(decision.status, None, fields)
    finally:
        store.claims.finish(lease.job_id, "succeeded")
        timer.database_s += time.perf_counter() - t3 + t2 - t1
        timer.documents += 1


def truth_status(pair: LabelledPair) -> str:
    match = decide_on_true_fields(pair)
    if match is None:
        return "original"
    return "duplicate" if match.exact else "suspected"


def run_pairs(
    store: InvoiceStore, pairs: Sequence[LabelledPair], timer: Timer, ctx: BenchContext
) -> list[PairOutcome]:
    reader = DocumentReader()
    out: list[PairOutcome] = []
    for n, pair in enumerate(pairs, 1):
        org = f"dup-{pair.pair_id}"
        original = process_document(store, reader, org, pair.original, "original", timer)
        other = process_document(store, reader, org, pair.other, "other", timer)
        out.append(PairOutcome(pair, original, other, truth_status(pair)))
        if n % 500 == 0:
            ctx.log(f"{n}/{len(pairs)} pairs decided")
    return out


# -- reporting ------------------------------------------------------------------------------------


@dataclass
class Tally:
    pairs: int = 0
    duplicate: int = 0
    suspected: int = 0
    original: int = 0
    not_decided: int = 0  # the other document (or the original) stopped before dedupe
    truth_found: int = 0

    def add(self, o: PairOutcome) -> None:
        self.pairs += 1
        status = o.status
        if status == "duplicate":
            self.duplicate += 1
        elif status == "suspected":
            self.suspected += 1
        elif status == "original":
            self.original += 1
        else:
            self.not_decided += 1
        self.truth_found += o.truth in FOUND

    @property
    def found(self) -> int:
        return self.duplicate + self.suspected

    def share(self, n: int) -> float:
        return n / self.pairs if self.pairs else float("nan")


def _ratio(num: int, den: int) -> float:
    return num / den if den else float("nan")


def _pct(value: float) -> str:
    return "n/a" if value != value else f"{value:.3f}"


def tallies(outcomes: Sequence[PairOutcome]) -> tuple[dict[str, Tally], dict[tuple[str, str], Tally]]:
    by_kind: dict[str, Tally] = {k: Tally() for k in KINDS}
    by_variant: dict[tuple[str, str], Tally] = defaultdict(Tally)
    for o in outcomes:
        by_kind[o.pair.kind].add(o)
        by_variant[(o.pair.kind, o.pair.variant)].add(o)
    return by_kind, dict(sorted(by_variant.items(), key=lambda kv: (KINDS.index(kv[0][0]), kv[0][1])))


def kind_table(by_kind: dict[str, Tally]) -> str:
    lines = [
        "| kind | label | pairs | decided duplicate (exact) | suspected | original | not decided "
        "| recall (found) | exact share | recall on true fields | precision |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind, t in by_kind.items():
        if not t.pairs:
            continue
        twin = kind in TWIN_KINDS
        # Within one kind every pair has the same label, so precision is 1 (twins found, no
        # false flags possible) or 0 (a look-alike flagged); the overall rows carry the real figure.
        precision = _ratio(t.found, t.found) if twin else (0.0 if t.found else float("nan"))
        lines.append(
            f"| {kind} | {'duplicate' if twin else 'look-alike'} | {t.pairs} | {t.duplicate} | {t.suspected} "
            f"| {t.original} | {t.not_decided} | {_pct(t.share(t.found)) if twin else '–'} "
            f"| {_pct(t.share(t.duplicate)) if twin else '–'} "
            f"| {_pct(t.share(t.truth_found)) if twin else '–'} | {_pct(precision)} |"
        )
    return "\n".join(lines)


def variant_table(by_variant: dict[tuple[str, str], Tally]) -> str:
    lines = [
        "| kind | variant | pairs | duplicate | suspected | original | not decided | found | found on true fields |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (kind, variant), t in by_variant.items():
        lines.append(
            f"| {kind} | {variant} | {t.pairs} | {t.duplicate} | {t.suspected} | {t.original} | {t.not_decided} "
            f"| {_pct(t.share(t.found))} | {_pct(t.share(t.truth_found))} |"
        )
    return "\n".join(lines)


def _seen(doc: DocOutcome) -> str:
    if doc.fields is None:
        return f"{doc.status} ({doc.code})"
    f = doc.fields
    text = f"number {f.invoice_number!r}, seller {f.seller_name!r} / VAT {f.seller_vat_id!r}, total {f.payable_total}"
    return (
        text
        + (f", type {f.document_type}" if f.document_type != "invoice" else "")
        + (f" [{doc.status}: {doc.code}]" if doc.code else "")
    )


def error_examples(outcomes: Sequence[PairOutcome]) -> list[str]:
    """A few misses (twins not found) and false flags (look-alikes flagged) per variant, readable."""
    shown: Counter[tuple[str, str]] = Counter()
    out = []
    for o in outcomes:
        wrong = (o.pair.duplicate and not o.flagged) or (not o.pair.duplicate and o.flagged)
        key = (o.pair.kind, o.pair.variant)
        if not wrong or shown[key] >= EXAMPLES_PER_VARIANT:
            continue
        shown[key] += 1
        where = "extraction" if (o.truth in FOUND) == o.pair.duplicate else "matching"
        out.append(
            f"{o.pair.pair_id} ({o.pair.variant}; {o.pair.original.format}->{o.pair.other.format}): "
            f"{o.pair.detail}. Decided {o.status}, on true fields {o.truth} (blame: {where}). "
            f"Read original: {_seen(o.original)}; other: {_seen(o.other)}."
        )
    return out


def plot_outcomes(path: Path, by_kind: dict[str, Tally]) -> str:
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    kinds = [k for k, t in by_kind.items() if t.pairs]
    parts = (
        ("duplicate (exact)", "duplicate", "#c44e52"),
        ("suspected", "suspected", "#dd8452"),
        ("original", "original", "#4c72b0"),
        ("not decided", "not_decided", "#8c8c8c"),
    )
    fig, ax = plt.subplots(figsize=(8, 5.5))
    left = [0.0] * len(kinds)
    for label, attr, colour in parts:
        shares = [by_kind[k].share(getattr(by_kind[k], attr)) for k in kinds]
        ax.barh(kinds, shares, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.invert_yaxis()
    ax.axhline(len(TWIN_KINDS) - 0.5, color="black", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of pairs")
    ax.set_title("Decision on the other document: twins (top) and look-alikes (bottom)")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(parts))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


@register(
    NAME, "precision/recall of duplicate detection on labelled twins and look-alikes, real parsers + database"
)
def run(ctx: BenchContext) -> BenchResult:
    per_kind = ctx.pick(12, 240)
    pairs = generate_pairs(per_kind, seed=SEED)
    result = BenchResult(
        NAME,
        f"{per_kind} labelled pairs per kind ({len(TWIN_KINDS)} kinds of true duplicates, {len(LOOKALIKE_KINDS)} of "
        "look-alikes), each rendered to bytes, read by the real parsers and decided by decide_duplicate on a "
        "migrated database, one org per pair. Found = decided duplicate or suspected.",
        params={
            "pairs_per_kind": per_kind,
            "pairs": len(pairs),
            "seed": SEED,
            "generator": "samples/twins.py",
        },
    )
    url = ctx.database(NAME)
    store = InvoiceStore(url, min_size=1, max_size=2)
    timer = Timer()
    started = time.perf_counter()
    try:
        outcomes = run_pairs(store, pairs, timer, ctx)
    finally:
        store.close()
    elapsed = time.perf_counter() - started

    by_kind, by_variant = tallies(outcomes)
    twins = [o for o in outcomes if o.pair.duplicate]
    lookalikes = [o for o in outcomes if not o.pair.duplicate]
    tp = sum(o.flagged for o in twins)
    fp = sum(o.flagged for o in lookalikes)
    tp_exact = sum(o.status == "duplicate" for o in twins)
    fp_exact = sum(o.status == "duplicate" for o in lookalikes)
    recall, precision = _ratio(tp, len(twins)), _ratio(tp, tp + fp)
    recall_exact, precision_exact = _ratio(tp_exact, len(twins)), _ratio(tp_exact, tp_exact + fp_exact)
    truth_recall = _ratio(sum(o.truth in FOUND for o in twins), len(twins))

    for kind, t in by_kind.items():
        if kind in TWIN_KINDS:
            result.figure(f"{kind}: recall", "share", "higher").add(t.share(t.found))
            result.figure(f"{kind}: exact share", "share", "higher").add(t.share(t.duplicate))
        else:
            result.figure(f"{kind}: decided duplicate", "pairs").add(t.duplicate)
            result.figure(f"{kind}: suspected", "pairs").add(t.suspected)
    result.figure("overall: recall (duplicate or suspected)", "share", "higher").add(recall)
    result.figure("overall: precision (duplicate or suspected)", "share", "higher").add(precision)
    result.figure("overall: recall, exact only", "share", "higher").add(recall_exact)
    result.figure("overall: precision, exact only", "share", "higher").add(precision_exact)
    result.figure("overall: recall on true fields (no extraction)", "share", "higher").add(truth_recall)
    result.figure("render + extract per document", "ms").add(1000 * timer.extract_s / max(1, timer.documents))
    result.figure("database path per document", "ms").add(1000 * timer.database_s / max(1, timer.documents))

    result.tables.append(kind_table(by_kind))
    result.tables.append(
        "| overall | recall | precision | pairs |\n|---|---:|---:|---:|\n"
        f"| found (duplicate or suspected) | {_pct(recall)} | {_pct(precision)} | {len(twins)} twins, "
        f"{len(lookalikes)} look-alikes |\n"
        f"| exact (decided duplicate) only | {_pct(recall_exact)} | {_pct(precision_exact)} | |\n"
        f"| matcher on true fields (found) | {_pct(truth_recall)} | | |"
    )
    result.tables.append(variant_table(by_variant))

    worst = min(TWIN_KINDS, key=lambda k: by_kind[k].share(by_kind[k].found))
    for kind, goal in RECALL_GOALS.items():
        t = by_kind[kind]
        result.check(
            f"{kind}: recall ≥ {goal}",
            t.share(t.found) >= goal,
            f"{t.found}/{t.pairs} found ({t.duplicate} exact, {t.suspected} suspected)",
        )
    result.check(
        f"all twins: recall ≥ {OVERALL_RECALL_GOAL}",
        recall >= OVERALL_RECALL_GOAL,
        f"{tp}/{len(twins)} found ({tp_exact} exact); worst kind {worst} "
        f"({_pct(by_kind[worst].share(by_kind[worst].found))})",
    )
    result.check(
        "look-alikes decided duplicate: 0",
        fp_exact == 0,
        f"{fp_exact} of {len(lookalikes)} look-alikes rejected as exact duplicates; {fp - fp_exact} held as suspected",
    )
    unaccepted = sum(o.original.status != "original" for o in outcomes)
    result.check(
        "every original accepted as an original",
        unaccepted == 0,
        f"{unaccepted} originals were not decided 'original' (unreadable, quarantined or matched)",
        fatal=False,
    )

    result.notes.append(
        f"{len(pairs)} pairs, {timer.documents} documents in {elapsed:.0f} s: render + extract "
        f"{fmt(1000 * timer.extract_s / max(1, timer.documents))} ms and database path "
        f"{fmt(1000 * timer.database_s / max(1, timer.documents))} ms per document (means)."
    )
    result.notes.append(
        "Overall figures weigh every kind equally (the same number of pairs each); they describe this mix, "
        "not an inbox's."
    )
    result.notes.append(
        "Per-kind precision is trivial (every pair of a kind has the same label): 1 for a kind of twins "
        "that found any, 0 for a kind of look-alikes that flagged any. The overall table holds the real one."
    )
    ocr_truth_misses = sum(o.truth not in FOUND for o in twins if o.pair.kind == "ocr_number")
    if ocr_truth_misses:
        result.notes.append(
            f"ocr_number: {ocr_truth_misses} twins are missed by the matcher itself (on true fields too): "
            "number_skeleton, part of the blocking key, drops a confusable letter that starts a digit group "
            "as if it were a prefix ('INV-B7019' -> 7019) and reads a digit inside the prefix as a group "
            "('1NV-26137' -> 1-26137). Known gap, see test_known_ocr_gaps in "
            "invoice_pipeline_tests/samples/test_twins.py."
        )
    result.notes += [f"Error: {e}" for e in error_examples(outcomes)]
    result.plots.append(plot_outcomes(ctx.out_dir / f"{NAME}.png", by_kind))
    return result
