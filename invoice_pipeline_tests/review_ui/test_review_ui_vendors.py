"""The review page's "Who is paid" (/vendors, issue 37): a reviewer sees only their own orgs'
identity and vendors, and adds to their own org's profile only, with the CSRF token."""

from __future__ import annotations

from invoice_pipeline.engine.store import VendorImportRow
from invoice_pipeline.engine.vendors import read_vendor_csv
from invoice_pipeline_tests.review_ui.conftest import Client, ReviewServer, hidden
from invoice_pipeline_tests.review_ui.test_review_ui_layouts import logged_in, org_server  # noqa: F401


def _import(server: ReviewServer, org: str, csv_text: str) -> None:
    rows: list[VendorImportRow] = read_vendor_csv(csv_text)
    assert not server.store.vendors.import_vendors(org, rows, "test").refused


def test_vendors_page_shows_own_orgs_only_and_profile_edits_need_token_and_org(
    org_server: ReviewServer,  # noqa: F811
) -> None:
    store = org_server.store
    _import(org_server, "acme", "name,vat_id,iban\nAcme Supplies GmbH,DE123456788,DE89370400440532013000\n")
    _import(org_server, "globex", "name,vat_id\nGlobex Secret Vendor Ltd,GB980780684\n")
    alice = logged_in(org_server, "alice")
    status, page = alice.get("/vendors")
    assert status == 200 and "Acme Supplies GmbH" in page and "DE89370400440532013000" in page
    assert "Globex Secret Vendor" not in page and "GB980780684" not in page
    # Asking for another org by name shows nothing of it.
    status, page = alice.get("/vendors?org=globex")
    assert "Globex Secret Vendor" not in page
    token = hidden(page, "csrf")

    # No token: refused, nothing written.
    status, body = alice.post("/vendors/profile", {"org": "acme", "kind": "vat", "value": "FR40303265045"})
    assert status == 403
    # Her token, another org: refused as unknown.
    status, _ = alice.post(
        "/vendors/profile", {"org": "globex", "kind": "vat", "value": "FR40303265045", "csrf": token}
    )
    assert status == 404
    # The token alone, without her session: sent to log in.
    status, body = Client(org_server.base_url).post(
        "/vendors/profile", {"org": "acme", "kind": "vat", "value": "FR40303265045", "csrf": token}
    )
    assert "Log in" in body
    # An IBAN whose check digits fail: refused with the reason.
    status, body = alice.post(
        "/vendors/profile", {"org": "acme", "kind": "iban", "value": "DE89370400440532013001", "csrf": token}
    )
    assert status == 400 and "not a valid IBAN" in body
    assert not store.vendors.org_profiles(["acme"])["acme"].identifiers
    assert not store.vendors.org_profiles(["globex"])["globex"].identifiers

    # Her token, her org: added and shown.
    status, page = alice.post(
        "/vendors/profile", {"org": "acme", "kind": "vat", "value": "FR 403 032 650 45", "csrf": token}
    )
    assert status == 200 and "added to its profile" in page and "FR 403 032 650 45" in page
    assert store.vendors.org_profiles(["acme"])["acme"].has("vat", "FR40303265045")
    assert not store.vendors.org_profiles(["globex"])["globex"].identifiers
