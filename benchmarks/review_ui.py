"""The review page's server time: the queue with 10,000 held invoices (< 300 ms) and one invoice
page with its page image rendered (< 500 ms; then served from the cache).

Held invoices are inserted directly (the page reads them, it does not care how they got there),
plus one real text PDF for the invoice page. Requests go over HTTP to a real uvicorn server in
this process; "server time" is the request's wall time on loopback.
"""

from __future__ import annotations

import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psycopg
import uvicorn

from benchmarks.harness import BenchContext, BenchResult, Check, Figure, register
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.review_ui.app import create_app
from invoice_pipeline.review_ui.auth import AuthConfig
from pipeline_support.helpers import free_port

QUEUE_TARGET_MS = 300.0
INVOICE_TARGET_MS = 500.0

SEED = """
INSERT INTO invoices (org_id, status, invoice_number, seller_name, payable_total, currency, fields,
                      review_reasons, duplicate_status, review_since)
SELECT 'org-' || (g %% 7), 'needs_review', 'INV-' || g, 'Seller ' || (g %% 300), g %% 997 + 0.5, 'EUR',
       jsonb_build_object('invoice_number', 'INV-' || g, 'payable_total', (g %% 997 + 0.5)::text, 'currency', 'EUR'),
       ARRAY[(ARRAY['negative_total: x', 'amount_unconfirmed: y', 'currency_unknown: z',
                    'over_approval_limit: w'])[1 + g %% 4]],
       'original', now() - make_interval(mins => g)
FROM generate_series(1, %(n)s) AS g
"""


def _get(url: str) -> tuple[float, bytes]:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
    return (time.perf_counter() - began) * 1000, body


@register(
    "review_ui", "The review page: queue of 10,000 held invoices, and an invoice page with its rendered page"
)
def run(ctx: BenchContext) -> BenchResult:
    from invoice_pipeline.samples.page_layouts import page_cases, page_pdf

    held = ctx.pick(2_000, 10_000)
    rounds = ctx.pick(5, 20)
    url = ctx.database("review_ui")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SEED, {"n": held})
        conn.execute("ANALYZE invoices")
    store = InvoiceStore(url, max_size=4)
    pdf_id = store.documents.store_document(page_pdf(page_cases(3, 1)[0]), "org-1", "bench.pdf").invoice_id
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "UPDATE invoices SET status = 'needs_review', review_reasons = ARRAY['amount_unconfirmed: bench'] WHERE id = %s",
            (pdf_id,),
        )
    port = free_port()
    cache = Path(tempfile.mkdtemp(prefix="review-ui-bench-"))
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(store, AuthConfig(local_user="bench"), cache),
            host="127.0.0.1",
            port=port,
            log_level="warning",
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{port}"
    queue, filtered, deep, first_invoice, invoice, image_first, image_cached = ([] for _ in range(7))
    try:
        _get(base + "/")  # warm the pool
        for _ in range(rounds):
            queue.append(_get(base + "/")[0])
            filtered.append(_get(base + "/?reason=amount_unconfirmed&org=org-3&age=1h")[0])
            deep.append(_get(base + f"/?offset={held - 60}")[0])
        # First view of the invoice: the page sizes and image are rendered now (cold cache).
        ms, _ = _get(f"{base}/invoice/{pdf_id}")
        first_invoice.append(ms)
        ms, _ = _get(f"{base}/invoice/{pdf_id}/page/1.png")
        image_first.append(ms)
        for _ in range(rounds):
            invoice.append(_get(f"{base}/invoice/{pdf_id}")[0])
            image_cached.append(_get(f"{base}/invoice/{pdf_id}/page/1.png")[0])
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()
    cold = first_invoice[0] + image_first[0]
    result = BenchResult(
        "review_ui",
        "The review page's server time over loopback HTTP",
        params={"held_invoices": held, "rounds": rounds},
        figures=[
            Figure("queue page (first 50, counts per reason)", "ms", queue),
            Figure("queue page filtered by reason, org and age", "ms", filtered),
            Figure("queue page, last page (offset)", "ms", deep),
            Figure("invoice page + page image, first view (renders)", "ms", [cold]),
            Figure("invoice page, cached page sizes", "ms", invoice),
            Figure("page image from the cache", "ms", image_cached),
        ],
    )
    result.checks.append(
        Check(
            f"queue page < {QUEUE_TARGET_MS:g} ms (median)",
            sorted(queue)[len(queue) // 2] < QUEUE_TARGET_MS,
            f"median {sorted(queue)[len(queue) // 2]:.1f} ms with {held} held",
            fatal=False,
        )
    )
    result.checks.append(
        Check(
            f"invoice page with rendering < {INVOICE_TARGET_MS:g} ms",
            cold < INVOICE_TARGET_MS,
            f"first view {cold:.1f} ms (page {first_invoice[0]:.1f} + image {image_first[0]:.1f})",
            fatal=False,
        )
    )
    return result
