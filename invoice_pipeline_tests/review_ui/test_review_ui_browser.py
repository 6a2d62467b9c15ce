"""The review page in a real browser (Debian Chromium via Playwright): see, correct, decide."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from invoice_pipeline_tests.browser_setup import CHROMIUM, CHROMIUM_FLAGS
from invoice_pipeline_tests.engine.review.helpers import (
    decided_invoice,
    failure_messages,
    key_fields,
    run_batch,
    sql,
)
from invoice_pipeline_tests.engine.test_vendor_layouts_store import house_vendor, teach
from invoice_pipeline_tests.review_ui.conftest import ReviewServer
from invoice_pipeline_tests.review_ui.test_corrections import held_pdf
from invoice_pipeline_tests.tools import needs_tool

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = [
    pytest.mark.browser,
    needs_tool(
        "chromium", None if os.path.exists(CHROMIUM) else f"{CHROMIUM} is missing (make test installs it)"
    ),
]


@pytest.fixture
def browser() -> Any:
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            yield b
        finally:
            b.close()


def new_page(browser: Any) -> Any:
    page = browser.new_context(viewport={"width": 1500, "height": 1000}).new_page()
    page.set_default_timeout(30_000)
    return page


def test_open_a_held_pdf_see_its_boxes_correct_the_total_approve_and_it_is_posted_once(
    review_server: ReviewServer, browser: Any
) -> None:
    inv = held_pdf(review_server.database_url, review_server.store, "NW-2026-901")
    page = new_page(browser)
    page.goto(review_server.base_url + "/")
    page.get_by_role("link", name="currency_unknown").wait_for()
    page.screenshot(path=str(ARTIFACTS / "review-queue.png"), full_page=True)
    page.get_by_role("link", name="NW-2026-901").click()
    # The page image, with the evidence boxes drawn where the fields were read.
    page.locator("img[alt='this page 1']").wait_for()
    # Visible is not loaded: the page is rendered on its first request. The document's load event
    # waits for its images. (Not wait_for_function: under the page's CSP, Playwright's second
    # poll of a string predicate is an eval the policy refuses, so it failed whenever the image
    # was still being drawn at the first poll, as on a loaded machine.)
    page.wait_for_load_state("load")
    assert page.evaluate("document.querySelector(\"img[alt='this page 1']\").naturalWidth") > 500
    image = page.locator("img[alt='this page 1']").bounding_box()
    tops = {}
    for name in ("invoice_number", "payable_total", "issue_date"):
        assert page.locator(f".box[data-field='{name}']").count() >= 1, name
        # Drawn on the page where the value was read (a policy that blocked the boxes' inline
        # positions once stacked them all under the image).
        box = page.locator(f".box[data-field='{name}']").first.bounding_box()
        assert image is not None and box is not None
        assert image["x"] <= box["x"] and box["x"] + box["width"] <= image["x"] + image["width"] + 1, name
        assert image["y"] <= box["y"] and box["y"] + box["height"] <= image["y"] + image["height"] + 1, name
        tops[name] = box["y"]
    # The number and the date are printed above the totals.
    assert tops["invoice_number"] < tops["issue_date"] < tops["payable_total"], tops
    page.get_by_text("currency_unknown", exact=True).first.wait_for()
    page.screenshot(path=str(ARTIFACTS / "review-invoice.png"), full_page=True)

    page.fill("input[name=f_payable_total]", "119.00")
    page.fill("input[name=f_currency]", "EUR")
    page.get_by_role("button", name="Save corrections").click()
    page.locator(".flash.done").wait_for()
    assert "payable_total" in page.locator(".flash.done").inner_text()
    assert page.locator("#field-payable_total .value").inner_text() == "119.00"

    page.get_by_role("button", name="Approve").click()
    page.locator(".flash.done").wait_for()
    assert page.locator("#status").inner_text() == "pending"
    result = run_batch(review_server.database_url, [inv])
    assert result.success, failure_messages(result)
    assert sql(
        review_server.database_url,
        "SELECT amount, currency FROM ledger_postings WHERE invoice_id = %s",
        (inv,),
    ) == [(Decimal("119.00"), "EUR")]
    page.reload()
    assert "posted 119.00 EUR" in page.locator("#posted").inner_text()
    actions = sql(
        review_server.database_url,
        "SELECT action, actor FROM review_actions WHERE invoice_id = %s ORDER BY id",
        (inv,),
    )
    assert actions == [("correct", "review-ui:local:tester"), ("approve", "review-ui:local:tester")]


def test_confirm_a_suspected_duplicate_beside_its_original(review_server: ReviewServer, browser: Any) -> None:
    store = review_server.store
    original = decided_invoice(store, "acme", key_fields("INV-7100", "238.00"), "orig", None)
    copy = decided_invoice(store, "acme", key_fields("7100", "238.00"), "copy", None)
    page = new_page(browser)
    page.goto(f"{review_server.base_url}/invoice/{copy}")
    page.get_by_text("The suspected original").wait_for()
    assert page.locator("#field-invoice_number.differs").count() == 1
    page.screenshot(path=str(ARTIFACTS / "review-duplicate.png"), full_page=True)
    page.get_by_role("button", name="Confirm duplicate").click()
    page.locator(".flash.done").wait_for()
    assert sql(
        review_server.database_url,
        "SELECT status, duplicate_status, duplicate_of FROM invoices WHERE id = %s",
        (copy,),
    ) == [("processed", "duplicate", original)]


def test_reject_with_a_reason_and_a_second_tab_is_told_someone_decided(
    review_server: ReviewServer, browser: Any
) -> None:
    inv = decided_invoice(
        review_server.store, "acme", key_fields("INV-7200", "-50.00"), "neg", ["negative_total: x"]
    )
    first, second = new_page(browser), new_page(browser)
    for page in (first, second):
        page.goto(f"{review_server.base_url}/invoice/{inv}")
    first.fill("form.reject input[name=note]", "refund sent as an invoice")
    first.get_by_role("button", name="Reject").click()
    first.locator(".flash.done").wait_for()
    second.get_by_role("button", name="Approve").click()
    second.locator(".flash.conflict").wait_for()
    assert "Someone decided this meanwhile" in second.locator(".flash.conflict").inner_text()
    assert second.locator("#status").inner_text() == "processed"
    assert sql(
        review_server.database_url, "SELECT action, note FROM review_actions WHERE invoice_id = %s", (inv,)
    ) == [("reject", "refund sent as an invoice")]


def test_the_header_leads_to_the_vendor_layouts_and_a_layout_to_its_invoice(
    review_server: ReviewServer, browser: Any
) -> None:
    first, *_ = house_vendor()
    invoice = teach(review_server.store, "acme", first)
    [row] = review_server.store.layouts.list_layouts("acme")
    page = new_page(browser)
    page.goto(review_server.base_url + "/")
    page.get_by_role("link", name="Vendor layouts").click()
    page.locator(f"#layout-{row.id}").wait_for()
    assert page.locator("table.layouts tbody tr").count() == 1
    assert row.vendor_key in page.locator(f"#layout-{row.id}").inner_text()
    page.screenshot(path=str(ARTIFACTS / "review-layouts.png"), full_page=True)
    page.locator(f"#layout-{row.id} td.learnt a").click()
    page.locator("#status").wait_for()
    assert page.url == f"{review_server.base_url}/invoice/{invoice}"


def test_export_a_layout_from_the_page_and_import_it_into_another_org_through_the_form(
    review_server: ReviewServer, browser: Any
) -> None:
    store = review_server.store
    first, *_ = house_vendor()
    teach(store, "acme", first)
    [acme] = store.layouts.list_layouts("acme")
    page = new_page(browser)
    page.goto(review_server.base_url + "/layouts")
    with page.expect_download() as started:
        page.get_by_role("link", name="export its enabled layouts").click()
    download = started.value
    assert download.suggested_filename == "layouts-acme.json"
    text = Path(download.path()).read_text(encoding="utf-8")
    assert [layout["id"] for layout in json.loads(text)["layouts"]] == [acme.id]

    # Local mode may see every org: the org to import into is named in the form.
    form = page.locator("form.import-layouts")
    form.locator("input[name=org]").fill("globex")
    form.locator("textarea[name=layouts_json]").fill(text)
    form.get_by_role("button", name="Import layouts").click()
    page.locator(".flash.done").wait_for()
    [globex] = store.layouts.list_layouts("globex")
    assert (
        f"1 layout(s) imported into org globex: layouts {globex.id}"
        in page.locator(".flash.done").inner_text()
    )
    assert "imported" in page.locator(f"#layout-{globex.id} td.learnt").inner_text()
    assert globex.taught_by == "import by review-ui:local:tester (from org acme)"

    form = page.locator("form.import-layouts")
    form.locator("input[name=org]").fill("globex")
    form.locator("textarea[name=layouts_json]").fill("{not json")
    form.get_by_role("button", name="Import layouts").click()
    page.locator("#import-error").wait_for()
    assert "nothing imported: the export is not JSON" in page.locator("#import-error").inner_text()
    assert [row.id for row in store.layouts.list_layouts("globex", include_disabled=True)] == [globex.id]


def _box(page: Any, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, f"{selector} is not shown"
    return dict(found)


def _outline(page: Any, field: str) -> str:
    """The outline style of the field's box on this document's first page ("none" unless highlighted)."""
    style: str = page.locator(f"#this-page-1 .box[data-field='{field}']").first.evaluate(
        "el => getComputedStyle(el).outlineStyle"
    )
    return style


def test_the_fields_stand_beside_the_pages_and_the_box_of_the_field_under_the_cursor_stands_out(
    review_server: ReviewServer, browser: Any
) -> None:
    held_pdf(review_server.database_url, review_server.store, "NW-2026-902")
    page = new_page(browser)  # 1500 x 1000: a wide screen
    page.goto(review_server.base_url + "/")
    page.get_by_role("link", name="NW-2026-902").click()
    page.locator("img[alt='this page 1']").wait_for()
    page.wait_for_load_state("load")
    image = _box(page, "img[alt='this page 1']")
    fields = _box(page, "section.fields")
    total_input = _box(page, "input[name=f_payable_total]")
    # Beside, not after: the fields column starts right of the page image, level with it, and
    # the correction inputs are in view without scrolling past the pages.
    assert fields["x"] >= image["x"] + image["width"], (fields, image)
    assert fields["y"] < image["y"] + image["height"] and image["y"] < fields["y"] + fields["height"]
    assert total_input["x"] > image["x"] + image["width"]
    assert total_input["y"] + total_input["height"] <= 1000, "the correction input is below the fold"

    # Nothing highlighted until the cursor is on a field's row; then its box, and only its box.
    assert _outline(page, "payable_total") == "none"
    page.locator("#field-payable_total th").hover()
    assert _outline(page, "payable_total") == "solid"
    assert _outline(page, "invoice_number") == "none"
    total_box = _box(page, "#this-page-1 .box[data-field='payable_total']")
    assert (
        image["x"] <= total_box["x"]
        and total_box["x"] + total_box["width"] <= image["x"] + image["width"] + 1
    )
    page.screenshot(path=str(ARTIFACTS / "review-invoice-beside.png"))
    # Typing a correction highlights its field's box too (the keyboard's cursor).
    page.locator("input[name=f_invoice_number]").focus()
    page.mouse.move(0, 0)
    assert _outline(page, "invoice_number") == "solid"
    assert _outline(page, "payable_total") == "none"

    # On a narrow screen the fields follow the pages.
    page.set_viewport_size({"width": 900, "height": 1000})
    image = _box(page, "img[alt='this page 1']")
    fields = _box(page, "section.fields")
    assert fields["y"] >= image["y"] + image["height"], (fields, image)


def test_who_is_paid_offers_the_orgs_to_pick_from(review_server: ReviewServer, browser: Any) -> None:
    store = review_server.store
    assert store.vendors.add_org_identity("acme", "vat", "DE123456788", source="test", added_by="test")
    assert store.vendors.add_org_identity("globex", "vat", "FR40303265045", source="test", added_by="test")
    page = new_page(browser)
    page.goto(review_server.base_url + "/")
    page.get_by_role("link", name="Who is paid").click()
    # Local mode may see every org: the orgs the database knows are listed, none typed.
    picker = page.locator("form.pick-org select[name=org]")
    picker.wait_for()
    assert page.locator("form.pick-org input[name=org]").count() == 0
    assert picker.locator("option:not([disabled])").all_inner_texts() == ["acme", "globex"]
    picker.select_option("globex")
    page.locator("form.pick-org").get_by_role("button", name="Show").click()
    page.locator("#org-globex").wait_for()
    assert "FR40303265045" in page.locator("#org-globex .profile").inner_text()
    assert page.locator("#org-acme").count() == 0
