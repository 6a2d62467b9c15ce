"""`invoice-pipeline review layouts ...` as a person runs it: learn from a posted invoice, list,
show, export, import into another organisation, disable (issue 23)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.vendor_series import vendor_series
from invoice_pipeline_tests.engine.test_vendor_layouts_store import run
from pipeline_support.helpers import run_cli


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return dict(
        os.environ,
        INVOICE_PIPELINE_HOME=str(tmp_path),
        INVOICE_PIPELINE_DATABASE_URL=database_url,
        USER="alice",
    )


def test_learn_list_show_export_import_disable(
    env: dict[str, str], store: InvoiceStore, tmp_path: Path
) -> None:
    plain = next(v.invoices for v in vendor_series(11, 8, 4) if not v.house_labels)
    [posted] = run(store, "acme", [plain[0]])
    [held] = run(store, "acme", [next(v.invoices for v in vendor_series(11, 8, 4) if v.house_labels)[0]])

    refused = run_cli("review", "layouts", "learn", str(held), env=env)
    assert refused.returncode == 1 and "correct or approve it" in refused.stdout, refused.stdout

    learnt = run_cli("review", "layouts", "learn", str(posted), env=env)
    assert learnt.returncode == 0, learnt.stderr
    assert learnt.stdout.startswith("learnt: ")
    [row] = store.layouts.list_layouts("acme")
    assert row.learnt_from == posted and row.taught_by.endswith("alice")

    listed = run_cli("review", "layouts", "list", "--org", "acme", env=env)
    assert (
        listed.returncode == 0
        and f"learnt from {posted}" in listed.stdout
        and row.vendor_key in listed.stdout
    )

    shown = json.loads(run_cli("review", "layouts", "show", str(row.id), env=env).stdout)
    assert shown["id"] == row.id and {r["field"] for r in shown["rules"]} >= {"invoice_number", "issue_date"}

    exported = tmp_path / "acme.json"
    assert (
        run_cli("review", "layouts", "export", "--org", "acme", "-o", str(exported), env=env).returncode == 0
    )
    imported = run_cli("review", "layouts", "import", str(exported), "--org", "globex", env=env)
    assert imported.returncode == 0 and "1 layout(s) imported" in imported.stdout, imported.stderr
    [copy] = store.layouts.list_layouts("globex")
    assert copy.learnt_from is None and "from org acme" in copy.taught_by

    wrong_org = run_cli("review", "layouts", "disable", str(copy.id), "--org", "acme", env=env)
    assert wrong_org.returncode == 1
    disabled = run_cli(
        "review", "layouts", "disable", str(copy.id), "--org", "globex", "--reason", "old", env=env
    )
    assert disabled.returncode == 0, disabled.stderr
    assert store.layouts.list_layouts("globex") == [] and len(store.layouts.list_layouts("acme")) == 1


def test_import_and_export_never_send_a_files_escapes_to_the_terminal(
    env: dict[str, str], store: InvoiceStore, tmp_path: Path
) -> None:
    """A layouts file is someone else's text: its vendor key must not write the operator's
    clipboard (OSC 52) when `import` names it, nor C1 or bidi controls reach the screen from
    `export` (issue 41)."""
    clipboard = "\x1b]52;c;cm0gLXJmIH4=\x07"
    hostile = {
        "format": "invoice-pipeline/vendor-layouts",
        "format_version": 1,
        "org_id": "elsewhere",
        "layouts": [
            {
                "vendor_key": f"vat:DE123456789{clipboard}",
                "seller_name": f"Evil\u0085GmbH\u202eTXT.EXE{clipboard}",
                "currency": "EUR",
                "fingerprint": [],
                "rules": [],
                "enabled": True,
            }
        ],
    }
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(hostile), encoding="utf-8")
    # A key with an escape in it is no vendor key: refused, and the refusal names it escaped.
    refused = run_cli("review", "layouts", "import", str(path), "--org", "acme", env=env)
    assert refused.returncode != 0 and "vendor_key" in refused.stderr, refused.stderr
    for ch in ("\x1b", "\x07"):
        assert ch not in refused.stdout + refused.stderr, repr(ch)
    # A valid key with a hostile seller name is imported; nothing of the name reaches the screen raw.
    hostile["layouts"][0]["vendor_key"] = "vat:DE123456789"  # type: ignore[index]
    path.write_text(json.dumps(hostile), encoding="utf-8")
    imported = run_cli("review", "layouts", "import", str(path), "--org", "acme", env=env)
    assert imported.returncode == 0, imported.stderr
    assert "\x1b" not in imported.stdout and "\x07" not in imported.stdout
    exported = run_cli("review", "layouts", "export", "--org", "acme", "--all", env=env)
    assert exported.returncode == 0, exported.stderr
    for ch in ("\x1b", "\x07", "\x85", "\u202e"):
        assert ch not in exported.stdout, repr(ch)
    # Still the same document, read back.
    [layout] = json.loads(exported.stdout)["layouts"]
    assert layout["vendor_key"] == "vat:DE123456789"
    assert layout["seller_name"] == f"Evil\u0085GmbH\u202eTXT.EXE{clipboard}"
