"""The review page's vendor layouts (issue 23): `/layouts`, `/layouts/{id}`, disabling one, and
exporting and importing them (`/layouts/export`, `/layouts/import`).

Layouts are made by the real engine: a person's correction of a page-read invoice teaches org
acme's layout (`engine.corrections.correct_invoice` after the real extract stage), and org
globex gets a copy through `engine.layouts.import_layouts`. Reviewers are limited to one org
each, by their account; nothing on the page takes the org from the request.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from invoice_pipeline.engine.layouts import MAX_IMPORT_LAYOUTS, export_layouts, import_layouts
from invoice_pipeline.engine.reviewers import Reviewer, hash_password
from invoice_pipeline.engine.store import InvoiceStore, LayoutRow
from invoice_pipeline.review_ui.auth import AuthConfig
from invoice_pipeline.review_ui.layouts import MAX_IMPORT_BYTES, MAX_IMPORT_FORM_BYTES
from invoice_pipeline_tests.engine.test_vendor_layouts_store import house_vendor, teach
from invoice_pipeline_tests.review_ui.conftest import PASSWORDS, Client, ReviewServer, hidden, serve


@pytest.fixture
def org_server(database_url: str, store: InvoiceStore, tmp_path: Path) -> Iterator[ReviewServer]:
    """Accounts limited to one org each: alice sees acme, bob sees globex."""
    orgs = {"alice": ("acme",), "bob": ("globex",)}
    users = {name: Reviewer(name, orgs[name], hash_password(pw)) for name, pw in PASSWORDS.items()}
    for url in serve(store, AuthConfig(users=users), tmp_path / "cache"):
        yield ReviewServer(url, store, database_url)


@dataclass
class TwoOrgs:
    acme: LayoutRow  # learnt from a correction of `invoice`
    globex: LayoutRow  # imported from acme's export
    invoice: UUID


def two_orgs(store: InvoiceStore) -> TwoOrgs:
    first, *_ = house_vendor()
    invoice = teach(store, "acme", first)
    [acme] = store.layouts.list_layouts("acme")
    [globex] = import_layouts(store, export_layouts(store, "acme"), "globex", "os-user:bob")
    assert acme.learnt_from == invoice and globex.learnt_from is None
    return TwoOrgs(acme, globex, invoice)


def rows_of(page: str) -> list[int]:
    """The layout ids the list page shows, in order."""
    return [int(n) for n in re.findall(r'<tr id="layout-(\d+)"', page)]


def logged_in(server: ReviewServer, name: str) -> Client:
    client = Client(server.base_url)
    client.login(name)
    return client


def test_each_reviewer_sees_only_their_orgs_layouts_with_the_invoice_it_was_learnt_from(
    org_server: ReviewServer,
) -> None:
    made = two_orgs(org_server.store)
    anonymous = Client(org_server.base_url)
    for path in ("/layouts", f"/layouts/{made.acme.id}"):
        _, page = anonymous.get(path)
        assert "Log in" in page and "vat:" not in page, path

    alice = logged_in(org_server, "alice")
    status, page = alice.get("/")
    assert status == 200 and '<a class="nav" href="/layouts">Vendor layouts</a>' in page
    status, page = alice.get("/layouts")
    assert status == 200
    assert rows_of(page) == [made.acme.id]
    row = page[page.index(f'<tr id="layout-{made.acme.id}"') :]
    row = row[: row.index("</tr>")]
    assert f'<a href="/invoice/{made.invoice}">{made.invoice}</a>' in row
    layout = made.acme.vendor_layout()
    assert made.acme.vendor_key in row and layout.seller_name and layout.seller_name in row
    assert f"{len(layout.rules)}: " in row
    assert all(f"<code>{rule.field}</code>" in row for rule in layout.rules)
    assert "enabled" in row and "os-user:alice" in row and "v1" in row
    # Neither globex's layout nor any trace of its org, even when asked by a query parameter.
    for path in ("/layouts", "/layouts?all=1", "/layouts?org=globex", "/layouts?all=1&org_id=globex"):
        _, page = alice.get(path)
        assert made.globex.id not in rows_of(page) and "globex" not in page and "imported" not in page, path

    # The detail page: rules, fingerprint size, provenance.
    status, page = alice.get(f"/layouts/{made.acme.id}")
    assert status == 200
    for rule in layout.rules:
        cells = re.search(rf'<tr id="rule-{re.escape(rule.field)}">(.*?)</tr>', page, re.S)
        assert cells, rule.field
        assert f"“{rule.anchor}”" in cells.group(1) and rule.relation in cells.group(1)
        assert f'<td class="num">{rule.dx}</td>' in cells.group(1)
    assert f"{len(layout.fingerprint)} stable word(s)" in page and len(layout.fingerprint) > 0
    assert f'<a href="/invoice/{made.invoice}">' in page
    assert '<form method="post" action="/layouts/' in page

    # Another org's layout, an unknown one and nonsense are all 404 with nothing of them shown.
    for path in (
        f"/layouts/{made.globex.id}",
        "/layouts/999999",
        "/layouts/abc",
        "/layouts/99999999999999999999",
    ):
        status, page = alice.get(path)
        assert status == 404 and "vat:" not in page, path

    # Bob sees globex's imported copy, marked imported, and not acme's.
    bob = logged_in(org_server, "bob")
    _, page = bob.get("/layouts")
    assert rows_of(page) == [made.globex.id]
    assert "imported" in page and str(made.invoice) not in page
    assert bob.get(f"/layouts/{made.acme.id}")[0] == 404
    assert bob.get(f"/layouts/{made.globex.id}")[0] == 200


def test_disable_needs_the_csrf_token_and_the_layouts_org_then_all_shows_it(
    org_server: ReviewServer,
) -> None:
    store = org_server.store
    made = two_orgs(store)
    alice = logged_in(org_server, "alice")
    _, page = alice.get(f"/layouts/{made.acme.id}")
    token = hidden(page, "csrf")

    # No token, or another session's token: refused, nothing written.
    status, body = alice.post(f"/layouts/{made.acme.id}/disable", {"reason": "forged"})
    assert status == 403 and "CSRF" in body
    # Another reviewer's session with alice's token: refused.
    status, body = logged_in(org_server, "bob").post(
        f"/layouts/{made.acme.id}/disable", {"reason": "forged", "csrf": token}
    )
    assert status == 403 and "CSRF" in body
    # Without a session of its own (the token alone): sent to log in.
    status, body = Client(org_server.base_url).post(
        f"/layouts/{made.acme.id}/disable", {"reason": "forged", "csrf": token}
    )
    assert "Log in" in body and "vat:" not in body
    # Alice's own valid token on globex's layout: not hers, refused as unknown.
    status, _ = alice.post(f"/layouts/{made.globex.id}/disable", {"reason": "not mine", "csrf": token})
    assert status == 404
    for row in (made.acme, made.globex):
        now = store.layouts.layout_row(row.id)
        assert now is not None and now.enabled and now.disabled_reason is None, row.id

    # With her token, on her org's layout: disabled, recorded with her name and the reason.
    status, page = alice.post(
        f"/layouts/{made.acme.id}/disable", {"reason": "vendor changed its template", "csrf": token}
    )
    assert status == 200 and f"layout {made.acme.id} disabled" in page
    assert '<b id="layout-state">disabled</b>' in page and "Disable this layout" not in page
    now = store.layouts.layout_row(made.acme.id)
    assert now is not None and not now.enabled
    assert now.disabled_reason == "disabled by review-ui:alice: vendor changed its template"
    assert store.layouts.enabled_layouts(["acme"]) == {"acme": []}
    # The same function as `review layouts disable`: globex's copy is untouched.
    globex = store.layouts.layout_row(made.globex.id)
    assert globex is not None and globex.enabled

    # The list shows enabled layouts by default; ?all=1 shows the disabled one and why.
    _, page = alice.get("/layouts")
    assert rows_of(page) == [] and "No vendor layouts enabled" in page
    _, page = alice.get("/layouts?all=1")
    assert rows_of(page) == [made.acme.id]
    assert "disabled" in page and "disabled by review-ui:alice: vendor changed its template" in page

    # Disabling again says so and changes nothing.
    status, page = alice.post(f"/layouts/{made.acme.id}/disable", {"reason": "again", "csrf": token})
    assert status == 200 and "is not enabled" in page
    again = store.layouts.layout_row(made.acme.id)
    assert again is not None and again.disabled_reason == now.disabled_reason


def hostile_export() -> dict[str, Any]:
    return {
        "format": "invoice-pipeline/vendor-layouts",
        "format_version": 1,
        "org_id": "elsewhere",
        "layouts": [
            {
                # The key itself is checked by the schema (vat:/iban:, letters and digits): the
                # strings a layout may hold are its names, fingerprint words and anchors.
                "vendor_key": "vat:GB999999973",
                "seller_name": "<script>alert(2)</script>\x1b[2J",
                "seller_vat_id": None,
                "currency": "EUR",
                "fingerprint": [["<img src=x onerror=alert(3)>", 4]],
                "rules": [
                    {
                        "field": "invoice_number",
                        "anchor": "<b>no</b>",
                        "anchor_col": 4,
                        "relation": "right",
                        "dx": 10,
                        "dy": 0,
                        "shape": None,
                        "dx_end": None,
                    }
                ],
                "enabled": True,
            }
        ],
    }


def test_the_layout_pages_escape_what_a_layout_holds(review_server: ReviewServer) -> None:
    [row] = import_layouts(review_server.store, hostile_export(), "acme", "os-user:<i>eve</i>")
    client = Client(review_server.base_url)  # local mode: every org
    _, listing = client.get("/layouts")
    assert rows_of(listing) == [row.id]
    for path in ("/layouts", f"/layouts/{row.id}"):
        status, page = client.get(path)
        assert status == 200, path
        assert "<script>alert" not in page and "<img src=x" not in page and "<b>no</b>" not in page
        assert "<i>eve</i>" not in page and "\x1b" not in page
        assert "&lt;script&gt;alert(2)" in page, path


# -- export and import --------------------------------------------------------------------------


def fetch(client: Client, path: str) -> tuple[int, dict[str, str], str]:
    """A GET with the response's headers (a download is judged by them too)."""
    try:
        with client.opener.open(client.base_url + path, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def post_bytes(client: Client, path: str, body: bytes) -> tuple[int, str]:
    """A POST of an already urlencoded body: bytes a browser would never send."""
    try:
        with client.opener.open(client.base_url + path, data=body, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def without_time(export: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in export.items() if k != "exported_at"}


def all_layouts(store: InvoiceStore) -> list[int]:
    return [row.id for row in store.layouts.list_layouts(None, include_disabled=True)]


def test_export_downloads_the_command_lines_json_of_the_reviewers_org_only(org_server: ReviewServer) -> None:
    store = org_server.store
    made = two_orgs(store)
    alice = logged_in(org_server, "alice")
    _, page = alice.get("/layouts")
    assert 'href="/layouts/export?org=acme"' in page and "org=globex" not in page

    status, headers, body = fetch(alice, "/layouts/export?org=acme")
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert headers["content-disposition"] == 'attachment; filename="layouts-acme.json"'
    assert headers["cache-control"] == "no-store"
    got = json.loads(body)
    assert without_time(got) == without_time(export_layouts(store, "acme"))
    assert [layout["id"] for layout in got["layouts"]] == [made.acme.id]
    # The text `review layouts export` writes.
    assert body == json.dumps(got, indent=2, ensure_ascii=False) + "\n"

    # Another org, however asked, is not found, and nothing of it is sent.
    for path in (
        "/layouts/export?org=globex",
        "/layouts/export?org=globex&all=1",
        "/layouts/export?org=acme&org=globex",
        "/layouts/export?org=",
        "/layouts/export",
    ):
        status, headers, body = fetch(alice, path)
        assert status == 404 and "vat:" not in body and "content-disposition" not in headers, path
    # Bob gets globex's and not acme's.
    bob = logged_in(org_server, "bob")
    assert fetch(bob, "/layouts/export?org=acme")[0] == 404
    status, _, body = fetch(bob, "/layouts/export?org=globex")
    assert status == 200 and [lay["id"] for lay in json.loads(body)["layouts"]] == [made.globex.id]
    # Without signing in: the login page.
    status, headers, body = fetch(Client(org_server.base_url), "/layouts/export?org=acme")
    assert "Log in" in body and "vat:" not in body and "content-disposition" not in headers

    # A disabled layout is exported only with all=1, as with --all.
    assert store.layouts.disable_layout(made.acme.id, "test: disabled", "acme")
    _, _, body = fetch(alice, "/layouts/export?org=acme")
    assert json.loads(body)["layouts"] == []
    _, _, body = fetch(alice, "/layouts/export?org=acme&all=1")
    assert [(lay["id"], lay["enabled"]) for lay in json.loads(body)["layouts"]] == [(made.acme.id, False)]


def test_a_reviewer_allowed_every_org_exports_any_with_a_safe_file_name(review_server: ReviewServer) -> None:
    store = review_server.store
    odd = 'we"ird/../org name'
    [row] = import_layouts(store, hostile_export(), odd, "os-user:eve")
    client = Client(review_server.base_url)  # local mode: every org
    _, page = client.get("/layouts")
    assert 'href="/layouts/export?org=we%22ird%2F..%2Forg+name"' in page
    status, headers, body = fetch(client, "/layouts/export?" + urllib.parse.urlencode({"org": odd}))
    assert status == 200 and [lay["id"] for lay in json.loads(body)["layouts"]] == [row.id]
    assert headers["content-disposition"] == 'attachment; filename="layouts-we_ird_.._org_name.json"'
    # Not an org id at all (control characters): not found.
    assert fetch(client, "/layouts/export?org=ac%0Ame")[0] == 404


def import_form(page: str, org: str, text: str) -> dict[str, str]:
    return {"csrf": hidden(page, "csrf"), "org": org, "layouts_json": text}


def test_import_a_pasted_export_into_the_reviewers_org_recorded_with_their_name(
    org_server: ReviewServer,
) -> None:
    store = org_server.store
    made = two_orgs(store)
    alice = logged_in(org_server, "alice")
    _, page = alice.get("/layouts")
    assert '<form method="post" action="/layouts/import"' in page
    assert '<option value="acme">acme</option>' in page and "globex" not in page
    before = all_layouts(store)

    text = json.dumps(export_layouts(store, "globex"), indent=2)
    status, page = alice.post("/layouts/import", import_form(page, "acme", text))
    assert status == 200
    [new] = [row for row in store.layouts.list_layouts("acme", include_disabled=True) if row.id not in before]
    assert f"1 layout(s) imported into org acme: layouts {new.id}" in page
    assert new.id in rows_of(page) and made.acme.id in rows_of(page)
    assert new.taught_by == "import by review-ui:alice (from org globex)" and new.learnt_from is None
    assert new.vendor_key == made.globex.vendor_key and new.version == made.acme.version + 1
    assert new.vendor_layout().rules == made.globex.vendor_layout().rules
    assert sorted(all_layouts(store)) == sorted([*before, new.id])
    # Globex is untouched.
    assert [row.id for row in store.layouts.list_layouts("globex", include_disabled=True)] == [made.globex.id]


def test_import_needs_the_csrf_token_and_one_of_the_reviewers_orgs(org_server: ReviewServer) -> None:
    store = org_server.store
    two_orgs(store)
    before = all_layouts(store)
    text = json.dumps(export_layouts(store, "acme"))
    alice = logged_in(org_server, "alice")
    _, page = alice.get("/layouts")
    form = import_form(page, "acme", text)

    status, body = alice.post("/layouts/import", {**form, "csrf": ""})
    assert status == 403 and "CSRF" in body
    status, body = alice.post("/layouts/import", {k: v for k, v in form.items() if k != "csrf"})
    assert status == 403 and "CSRF" in body
    status, body = alice.post("/layouts/import", {**form, "csrf": "é" + form["csrf"][1:]})
    assert status == 403 and "CSRF" in body
    status, body = logged_in(org_server, "bob").post("/layouts/import", {**form, "org": "globex"})
    assert status == 403 and "CSRF" in body
    status, body = Client(org_server.base_url).post("/layouts/import", form)
    assert "Log in" in body
    # Her own token, another org (or none): not found.
    for org in ("globex", "", "acme ", "ACME"):
        status, body = alice.post("/layouts/import", {**form, "org": org})
        assert status == 404 and "nothing imported" in body, org
    status, body = alice.post("/layouts/import", {k: v for k, v in form.items() if k != "org"})
    assert status == 404
    assert all_layouts(store) == before


def with_dx(export: dict[str, Any], dx: Any) -> dict[str, Any]:
    """The export's first layout with its first rule's dx set to `dx`."""
    layout = export["layouts"][0]
    return layout | {"rules": [layout["rules"][0] | {"dx": dx}, *layout["rules"][1:]]}


def test_import_refuses_what_is_not_an_export_on_the_page_and_imports_nothing(
    org_server: ReviewServer,
) -> None:
    store = org_server.store
    made = two_orgs(store)
    before = all_layouts(store)
    alice = logged_in(org_server, "alice")
    _, page = alice.get("/layouts")
    good = export_layouts(store, "globex")
    bad_key = hostile_export()["layouts"][0] | {"vendor_key": "<script>alert(1)</script>"}
    cases = {
        "{not json": "the export is not JSON",
        "[1, 2]": "not a vendor layout export (the JSON is not an object)",
        "   ": "no export was pasted",
        json.dumps(good | {"format": "something/else"}): "not a vendor layout export (format must be",
        json.dumps(good | {"format_version": 2}): "unsupported format_version 2",
        json.dumps(
            good | {"layouts": {"a": 1}}
        ): "refused at $.layouts: {&#39;a&#39;: 1} is not of type &#39;array&#39;",
        # A good layout first: the bad one after it still refuses the whole file.
        json.dumps(good | {"layouts": [*good["layouts"], bad_key]}): (
            "refused at $.layouts[1].vendor_key: &#39;&lt;script&gt;alert(1)&lt;/script&gt;&#39; does not match"
        ),
        # Numbers JSON has no word for, which Python reads anyway (issue 41): a 400 saying where.
        json.dumps(
            good | {"layouts": [with_dx(good, float("inf"))]}
        ): "refused at $.layouts[0].rules[0].dx: not a finite number",
        json.dumps(good | {"layouts": [with_dx(good, 7654321)]}).replace("7654321", "1e999"): (
            "refused at $.layouts[0].rules[0].dx: not a finite number"
        ),
        json.dumps(
            good | {"layouts": [with_dx(good, float("nan"))]}
        ): "refused at $.layouts[0].rules[0].dx: not a finite number",
        # "false" is a string, and a string is true: only a JSON boolean says enabled.
        json.dumps(good | {"layouts": [good["layouts"][0] | {"enabled": "false"}]}): (
            "refused at $.layouts[0].enabled: &#39;false&#39; is not of type &#39;boolean&#39;"
        ),
        # More vendors than one import may lock (the shared lock table holds ~6,400).
        json.dumps(good | {"layouts": [good["layouts"][0]] * (MAX_IMPORT_LAYOUTS + 1)}): (
            "refused at $.layouts: the value breaks the schema&#39;s maxItems 1000"
        ),
        json.dumps(good | {"layouts": [*good["layouts"], "a string"]}): (
            "refused at $.layouts[1]: &#39;a string&#39; is not of type &#39;object&#39;"
        ),
        json.dumps(good | {"layouts": [good["layouts"][0] | {"rules": [{"field": "x"}]}]}): (
            "refused at $.layouts[0].rules[0]"
        ),
        # Valid JSON the database refuses (jsonb holds no NUL), after a layout it stored.
        json.dumps(
            good
            | {
                "layouts": [
                    *good["layouts"],
                    good["layouts"][0] | {"vendor_key": "vat:ZZ999999", "seller_name": "A\u0000B"},
                ]
            }
        ): ("the database refused a layout of the export"),
        "[" * 100_000 + "]" * 100_000: "nested too deeply",
        json.dumps(good) + " " * MAX_IMPORT_BYTES: "larger than 2 MiB",
    }
    for text, reason in cases.items():
        status, body = alice.post("/layouts/import", import_form(page, "acme", text))
        assert status == 400, reason
        assert "nothing imported: " in body and reason in body, (reason, body[:2000])
        assert "<script>alert" not in body
        assert rows_of(body) == [made.acme.id], reason  # the page, with its list
    # Bytes that are not UTF-8 (a browser sends UTF-8; another client might not).
    body_bytes = urllib.parse.urlencode(import_form(page, "acme", "")).encode() + b'"%FF%FE{}"'
    status, body = post_bytes(alice, "/layouts/import", body_bytes)
    assert status == 400 and "nothing imported: the export is not UTF-8 text" in body
    # Larger than the form can be: refused while it is read.
    form = import_form(page, "acme", "x")
    status, body = alice.post("/layouts/import", form | {"layouts_json": " " * (MAX_IMPORT_FORM_BYTES + 1)})
    assert status == 413 and "larger than" in body
    assert all_layouts(store) == before
