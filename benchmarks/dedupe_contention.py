"""dedupe_contention: duplicate decisions under contention, on the product's own path.

8 processes decide N invoices with `invoice_pipeline.engine.dedupe.decide_duplicate` — the store's
fenced transaction, advisory locks, candidate query by blocking key, the matcher — exactly as
the `detect_duplicates` stage does. 30% of the invoices copy an earlier one (exact re-sends,
reformatted numbers, the VAT id without its country prefix, the seller by name only, a cent of
rounding), placed a few positions after it, so with round-robin distribution a copy and its
original are decided by different processes at about the same time.

The variants differ only in the lock set the store takes (the benchmark swaps the function the
store derives it with, in its worker processes):

- blocking_keys: the product's locks, derived from the match rule (domain/keys.py);
- global: one advisory lock for every decision;
- no_lock: no lock at all (the race the others exist to prevent).

The unique index invoices_one_original_per_key (the production backstop) is replaced in this
database by a non-unique index with the same definition, so a lost race shows up as a counted
misclassification (a copy decided 'original') instead of an error.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

import invoice_pipeline.engine.store.dedupe as store_module  # the part that computes decision locks
from benchmarks.datasets import invoice_fields
from benchmarks.harness import (
    BenchContext,
    BenchResult,
    Gang,
    WorkerContext,
    cell,
    pivot,
    plot_bars,
    register,
)
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import BlockingKey, NumberKey, decision_lock_ids
from invoice_pipeline.engine.dedupe import decide_duplicate
from invoice_pipeline.engine.store import InvoiceStore

NAME = "dedupe_contention"
PROCESSES = 8
ORG = "acme"
DUPLICATE_SHARE = 0.3
VARIANTS = ("blocking_keys", "global", "no_lock")
# One lock for every decision in the "global" variant: any fixed 64-bit number.
GLOBAL_LOCK_ID = 0x0DED_0BE0_0000_0001

SWAP_BACKSTOP = """
DROP INDEX invoices_one_original_per_key;
CREATE INDEX bench_originals_by_key
    ON invoices (org_id, business_key, payable_total, currency, block_key) WHERE duplicate_status = 'original';
"""
OUTCOME = """
SELECT count(*) FILTER (WHERE duplicate_status IS NULL),
       count(*) FILTER (WHERE duplicate_status = 'original'),
       count(*) FILTER (WHERE duplicate_status = 'duplicate'),
       count(*) FILTER (WHERE duplicate_status = 'suspected')
FROM invoices
"""


def _global(_: BlockingKey | None, __: NumberKey) -> tuple[int, ...]:
    return (GLOBAL_LOCK_ID,)


def _none(_: BlockingKey | None, __: NumberKey) -> tuple[int, ...]:
    return ()


LOCKS = {"blocking_keys": decision_lock_ids, "global": _global, "no_lock": _none}


@dataclass(frozen=True)
class Spec:
    """One invoice of the run: its fields and the family (original and copies) it belongs to."""

    family: int
    fields: InvoiceFields


def _copy_of(rng: random.Random, f: InvoiceFields) -> InvoiceFields:
    number = f.invoice_number or ""
    digits = number.split("-")[1]
    variant = rng.randrange(5)
    if variant == 0:
        return f  # an exact re-send
    if variant == 1:
        return invoice_fields(
            f"INV {int(digits)}",
            seller=f.seller_name or "",
            vat=f.seller_vat_id,
            total=f.payable_total or Decimal(0),
        )
    if variant == 2:
        return invoice_fields(
            number,
            seller=f.seller_name or "",
            vat=(f.seller_vat_id or "")[2:],
            total=f.payable_total or Decimal(0),
        )
    if variant == 3:
        return invoice_fields(
            digits, seller=(f.seller_name or "").upper(), vat=None, total=f.payable_total or Decimal(0)
        )
    return invoice_fields(
        number,
        seller=f.seller_name or "",
        vat=f.seller_vat_id,
        total=(f.payable_total or 0) + Decimal("0.01"),
    )


def build_spec(n: int, seed: int = 2026) -> list[Spec]:
    """Originals with their copies placed 0.5-6 positions after them."""
    rng = random.Random(seed)
    n_dup = round(n * DUPLICATE_SHARE)
    n_orig = n - n_dup
    originals = [
        invoice_fields(
            f"INV-{k:06d}",
            seller=f"Vendor {k % 97} GmbH",
            vat=f"DE{100_000_000 + k % 97}",
            total=Decimal(100 + k % 900) + Decimal("0.50"),
        )
        for k in range(n_orig)
    ]
    placed: list[tuple[float, int, InvoiceFields]] = [(float(k), k, f) for k, f in enumerate(originals)]
    for k in (rng.randrange(n_orig) for _ in range(n_dup)):
        placed.append((k + rng.uniform(0.5, 6.0), k, _copy_of(rng, originals[k])))
    placed.sort(key=lambda p: p[0])
    return [Spec(k, f) for _, k, f in placed]


def decide_task(w: WorkerContext, *, variant: str, items: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    store_module.decision_lock_ids = LOCKS[variant]  # type: ignore[assignment]  # the only difference
    store = InvoiceStore(w.url, min_size=1, max_size=1)
    try:
        work = []
        for invoice_id, fields in items:
            lease = store.claims.acquire(invoice_id, 1)
            assert lease is not None
            work.append((lease, InvoiceFields.from_json(fields)))
        t0 = w.start_together()
        for lease, parsed in work:
            decide_duplicate(store, lease, ORG, parsed)
        t1 = time.monotonic()
    finally:
        store.close()
        store_module.decision_lock_ids = decision_lock_ids
    return {"start": t0, "end": t1}


def _families_with_extra_originals(conn: psycopg.Connection[Any], families: dict[str, int]) -> int:
    originals: dict[int, int] = {}
    for (invoice_id,) in conn.execute("SELECT id::text FROM invoices WHERE duplicate_status = 'original'"):
        family = families[invoice_id]
        originals[family] = originals.get(family, 0) + 1
    return sum(n - 1 for n in originals.values())


@register(NAME, "duplicate decisions under contention, product path: blocking-key locks vs one global lock")
def run(ctx: BenchContext) -> BenchResult:
    n = ctx.pick(1_000, 10_000)
    rounds = ctx.pick(2, 3)
    result = BenchResult(
        NAME,
        f"{PROCESSES} processes decide original/duplicate/suspected for {n:,} invoices "
        f"({DUPLICATE_SHARE:.0%} copies of an earlier invoice, exact and fuzzy) through "
        "decide_duplicate; only the lock set differs.",
        params={
            "processes": PROCESSES,
            "invoices": n,
            "duplicates": f"{DUPLICATE_SHARE:.0%}",
            "rounds": rounds,
        },
    )
    spec = build_spec(n)
    expected_originals = len({s.family for s in spec})
    url = ctx.database(NAME)
    bad: dict[str, int] = dict.fromkeys(VARIANTS, 0)
    with psycopg.connect(url, autocommit=True) as conn, Gang(PROCESSES, url) as gang:
        conn.execute(SWAP_BACKSTOP)
        for r in range(rounds):
            for variant in VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]:
                conn.execute("TRUNCATE invoices, processing_jobs, duplicate_groups CASCADE")
                families: dict[str, int] = {}
                items: list[tuple[str, dict[str, Any]]] = []
                for s in spec:
                    row = conn.execute(
                        "INSERT INTO invoices (org_id, fields) VALUES (%s, %s) RETURNING id::text",
                        (ORG, Jsonb(s.fields.to_json())),
                    ).fetchone()
                    assert row is not None
                    families[row[0]] = s.family
                    items.append((row[0], s.fields.to_json()))
                conn.execute("VACUUM ANALYZE invoices")
                out = gang.run(
                    decide_task,
                    [{"variant": variant, "items": items[i::PROCESSES]} for i in range(PROCESSES)],
                )
                elapsed = max(o["end"] for o in out) - min(o["start"] for o in out)
                outcome = conn.execute(OUTCOME).fetchone()
                assert outcome is not None
                undecided, originals, duplicates, suspected = (int(x) for x in outcome)
                if undecided:
                    raise AssertionError(f"{variant}: {undecided} invoices left undecided")
                extra = _families_with_extra_originals(conn, families)
                result.figure(f"{variant}: decisions/s", "decisions/s", "higher").add(n / elapsed)
                result.figure(f"{variant}: misclassified (extra originals)", "invoices").add(extra)
                result.figure(f"{variant}: exact duplicates", "invoices").add(duplicates)
                result.figure(f"{variant}: suspected", "invoices").add(suspected)
                if variant != "no_lock" and originals != expected_originals:
                    raise AssertionError(f"{variant}: {originals} originals, expected {expected_originals}")
                bad[variant] += extra
    speedup = result.ratio(
        "blocking_keys / global decisions/s", "blocking_keys: decisions/s", "global: decisions/s"
    )
    result.check(
        "blocking keys: zero misclassifications",
        bad["blocking_keys"] == 0,
        f"{bad['blocking_keys']} extra originals over {rounds} rounds of {n:,} decisions",
    )
    result.check(
        "global lock: zero misclassifications",
        bad["global"] == 0,
        f"{bad['global']} extra originals over {rounds} rounds",
    )
    ceiling = result.ratio("no_lock / global decisions/s", "no_lock: decisions/s", "global: decisions/s")
    result.ratio("blocking_keys / no_lock decisions/s", "blocking_keys: decisions/s", "no_lock: decisions/s")
    # The target. Not fatal: no lock at all bounds every strategy, and on a 2-core machine
    # the decisions are CPU-bound, so no_lock / global (the ceiling) can be below 3.
    result.check(
        "blocking keys reach at least 3x the throughput of one global lock",
        speedup.median >= 3.0,
        f"median ratio {speedup.median:.2f}; the ceiling, no lock at all, reached {ceiling.median:.2f}x",
        fatal=False,
    )
    result.notes.append(
        (
            f"no_lock misclassified {bad['no_lock']} invoices in total over {rounds} rounds: the race is real; "
            "in production the unique index would catch the exact ones as a failed step, but not the fuzzy ones."
        )
        if bad["no_lock"]
        else (
            f"no_lock did NOT misclassify anything in {rounds} rounds of {n:,} decisions on this machine; the "
            "race is still possible (the race tests in test_dedupe.py force it with a barrier)."
        )
    )
    cols = ["decisions/s", "misclassified (extra originals)", "exact duplicates", "suspected"]
    result.tables.append(pivot("variant", VARIANTS, cols, lambda v, c: cell(result.find(f"{v}: {c}"))))
    result.plots.append(
        plot_bars(
            ctx.out_dir / "dedupe_contention.png",
            f"Duplicate decisions/s, {PROCESSES} processes, {n:,} invoices (product path)",
            "decisions/s",
            {v: result.get(f"{v}: decisions/s") for v in VARIANTS},
        )
    )
    return result
