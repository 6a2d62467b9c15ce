"""The mailbox sensor on a real Dagster instance and a real Dovecot: configured mailboxes are
polled, their invoices planned into runs by the intake sensor, and the password is nowhere in
Dagster (run config, job snapshots, logs, storage), nor in the invoice database or the CLI's output."""

from __future__ import annotations

import logging
from pathlib import Path

import psycopg
import pytest
from dagster import DagsterInstance, build_sensor_context

from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.sensors import mailbox_intake_sensor, new_invoices_sensor
from invoice_pipeline_tests.engine.mail.mailbox import (
    NEEDS_DOVECOT,
    attachment,
    invoices_by_sha,
    message,
    private_dovecot,
    sha,
)
from invoice_pipeline_tests.factories import pipeline_resources
from invoice_pipeline_tests.test_kill_process import cli
from pipeline_support import secrets_scan
from pipeline_support.dovecot import Dovecot
from pipeline_support.helpers import cli_environment

pytestmark = NEEDS_DOVECOT
ORG = "acme"
imap = pytest.fixture(private_dovecot, name="imap")


def test_configured_mailboxes_are_polled_and_the_password_reaches_no_dagster_storage(
    imap: Dovecot,
    database_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    password_file = tmp_path / "mail-password"
    password_file.write_text(imap.password + "\n")
    with cli_environment(tmp_path / "home", database_url) as env:
        added = cli(
            env, "mail", "mailbox", "add", "--org", ORG, imap.url(), "--password-file", str(password_file)
        )
        listed = cli(env, "mail", "mailbox", "list")
    assert added.returncode == 0, added.stderr
    assert (
        f"imap://mailuser@127.0.0.1:{imap.port}/INBOX" in listed.stdout
        and str(password_file) in listed.stdout
    )
    imap.deliver(message("one", attachment(1)))
    imap.deliver(message("two", attachment(2)))

    resources = pipeline_resources(database_url)
    defs = make_definitions(resources)
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:
        caplog.set_level(logging.DEBUG)
        context = build_sensor_context(instance=instance, resources={"invoice_db": resources["invoice_db"]})
        first = mailbox_intake_sensor.evaluate_tick(context)
        second = mailbox_intake_sensor.evaluate_tick(
            build_sensor_context(instance=instance, resources={"invoice_db": resources["invoice_db"]})
        )
        planned = new_invoices_sensor.evaluate_tick(
            build_sensor_context(instance=instance, resources={"invoice_db": resources["invoice_db"]})
        )
        # The runs the intake sensor asks for, created in the instance as the daemon would.
        for request in planned.run_requests:
            job = defs.get_job_def(request.job_name)
            instance.create_run_for_job(job, run_config=request.run_config, tags=request.tags)
        runs = instance.get_runs()

    assert first.skip_message == "1 mailbox(es): 2 message(s) taken, 2 new invoice(s)"
    assert second.skip_message == "1 mailbox(es): 0 message(s) taken, 0 new invoice(s)"
    assert invoices_by_sha(database_url, ORG) == {sha(attachment(1)[1]): 1, sha(attachment(2)[1]): 1}
    assert len(runs) == 1 and len(planned.run_requests) == 1
    texts = [caplog.text, added.stdout, added.stderr, listed.stdout, str(first.skip_message)]
    texts += [repr(r.run_config) + repr(r.tags) for r in runs]
    assert all(imap.password not in text for text in texts)
    files, scanned = secrets_scan.in_files(imap.password, tmp_path / "dagster")
    assert files == [] and scanned > 0, files
    places, values = secrets_scan.in_database(imap.password, database_url)
    assert places == [] and values > 10, places


def test_a_mailbox_that_fails_is_recorded_and_the_others_still_polled(
    imap: Dovecot,
    database_url: str,
    tmp_path: Path,
) -> None:
    good, wrong = tmp_path / "good", tmp_path / "wrong"
    good.write_text(imap.password)
    wrong.write_text("not-the-password")
    imap.deliver(message("one", attachment(1)))
    with cli_environment(tmp_path / "home", database_url) as env:
        for org, file in (("acme", good), ("globex", wrong)):
            done = cli(env, "mail", "mailbox", "add", "--org", org, imap.url(), "--password-file", str(file))
            assert done.returncode == 0, done.stderr
        fetched = cli(env, "mail", "fetch")
        listed = cli(env, "mail", "mailbox", "list")
        removed = cli(env, "mail", "mailbox", "remove", "--org", "globex", imap.url())
        after = cli(env, "mail", "mailbox", "list")
    assert fetched.returncode == 1, "a mailbox failed: the pass says so in its exit code"
    assert "1 taken now, 1 new invoice(s)" in fetched.stdout
    assert "login as 'mailuser' refused" in fetched.stderr
    assert "last error: login as 'mailuser' refused" in listed.stdout
    assert removed.returncode == 0 and "removed" in removed.stdout
    assert "globex" not in after.stdout and "acme" in after.stdout
    assert invoices_by_sha(database_url, "acme") == {sha(attachment(1)[1]): 1}
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM mail_messages WHERE org_id = 'acme'").fetchone() == (1,)
