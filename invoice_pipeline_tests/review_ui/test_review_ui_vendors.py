"""The review page's "Who is paid" (/vendors, issue 37): a reviewer sees only their own orgs'
identity and vendors, and adds to their own org's profile only, with the CSRF token."""

from __future__ import annotations

import re

from invoice_pipeline.engine.store import InvoiceStore, VendorImportRow
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


def options(page: str) -> list[str]:
    """The orgs the Who is paid page offers to pick from (its select's enabled options)."""
    picker = page.split('<form method="get" action="/vendors" class="pick-org">', 1)[1].split("</form>", 1)[0]
    assert '<input name="org"' not in picker, "an org to be typed"
    return re.findall(r'<option value="([^"]*)"(?: selected)?>', picker)


def test_the_orgs_are_picked_from_a_list_of_the_reviewers_own(
    org_server: ReviewServer,  # noqa: F811
    review_server: ReviewServer,
) -> None:
    _import(org_server, "acme", "name,vat_id\nAcme Supplies GmbH,DE123456788\n")
    _import(org_server, "globex", "name,vat_id\nGlobex Secret Vendor Ltd,GB980780684\n")
    # alice's own org only, and "all of yours"; globex, which the database knows, is not offered.
    status, page = logged_in(org_server, "alice").get("/vendors")
    assert status == 200 and options(page) == ["", "acme"]
    # A reviewer allowed every org (local mode, over the same database) picks among the orgs the
    # database knows.
    assert review_server.database_url == org_server.database_url
    client = Client(review_server.base_url)
    status, page = client.get("/vendors")
    assert status == 200 and options(page) == ["acme", "globex"]
    assert "Acme Supplies GmbH" not in page  # nothing shown until one is picked
    status, page = client.get("/vendors?org=globex")
    assert options(page) == ["acme", "globex"] and '<option value="globex" selected>' in page
    assert "Globex Secret Vendor Ltd" in page and "Acme Supplies GmbH" not in page


def test_the_known_orgs_are_those_with_an_invoice_a_profile_or_a_vendor(store: InvoiceStore) -> None:
    assert store.vendors.known_orgs() == []
    for n, org in enumerate(["zeta", "acme", "zeta", "beta"]):
        store.documents.store_document(f'{{"invoice_number": "{n}"}}'.encode(), org, f"{n}.json")
    assert store.vendors.add_org_identity("profiled", "vat", "DE123456788", source="t", added_by="t")
    assert not store.vendors.import_vendors(
        "vendored", read_vendor_csv("name,vat_id\nGlobex Ltd,GB980780684\n"), "t"
    ).refused
    assert store.vendors.known_orgs() == ["acme", "beta", "profiled", "vendored", "zeta"]
    assert store.vendors.known_orgs(limit=2) == ["acme", "beta"]
