"""An import of vendor layouts is checked against vendor_layouts.schema.json before anything is
stored (issue 37): wrong types, sizes, non-finite numbers, a non-boolean `enabled`, a currency
that is not three capitals, identifiers that are not strings. Each refusal names the JSON path
and the reason; a refused file stores nothing, from the command line as from the review page
(`test_review_ui_layouts.py` covers the page)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from invoice_pipeline.documents.reading.layout_export import ExportRefused, check_export, parse_export_text
from invoice_pipeline.engine.layouts import import_layouts
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.test_cli_layouts import env  # noqa: F401  (the CLI's environment fixture)
from pipeline_support.helpers import run_cli


def good() -> dict[str, Any]:
    return {
        "format": "invoice-pipeline/vendor-layouts",
        "format_version": 1,
        "org_id": "acme",
        "exported_at": "2026-12-02T10:00:00+00:00",
        "layouts": [
            {
                "id": 7,
                "vendor_key": "vat:GB585738843",
                "version": 2,
                "seller_name": "Halvorsen Metaalwerk B.V.",
                "seller_vat_id": "GB585738843",
                "currency": "GBP",
                "fingerprint": [["halvorsen metaalwerk b.v", 17], ["bill to", 17]],
                "rules": [
                    {"field": "invoice_number", "anchor": "invoice no", "anchor_col": 89,
                     "relation": "right", "dx": 33, "dy": 0, "shape": "A-9-9", "dx_end": 46},
                ],
                "learnt_from": None,
                "taught_by": "os-user:alice",
                "taught_at": "2026-12-01T09:12:44+00:00",
                "enabled": True,
            }
        ],
    }  # fmt: skip


def with_layout(**change: Any) -> dict[str, Any]:
    data = good()
    data["layouts"][0].update(change)
    return data


def with_rule(**change: Any) -> dict[str, Any]:
    data = good()
    data["layouts"][0]["rules"][0].update(change)
    return data


# (document, the JSON path the refusal names, words of its reason)
REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "currency a list": (with_layout(currency=["GBP"]), "$.layouts[0].currency", "is not of type"),
    "currency not 3 capitals": (with_layout(currency="pounds"), "$.layouts[0].currency", "does not match"),
    "VAT id a number": (with_layout(seller_vat_id=585738843), "$.layouts[0].seller_vat_id", "is not of type"),
    "enabled a string": (with_layout(enabled="false"), "$.layouts[0].enabled", "is not of type 'boolean'"),
    "enabled missing": (
        {**good(), "layouts": [{k: v for k, v in good()["layouts"][0].items() if k != "enabled"}]},
        "$.layouts[0]",
        "'enabled' is a required property",
    ),
    "learnt_from a number": (with_layout(learnt_from=12), "$.layouts[0].learnt_from", "is not of type"),
    "a name key": (with_layout(vendor_key="name:contoso ltd"), "$.layouts[0].vendor_key", "does not match"),
    "column a float": (with_rule(anchor_col=89.5), "$.layouts[0].rules[0].anchor_col", "is not of type 'integer'"),
    "column huge": (with_rule(dx=10**12), "$.layouts[0].rules[0].dx", "is greater than the maximum"),
    "unknown field": (with_rule(field="seller_vat_id"), "$.layouts[0].rules[0].field", "is not one of"),
    "unknown relation": (with_rule(relation="anywhere"), "$.layouts[0].rules[0].relation", "is not one of"),
    "anchor too long": (with_rule(anchor="x" * 201), "$.layouts[0].rules[0].anchor", "is too long"),
    "too many fingerprint words": (
        with_layout(fingerprint=[[f"word {i}", i] for i in range(81)]),
        "$.layouts[0].fingerprint",
        "breaks the schema's maxItems 80",
    ),
    "fingerprint word a triple": (with_layout(fingerprint=[["a b c", 1, 2]]), "$.layouts[0].fingerprint[0]", ""),
    "an unknown key": (with_layout(seller_iban="GB00"), "$.layouts[0]", "Additional properties"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_refusal_names_the_path_and_the_reason(case: str) -> None:
    data, path, reason = REFUSED[case]
    with pytest.raises(ExportRefused) as refused:
        check_export(data)
    message = str(refused.value)
    assert message.startswith(f"refused at {path}:") and reason in message, message


def test_the_good_document_passes() -> None:
    check_export(good())
    assert parse_export_text(json.dumps(good())) == good()


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_numbers_must_be_finite(number: str) -> None:
    text = json.dumps(with_rule(dx=12345)).replace("12345", number)
    # Refused where it stands (issue 41: a 400 with the JSON path on any bad value).
    with pytest.raises(
        ExportRefused, match=r"refused at \$\.layouts\[0\]\.rules\[0\]\.dx: not a finite number"
    ):
        parse_export_text(text)


def test_a_repeated_key_is_refused() -> None:
    text = json.dumps(good()).replace('"currency": "GBP"', '"currency": "GBP", "currency": "EUR"')
    with pytest.raises(ExportRefused, match="the key 'currency' more than once"):
        parse_export_text(text)


@pytest.mark.slow
def test_a_refused_file_imports_nothing_through_the_store_or_the_command_line(
    store: InvoiceStore,
    env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    # The first layout is good, the second is not: the whole file is refused.
    data = good()
    second = copy.deepcopy(data["layouts"][0]) | {"vendor_key": "vat:DE123456789", "currency": ["EUR"]}
    data["layouts"].append(second)
    with pytest.raises(ExportRefused, match=r"refused at \$\.layouts\[1\]\.currency"):
        import_layouts(store, data, "acme", "os-user:alice")
    path = tmp_path / "export.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    cli = run_cli("review", "layouts", "import", str(path), "--org", "acme", env=env)
    assert cli.returncode == 2 and "refused at $.layouts[1].currency" in cli.stderr, (cli.stdout, cli.stderr)
    path.write_text(json.dumps(good()).replace('"dx": 33', '"dx": 1e999'), encoding="utf-8")
    cli = run_cli("review", "layouts", "import", str(path), "--org", "acme", env=env)
    assert cli.returncode == 2 and "rules[0].dx: not a finite number" in cli.stderr, cli.stderr
    assert store.layouts.list_layouts("acme", include_disabled=True) == []
    # The good file alone imports.
    path.write_text(json.dumps(good()), encoding="utf-8")
    cli = run_cli("review", "layouts", "import", str(path), "--org", "acme", env=env)
    assert cli.returncode == 0, cli.stderr
    assert [r.vendor_key for r in store.layouts.list_layouts("acme")] == ["vat:GB585738843"]
