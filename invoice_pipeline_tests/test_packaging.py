"""The built wheel carries the SQL contract, and its migrator finds it without the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_migrates_a_database_from_its_own_sql(tmp_path: Path, empty_database_url: str) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("invoice_pipeline-*.whl")
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
