"""The product behaves the same from any folder (issue 26): its Python children run the
installed package, not an `invoice_pipeline` folder that lies in the current directory."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from invoice_pipeline.child_python import child_environment, child_pythonpath, python_command
from invoice_pipeline.engine.store import InvoiceStore
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import cli_environment

# The console script, as `make` and a person run it: unlike `python -m invoice_pipeline.cli`,
# it does not put the current folder on the CLI's own sys.path.
CONSOLE_SCRIPT = Path(sys.executable).parent / "invoice-pipeline"


def make_old_checkout(folder: Path) -> Path:
    """A folder like an old release's checkout: an `invoice_pipeline` package without the
    sandbox worker, whose import fails loudly."""
    package = folder / "invoice_pipeline"
    (package / "documents").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise ImportError('imported the decoy invoice_pipeline of the current folder')\n"
    )
    (package / "documents" / "__init__.py").write_text("")
    return folder


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> Iterator[dict[str, str]]:
    with cli_environment(tmp_path / "home", database_url) as values:
        values.pop("PYTHONPATH", None)
        yield values


def test_process_from_an_old_checkout_folder_runs_the_installed_package(
    env: dict[str, str], tmp_path: Path, database_url: str
) -> None:
    """`invoice-pipeline process` started in a folder holding a decoy `invoice_pipeline/`
    processes the invoices normally.

    Fails without the fix: with the sandbox worker started as `[sys.executable, "-m", WORKER_MODULE,
    ...]` again (no -P, no child environment), both invoices end `failed` with
    "SandboxUnavailable: document sandbox worker did not start" and `process` exits 1 (checked
    once by reverting sandbox.py's Popen arguments)."""
    folder = make_old_checkout(tmp_path / "old-release")
    store = InvoiceStore(database_url, max_size=2)
    try:
        ids = [
            store.documents.store_document(
                json_invoice(f"INV-{n}", total=f"{n}.00"), "acme", f"{n}.json"
            ).invoice_id
            for n in (101, 102)
        ]
    finally:
        store.close()

    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "process"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT i.id, i.status, i.last_error, p.amount FROM invoices i"
            " LEFT JOIN ledger_postings p ON p.invoice_id = i.id WHERE i.id = ANY(%s)",
            (ids,),
        ).fetchall()
    assert {r[0]: (r[1], r[3]) for r in rows} == {ids[0]: ("processed", 101), ids[1]: ("processed", 102)}, (
        rows,
        result.stderr[-3000:],
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_children_run_with_safe_path_and_a_cleaned_pythonpath(tmp_path: Path) -> None:
    """What every Python child gets: -P, PYTHONSAFEPATH for its own children, and PYTHONPATH
    with absolute entries only (an empty entry would be the current folder again)."""
    assert python_command("-m", "x") == [sys.executable, "-P", "-m", "x"]
    assert child_pythonpath(f"{os.pathsep}/opt/plugins{os.pathsep}lib", cwd="/srv") == (
        f"/opt/plugins{os.pathsep}/srv/lib"
    )
    assert child_pythonpath(os.pathsep, cwd="/srv") is None
    env = child_environment({"PYTHONPATH": os.pathsep, "KEEP": "1"})
    assert env == {"PYTHONSAFEPATH": "1", "KEEP": "1"}

    # A grandchild started with plain `python -m` in the decoy folder (as dagster dev starts its
    # webserver, daemon and code servers) still imports the installed package.
    folder = make_old_checkout(tmp_path / "old-release")
    child = subprocess.run(
        python_command("-c", _GRANDCHILD),
        cwd=folder,
        env=child_environment({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    import invoice_pipeline

    assert child.stdout.strip() == str(Path(invoice_pipeline.__file__).resolve())


# Plain `-c` puts the current folder first on sys.path, like `-m` does, unless PYTHONSAFEPATH is set.
_GRANDCHILD = """
import subprocess, sys
print(subprocess.run([sys.executable, "-c", "import os, invoice_pipeline; "
                      "print(os.path.realpath(invoice_pipeline.__file__))"],
                     capture_output=True, text=True, check=True).stdout.strip())
"""
