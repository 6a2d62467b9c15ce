"""The org's own profile cannot be planted by a stranger (issue 52, item 4): `org profile seed`
only proposes the buyer parties of posted e-invoices, and adding an identifier a registered
vendor of the org has is refused, naming the vendor. Real database, real pipeline."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.engine.vendors import org_profile_candidates, read_vendor_csv
from invoice_pipeline_tests.engine.review.helpers import postings, process_documents
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import run_cli

VENDOR_VAT = "DE123456788"  # the factory's seller: Acme Supplies GmbH
VENDOR_IBAN = "DE89370400440532013000"
ORG_VAT = "FR40303265045"


def _register_vendor(store: InvoiceStore) -> None:
    rows = read_vendor_csv(f"name,vat_id,iban\nAcme Supplies GmbH,{VENDOR_VAT},{VENDOR_IBAN}\n")
    assert not store.vendors.import_vendors("acme", rows, "test").refused


def _post(database_url: str, store: InvoiceStore, documents: list[bytes]) -> None:
    ids = process_documents(database_url, store, "acme", [(d, f"{i}.json") for i, d in enumerate(documents)])
    assert [postings(database_url, i) for i in ids] == [1] * len(ids)


@pytest.fixture
def posted(database_url: str, store: InvoiceStore) -> InvoiceStore:
    """Two e-invoices name the org as their buyer; a third, from a stranger, names the org's
    vendor's VAT id as the buyer's (planting it would hide the vendor on its own invoices)."""
    _register_vendor(store)
    _post(
        database_url,
        store,
        [
            json_invoice("INV-1", buyer="Maison Verte Paysage SAS", buyer_vat_id=ORG_VAT),
            json_invoice("INV-2", buyer="MAISON VERTE PAYSAGE", buyer_vat_id=f"fr {ORG_VAT[2:]}"),
            json_invoice("INV-3", buyer="Maison Verte Paysage SAS", buyer_vat_id=VENDOR_VAT),
        ],
    )
    return store


def test_seed_proposes_the_buyer_parties_and_adds_nothing(posted: InvoiceStore) -> None:
    """Mechanism: org_profile_candidates only reads; the profile stays empty."""
    candidates = {(c.kind, c.shown): c for c in org_profile_candidates(posted, "acme")}
    assert posted.vendors.org_profiles(["acme"])["acme"].identifiers == ()
    # One name in two writings (one skeleton), named by all three invoices.
    name = candidates[("name", "Maison Verte Paysage SAS")]
    assert (name.invoices, name.owner) == (3, None)
    vat = candidates[("vat", ORG_VAT)]
    assert (vat.invoices, vat.owner) == (2, None)
    planted = candidates[("vat", VENDOR_VAT)]
    assert planted.owner is not None and "Acme Supplies GmbH" in planted.owner
    assert len(candidates) == 3

    # Once added by a person, a candidate is no longer proposed.
    posted.vendors.add_org_identity("acme", "vat", ORG_VAT, source="test", added_by="test")
    assert ("vat", ORG_VAT) not in {(c.kind, c.shown) for c in org_profile_candidates(posted, "acme")}


@pytest.mark.parametrize(
    ("kind", "value"),
    [("vat", "de 123.456.788"), ("iban", "de89 3704 0044 0532 0130 00"), ("name", "ACME SUPPLIES")],
)
def test_adding_a_vendors_identifier_to_the_org_profile_is_refused(
    store: InvoiceStore, kind: str, value: str
) -> None:
    """Mechanism: add_org_identity checks the registry in the insert's transaction."""
    _register_vendor(store)
    with pytest.raises(ValueError, match=r"belongs to vendor Acme Supplies GmbH \(#\d+\)"):
        store.vendors.add_org_identity("acme", kind, value, source="test", added_by="test")  # type: ignore[arg-type]
    assert store.vendors.org_profiles(["acme"])["acme"].identifiers == ()
    # Another org's profile is not its registry's business.
    assert store.vendors.add_org_identity("globex", kind, value, source="test", added_by="test")  # type: ignore[arg-type]


def test_the_cli_seed_prints_proposals_and_add_of_a_vendors_vat_id_is_refused(
    posted: InvoiceStore, database_url: str, tmp_path: Path
) -> None:
    env = dict(
        os.environ,
        INVOICE_PIPELINE_HOME=str(tmp_path),
        INVOICE_PIPELINE_DATABASE_URL=database_url,
        USER="alice",
    )
    seeded = run_cli("org", "profile", "--org", "acme", "seed", env=env)
    assert seeded.returncode == 0, seeded.stderr
    assert f"invoice-pipeline org profile --org acme add vat {ORG_VAT}" in seeded.stdout
    assert "invoice-pipeline org profile --org acme add name 'Maison Verte Paysage SAS'" in seeded.stdout
    assert "named by 2 posted e-invoice(s)" in seeded.stdout
    assert "not proposed, it belongs to vendor Acme Supplies GmbH" in seeded.stdout
    assert posted.vendors.org_profiles(["acme"])["acme"].identifiers == ()

    refused = run_cli("org", "profile", "--org", "acme", "add", "vat", VENDOR_VAT, env=env)
    assert refused.returncode == 2 and "belongs to vendor Acme Supplies GmbH" in refused.stderr, refused
    added = run_cli("org", "profile", "--org", "acme", "add", "vat", ORG_VAT, env=env)
    assert added.returncode == 0 and ORG_VAT in added.stdout, added.stderr
