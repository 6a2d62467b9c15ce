"""`/metrics` on the review page: the same scrape as `invoice-pipeline metrics`, served by the
real page over HTTP, without a login (a scraper has none) while every page still needs one."""

from __future__ import annotations

from invoice_pipeline_tests.review_ui.conftest import Client, ReviewServer
from pipeline_support.factories import json_invoice


def test_metrics_answer_without_login_while_the_pages_need_one(accounts_server: ReviewServer) -> None:
    accounts_server.store.documents.store_document(json_invoice("RM-1"), "acme", "rm-1.json")
    client = Client(accounts_server.base_url)
    status, body = client.get("/metrics")
    assert status == 200
    assert 'invoice_pipeline_invoices{status="pending"} 1.0' in body
    assert "# TYPE invoice_pipeline_stage_duration_seconds histogram" in body
    status, page = client.get("/")
    assert status != 200 or "login" in page.lower()
