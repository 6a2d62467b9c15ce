"""The built wheel carries the SQL contract, and its migrator finds it without the checkout; it
carries the page-reading ranker's weights, and reads a page with them without scikit-learn."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project built as a wheel, once for this module."""
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (found,) = dist.glob("invoice_pipeline-*.whl")
    return found


def test_wheel_migrates_a_database_from_its_own_sql(
    wheel: Path, tmp_path: Path, empty_database_url: str
) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    on_disk = sorted(p.relative_to(ROOT / "sql").as_posix() for p in (ROOT / "sql").rglob("*.sql"))
    assert (
        sorted(
            n.removeprefix("invoice_pipeline/_sql/") for n in names if n.startswith("invoice_pipeline/_sql/")
        )
        == on_disk
    )

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    script = (
        "import sys; from invoice_pipeline.db.sqlfiles import sql_dir; from invoice_pipeline.db.migrate import migrate;"
        "print(sql_dir()); print(migrate(sys.argv[1]).applied)"
    )
    # Run from an empty folder with the unpacked wheel first on the path: no checkout in sight.
    result = subprocess.run(
        [sys.executable, "-c", script, empty_database_url],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(site / "invoice_pipeline" / "_sql")
    with psycopg.connect(empty_database_url) as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone() == (
            len(list((ROOT / "sql").glob("*.sql"))),
        )


def test_wheel_reads_a_page_with_its_own_ranker_weights_without_scikit_learn(
    wheel: Path, tmp_path: Path
) -> None:
    assert "invoice_pipeline/documents/reading/ranker_weights.json" in zipfile.ZipFile(wheel).namelist()
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # The shipped file fills the seller name (`use: fill`), which the hand reader does not find on
    # this page: it is read with the wheel's own weights, as the product reads it.
    script = (
        "import sys; from invoice_pipeline.documents.reading import ranker;"
        "from invoice_pipeline.documents.text_fields import hand_fields_from_text;"
        "r = ranker.shipped_ranker(); print(ranker.__file__); print(sorted(r.models));"
        "page = 'Nordlicht Werkstatt\\n\\nInvoice number:   XK-4410\\nTotal due:   120.00 EUR';"
        "f = ranker.ranked_fields(hand_fields_from_text(page), page, None, r);"
        "print(f.invoice_number, f.sources['seller_name'].source); print('sklearn' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    where, fields, read, sklearn = result.stdout.splitlines()
    assert where == str(site / "invoice_pipeline" / "documents" / "reading" / "ranker.py")
    assert fields == str(
        sorted(("invoice_number", "issue_date", "payable_total", "currency", "seller_name", "seller_vat_id"))
    )
    # Read by the ranker (a value with its place, or none with the reason).
    assert read.startswith("XK-4410 ") and read.endswith("ranker")
    assert sklearn == "False"
