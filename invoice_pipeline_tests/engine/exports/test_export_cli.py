"""`invoice-pipeline export ...` as a person runs it (a subprocess): targets added and refused,
status, run --once to a DATEV folder and a loopback webhook, requeue of a dead letter."""

from __future__ import annotations

from pathlib import Path

import pytest

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.samples.receiver import WebhookReceiver
from invoice_pipeline_tests.engine.exports.helpers import SECRET, post_invoices, sql
from pipeline_support.helpers import cli_environment, run_cli


def test_targets_status_run_and_requeue_from_the_command_line(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    folder = tmp_path / "books"
    with WebhookReceiver(SECRET) as receiver, cli_environment(tmp_path / "home", database_url) as env:
        refused = run_cli(
            "export", "target", "add", "--org", "acme", "webhook", "--url", "http://erp.example.com/x",
            "--secret-file", str(secret), env=env,
        )  # fmt: skip
        assert refused.returncode == 2 and "plain http is allowed only to a loopback host" in refused.stderr
        missing = run_cli(
            "export", "target", "add", "--org", "acme", "webhook", "--url", receiver.url,
            "--secret-file", str(tmp_path / "nope"), env=env,
        )  # fmt: skip
        assert missing.returncode == 2 and "--secret-file: cannot read" in missing.stderr
        added = run_cli("export", "target", "add", "--org", "acme", "datev", "--dir", str(folder), env=env)
        assert added.returncode == 0, added.stderr
        added = run_cli(
            "export", "target", "add", "--org", "acme", "--max-attempts", "1", "webhook", "--url", receiver.url,
            "--secret-file", str(secret), env=env,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        listed = run_cli("export", "target", "list", env=env)
        assert "acme  datev  datev" in listed.stdout and "acme  webhook  webhook" in listed.stdout
        assert SECRET.decode() not in listed.stdout

        post_invoices(store, "acme", 2)
        status = run_cli("export", "status", "--org", "acme", env=env)
        assert status.returncode == 0
        assert [line.split()[3] for line in status.stdout.splitlines()[1:3]] == ["2", "2"]

        receiver.then("500")
        ran = run_cli("export", "run", "--once", env=env)
        assert ran.returncode == 0, ran.stderr
        assert "3 delivered" in ran.stdout and "1 dead-lettered" in ran.stdout
        assert len(list(folder.glob("EXTF_Buchungsstapel_*.csv"))) == 1
        status = run_cli("export", "status", env=env)
        assert "1 dead-lettered; redrive" in status.stdout and "HTTP 500" in status.stdout

        requeued = run_cli("export", "requeue", "--org", "acme", "--target", "webhook", env=env)
        assert "1 dead-lettered export(s) due again" in requeued.stdout
        ran = run_cli("export", "run", "--once", env=env)
        assert "1 delivered" in ran.stdout
    assert len(receiver.booked()) == 2 and set(receiver.booked().values()) == {1}


@pytest.mark.slow
def test_the_demo_delivers_its_postings_to_a_datev_folder_and_its_own_receiver(
    database_url: str, tmp_path: Path
) -> None:
    with cli_environment(tmp_path / "home", database_url) as env:
        demo = run_cli("demo", "--count", "4", env=env, timeout=1200)
        assert demo.returncode == 0, demo.stderr[-3000:]
        status = run_cli("export", "status", env=env)
    posted = int(sql(database_url, "SELECT count(*) FROM ledger_postings")[0][0])
    assert posted > 0
    assert f"exports (invoice-pipeline export status): {2 * posted} delivered, 0 dead-lettered" in demo.stdout
    assert f"{posted} posting(s) booked, each once by its Idempotency-Key" in demo.stdout
    (secret,) = (tmp_path / "home").glob("exports/*/webhook.secret")
    assert secret.stat().st_mode & 0o777 == 0o600
    assert secret.read_text() not in demo.stdout + demo.stderr + status.stdout
    files = list((tmp_path / "home").glob("exports/*/datev/EXTF_Buchungsstapel_*.csv"))
    assert files and f"DATEV: {len(files)} Buchungsstapel file(s)" in demo.stdout
    rows = [line.split() for line in status.stdout.splitlines()[1:3]]
    assert [(r[1], r[5]) for r in rows] == [("datev", str(posted)), ("erp", str(posted))]
