"""sql/0022: names stored by an older release (normalised by `norm_name`) are recomputed as
identity skeletons, so a name written with a look-alike letter or another legal form is the
org's own or the vendor's again; VAT ids that fail their check digits stay as they were."""

from __future__ import annotations

from pathlib import Path

import psycopg

from invoice_pipeline.db.migrate import migrate
from invoice_pipeline.domain.identity import norm_name
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.db.test_migrate import _migrate_before


def _old_rows(url: str) -> int:
    """The rows as the older release wrote them: `value` is norm_name of `shown`; the second
    name of each owner was taught later than the first."""
    with psycopg.connect(url, autocommit=True) as conn:
        for shown, at in (
            ("Acme GmbH", "2026-01-01"),
            ("ACME", "2026-02-01"),
            ("Acme Logistics", "2026-03-01"),
        ):
            conn.execute(
                "INSERT INTO org_identities (org_id, kind, value, shown, source, added_by, added_at) "
                "VALUES ('acme', 'name', %s, %s, 'test', 'test', %s)",
                (norm_name(shown), shown, at),
            )
        conn.execute(
            "INSERT INTO org_identities (org_id, kind, value, shown, source, added_by) "
            "VALUES ('acme', 'vat', 'DE123456789', 'DE 123 456 789', 'test', 'test')"
        )
        row = conn.execute(
            "INSERT INTO vendors (org_id, name, source, created_by) "
            "VALUES ('acme', 'Nordwind Logistik GmbH', 'import', 'test') RETURNING id"
        ).fetchone()
        assert row is not None
        for kind, shown, at in (
            ("name", "Nordwind Logistik GmbH", "2026-01-01"),
            ("name", "NORDWIND LOGISTIK", "2026-02-01"),
            ("vat", "DE999999999", "2026-01-01"),
        ):
            conn.execute(
                "INSERT INTO vendor_identifiers (org_id, vendor_id, kind, value, shown, source, added_by, added_at) "
                "VALUES ('acme', %s, %s, %s, %s, 'import', 'test', %s)",
                (row[0], kind, norm_name(shown) if kind == "name" else shown, shown, at),
            )
        return int(row[0])


def test_stored_names_become_skeletons_and_invalid_vat_ids_stay(
    empty_database_url: str, tmp_path: Path
) -> None:
    url = empty_database_url
    _migrate_before(url, tmp_path, "0022")
    vendor_id = _old_rows(url)

    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        org = conn.execute("SELECT kind, value, shown FROM org_identities ORDER BY kind, value").fetchall()
        vendor = conn.execute(
            "SELECT kind, value, shown FROM vendor_identifiers WHERE vendor_id = %s ORDER BY kind, value",
            (vendor_id,),
        ).fetchall()
    # "ACME" is the same name as "Acme GmbH" now: the first one taught stays.
    assert org == [
        ("name", "acme", "Acme GmbH"),
        ("name", "acmelogistics", "Acme Logistics"),
        ("vat", "DE123456789", "DE 123 456 789"),  # fails its check digits; kept, not deleted
    ]
    assert vendor == [
        ("name", "nordwindlogistik", "Nordwind Logistik GmbH"),
        ("vat", "DE999999999", "DE999999999"),
    ]

    store = InvoiceStore(url, max_size=1)
    try:
        profile = store.vendors.org_profiles(["acme"])["acme"]
        (registered,) = store.vendors.list_vendors("acme")
    finally:
        store.close()
    # Greek capital Alpha, another legal form: still the org's own name and the vendor's.
    assert profile.has("name", "\u0391CME AG")
    assert not profile.has("name", "Acme Consulting")
    assert registered.has("name", "Nordwind Logistik G.m.b.H.")
