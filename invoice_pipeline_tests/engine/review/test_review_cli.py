"""`invoice-pipeline review ...` and `requeue`, as a person runs them: exit codes 0/1/2, output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.review.helpers import held_invoice, sql
from pipeline_support.helpers import run_cli


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, INVOICE_PIPELINE_HOME=str(tmp_path), INVOICE_PIPELINE_DATABASE_URL=database_url)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("review", "approve"), "give invoice ids, or a filter"),
        (("review", "approve", "not-a-uuid"), "invoice_id must be a UUID"),
        (("review", "reject", "--all"), "the following arguments are required: --reason"),
        (("review", "list", "--older-than", "soon"), "age must look like 7d"),
        (("review", "approve", "--reason", "Not A Code"), "reason must be a code"),
        (("review", "policy", "--org", "acme", "--auto-approve-limit", "-5"), "non-negative amount"),
        (("review", "policy", "--org", "acme", "--home-currency", "EURO"), "ISO 4217"),
        (("requeue", "--status", "processed"), "invalid choice"),
        (("requeue",), "give invoice ids, or a filter"),
    ],
)
def test_bad_arguments_exit_2_before_any_sql(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    # An unreachable database: exit 2 proves the arguments were refused before connecting.
    env = dict(
        os.environ,
        INVOICE_PIPELINE_HOME=str(tmp_path),
        INVOICE_PIPELINE_DATABASE_URL="postgresql://nobody@127.0.0.1:1/none",
    )
    result = run_cli(*args, env=env)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr


@pytest.mark.slow
def test_list_approve_reject_show_and_status(
    env: dict[str, str], store: InvoiceStore, database_url: str
) -> None:
    a = held_invoice(store, "acme", "CLI-1", ["negative_total: payable -50.00 EUR on an invoice (type 380)"])
    b = held_invoice(store, "acme", "CLI-2", ["due_before_issue: due 2026-10-01 is 1 day(s) before issue"])

    listed = run_cli("review", "list", "--reason", "negative_total", env=env)
    assert listed.returncode == 0, listed.stderr
    assert str(a) in listed.stdout and str(b) not in listed.stdout and "1 invoice(s)" in listed.stdout

    approved = run_cli("review", "approve", str(a), "--note", "refund agreed", env=env)
    assert approved.returncode == 0, approved.stderr
    assert f"done    {a}" in approved.stdout and "needs_review -> pending" in approved.stdout
    again = run_cli("review", "approve", str(a), env=env)
    assert again.returncode == 1 and "refused" in again.stdout and "it is pending" in again.stdout

    rejected = run_cli(
        "review", "reject", "--org", "acme", "--reason-code", "due_before_issue", "--reason", "terms", env=env
    )
    assert rejected.returncode == 0 and "1 done, 0 refused" in rejected.stdout, rejected.stdout

    shown = run_cli("show", str(b), env=env)
    assert shown.returncode == 0 and "review actions:" in shown.stdout and "reject" in shown.stdout
    assert "was held for: due_before_issue" in shown.stdout

    c = held_invoice(store, "beta", "CLI-3", ["negative_total: payable -50.00 EUR on an invoice (type 380)"])
    status = run_cli("status", env=env)
    assert status.returncode == 0 and "review queue:        1 invoice(s) held for a person" in status.stdout
    assert "negative_total" in status.stdout
    status_json = run_cli("status", "--json", env=env)
    queue = json.loads(status_json.stdout)["review_queue"]
    assert [(q["org_id"], q["reason"], q["invoices"]) for q in queue] == [("beta", "negative_total", 1)]
    assert str(c) in status_json.stdout, "the held invoice is listed among what needs a person"
    actor = sql(database_url, "SELECT actor FROM review_actions WHERE invoice_id = %s", (a,))
    assert actor and actor[0][0].startswith("os-user:")


@pytest.mark.slow
def test_policy_show_and_set(env: dict[str, str], store: InvoiceStore) -> None:
    shown = run_cli("review", "policy", "--org", "acme", env=env)
    assert shown.returncode == 0 and "auto-approve limit none" in shown.stdout
    assert (
        run_cli("review", "policy", "--org", "acme", "--auto-approve-limit", "500", env=env).returncode == 0
    )
    assert run_cli("review", "policy", "--org", "acme", "--home-currency", "EUR", env=env).returncode == 0
    policy = store.review.review_policies(["acme"])["acme"]
    assert str(policy.auto_approve_limit) == "500" and policy.home_currency == "EUR"
    cleared = run_cli("review", "policy", "--org", "acme", "--auto-approve-limit", "none", env=env)
    assert cleared.returncode == 0 and "auto-approve limit none, home currency EUR" in cleared.stdout
    # The German e-invoicing rules (issue 55): set, kept by a later change, refused for another country.
    german = run_cli("review", "policy", "--org", "acme", "--einvoice-country", "DE", env=env)
    assert german.returncode == 0 and "e-invoicing rules DE" in german.stdout
    assert store.review.review_policies(["acme"])["acme"].einvoice_country == "DE"
    kept = run_cli("review", "policy", "--org", "acme", "--stale-after-days", "90", env=env)
    assert kept.returncode == 0 and "e-invoicing rules DE" in kept.stdout
    assert run_cli("review", "policy", "--org", "acme", "--einvoice-country", "FR", env=env).returncode == 2
    assert store.review.review_policies(["acme"])["acme"].einvoice_country == "DE"
