"""dedupe_scaling: the time of one duplicate decision against the size of the org.

The candidate search reads originals by blocking key through an index, with no LIMIT (see
domain/keys.py). Its cost must not grow with the org: this benchmark fills one org with N
decided originals — half of them from ONE vendor, and a tenth of them with ONE amount, the
shapes that used to hide matches behind a LIMIT 200 — then decides a fixed set of new invoices
(a third of them copies of random originals, exact and fuzzy) through the product's
decide_duplicate, and records each decision's latency and how many candidates it read.
"""

from __future__ import annotations

import random
import time
from decimal import Decimal

import psycopg
from psycopg.types.json import Jsonb

from benchmarks.datasets import insert_decided_originals, invoice_fields
from benchmarks.harness import (
    BenchContext,
    BenchResult,
    index_names,
    nested_plans,
    percentile,
    plot_lines,
    register,
)
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.keys import lock_ids, search_ids
from invoice_pipeline.domain.matching import MatchCandidate
from invoice_pipeline.engine.dedupe import decide_duplicate
from invoice_pipeline.engine.store import InvoiceStore

NAME = "dedupe_scaling"
ORG = "acme"
BIG_VENDOR = ("Acme Supplies GmbH", "DE123456789")
ONE_AMOUNT = Decimal("777.70")


def originals(n: int, rng: random.Random) -> list[InvoiceFields]:
    out = []
    for k in range(n):
        seller, vat = BIG_VENDOR if k % 2 == 0 else (f"Vendor {k % 500} Ltd", f"GB{200_000_000 + k % 500}")
        total = ONE_AMOUNT if k % 10 == 1 else Decimal(rng.randint(1_000, 5_000_000)) / 100
        out.append(invoice_fields(f"INV-{k:07d}", seller=seller, vat=vat, total=total))
    return out


def new_invoices(pool: list[InvoiceFields], m: int, rng: random.Random) -> list[InvoiceFields]:
    """m invoices to decide: a third copy an original (exact, renumbered, or by name only)."""
    out = []
    for i in range(m):
        if i % 3 == 0:
            f = rng.choice(pool)
            number = f.invoice_number or ""
            variant = i % 9
            if variant == 0:
                out.append(f)
            elif variant == 3:
                out.append(
                    invoice_fields(
                        number.split("-")[1],
                        seller=f.seller_name or "",
                        vat=f.seller_vat_id,
                        total=f.payable_total or Decimal(0),
                    )
                )
            else:
                out.append(
                    invoice_fields(
                        number,
                        seller=(f.seller_name or "").upper(),
                        vat=None,
                        total=f.payable_total or Decimal(0),
                    )
                )
        else:
            seller, vat = BIG_VENDOR if i % 2 else ("Someone New BV", "NL999999999B01")
            total = ONE_AMOUNT if i % 5 == 0 else Decimal(rng.randint(1_000, 5_000_000)) / 100
            out.append(invoice_fields(f"NEW-{i:06d}", seller=seller, vat=vat, total=total))
    return out


@register(NAME, "one duplicate decision's latency against org size (1k..100k originals): it stays flat")
def run(ctx: BenchContext) -> BenchResult:
    sizes = ctx.pick([1_000, 10_000], [1_000, 10_000, 100_000])
    m = ctx.pick(150, 600)
    result = BenchResult(
        NAME,
        f"{m} decisions through decide_duplicate in orgs of {', '.join(f'{s:,}' for s in sizes)} decided "
        "originals (half of one vendor, a tenth of one amount).",
        params={"sizes": sizes, "decisions_per_size": m},
    )
    p95s: list[float] = []
    for size in sizes:
        rng = random.Random(size)
        url = ctx.database(f"{NAME}_{size}")
        pool = originals(size, rng)
        insert_decided_originals(url, ORG, pool)
        todo = new_invoices(pool, m, rng)
        store = InvoiceStore(url, max_size=1)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE invoices")
            leases = []
            for f in todo:
                row = conn.execute(
                    "INSERT INTO invoices (org_id, fields) VALUES (%s, %s) RETURNING id",
                    (ORG, Jsonb(f.to_json())),
                ).fetchone()
                assert row is not None
                lease = store.claims.acquire(row[0], 1)
                assert lease is not None
                leases.append((lease, f))
            latencies = []
            for lease, f in leases:
                t0 = time.perf_counter()
                decide_duplicate(store, lease, ORG, f)
                latencies.append((time.perf_counter() - t0) * 1000)
            statuses: dict[str, int] = dict(
                conn.execute(
                    "SELECT duplicate_status, count(*) FROM invoices WHERE fields IS NOT NULL AND id = ANY(%s) GROUP BY 1",
                    ([lease.invoice_id for lease, _ in leases],),
                ).fetchall()
            )
            probe = MatchCandidate.from_fields(str(leases[0][0].invoice_id), ORG, todo[0])
            with nested_plans(conn) as plans:
                found = conn.execute(
                    "SELECT count(*) FROM locked_duplicate_candidates(%s, %s, %s, %s)",
                    (list(lock_ids(probe.block)), ORG, probe.invoice_id, list(search_ids(probe.block))),
                ).fetchone()
            inner = next((p for p in plans if "invoices" in p), "")
        store.close()
        ctx.server.drop_database(url)
        result.figure(f"{size:,} originals: decision latency p50", "ms").add(percentile(latencies, 50))
        result.figure(f"{size:,} originals: decision latency p95", "ms").add(percentile(latencies, 95))
        result.figure(f"{size:,} originals: copies found", "invoices", "higher").add(
            statuses.get("duplicate", 0) + statuses.get("suspected", 0)
        )
        result.explains[
            f"candidate search in an org of {size:,} (read {found[0] if found else '?'} rows)"
        ] = inner
        if "invoices_originals_by_block" not in " ".join(index_names(inner)):
            result.check(f"{size:,}: candidate search uses the block index", False, inner[:500])
        p95s.append(percentile(latencies, 95))
    growth = p95s[-1] / p95s[0]
    result.check(
        "decision latency stays flat (p95 at the largest org within 2x of the smallest)",
        growth <= 2.0,
        f"p95 {p95s[0]:.2f} ms at {sizes[0]:,} -> {p95s[-1]:.2f} ms at {sizes[-1]:,} ({growth:.2f}x)",
    )
    expected_copies = len([i for i in range(m) if i % 3 == 0])
    for size in sizes:
        found_copies = result.get(f"{size:,} originals: copies found").median
        result.check(
            f"{size:,}: every copy found",
            found_copies == expected_copies,
            f"{found_copies:.0f} of {expected_copies}",
        )
    result.plots.append(
        plot_lines(
            ctx.out_dir / "dedupe_scaling.png",
            "Duplicate decision latency vs org size",
            "decided originals in the org",
            "ms per decision",
            {
                q: (sizes, [result.get(f"{s:,} originals: decision latency {q}") for s in sizes])
                for q in ("p50", "p95")
            },
            logx=True,
        )
    )
    return result
