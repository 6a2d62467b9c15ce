"""The UI as a person meets it: Debian Chromium driven by Playwright, with screenshots kept as artifacts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dagster import DagsterRunStatus
from dagster_graphql import DagsterGraphQLClient

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.browser_setup import CHROMIUM, CHROMIUM_FLAGS
from invoice_pipeline_tests.orchestration.ui.conftest import DevServer, hide_from_sensor
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import wait_for

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts"

pytestmark = [
    pytest.mark.browser,
    needs_tool(
        "chromium", None if os.path.exists(CHROMIUM) else f"{CHROMIUM} is missing (make test installs it)"
    ),
]


@pytest.fixture
def page():  # type: ignore[no-untyped-def]
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def test_lineage_page_renders_the_pipeline_assets(dev_server: DevServer, page) -> None:  # type: ignore[no-untyped-def]
    page.goto(dev_server.base_url + "/locations/invoice_pipeline/asset-groups/invoice_pipeline/lineage")
    for name in ("invoice_documents", "extracted_text", "invoice_fields", "approvals", "ledger_postings"):
        page.get_by_text(name, exact=True).first.wait_for()
    # The graph abbreviates long names in its nodes ("duplica…_decisions").
    page.get_by_text("_decisions").first.wait_for()
    for report in ("vendor_spend", "duplicate_report", "processing_latency"):
        page.get_by_text(report).first.wait_for()
    page.screenshot(path=str(ARTIFACTS / "lineage.png"), full_page=True)


def test_runs_page_filtered_by_invoice_tag_shows_its_run(
    dev_server: DevServer, dev_store: InvoiceStore, page
) -> None:  # type: ignore[no-untyped-def]
    inv = dev_store.documents.store_document(
        json_invoice("UI-7101", total="21.00"), "acme", "ui.json"
    ).invoice_id
    hide_from_sensor(dev_server.database_url, inv)
    gql = DagsterGraphQLClient("127.0.0.1", port_number=dev_server.port)
    run_id = gql.submit_job_execution(
        "process_invoice",
        run_config={"ops": {"start": {"config": {"invoice_id": str(inv)}}}},
        tags={"invoice_id": str(inv)},
    )
    wait_for(
        lambda: gql.get_run_status(run_id) == DagsterRunStatus.SUCCESS,
        timeout=240,
        interval=0.5,
        what="the run",
    )
    page.goto(f"{dev_server.base_url}/runs?q%5B0%5D=tag%3Ainvoice_id%3D{inv}")
    page.get_by_text(run_id[:8]).first.wait_for()
    page.screenshot(path=str(ARTIFACTS / "runs-by-invoice.png"), full_page=True)
    page.goto(f"{dev_server.base_url}/runs/{run_id}")
    page.get_by_text("process_chunk.extract_text").first.wait_for()
    page.screenshot(path=str(ARTIFACTS / "run-detail.png"), full_page=True)
