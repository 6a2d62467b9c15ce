"""Launchpad approvals fail closed (issue 41): the real review jobs, executed in process on a
Dagster instance over the test database, act only for the orgs the review page's users file
gives the reviewer named in the run's config, and only in a local deployment (a typed name is
all a job knows of the person)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import yaml
from dagster import ExecuteInProcessResult, JobDefinition

from invoice_pipeline.config import Settings
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.definitions import make_definitions
from invoice_pipeline.orchestration.resources import ReviewAccess
from invoice_pipeline.orchestration.review_jobs import CORRECT_INVOICE, REVIEW_INVOICE
from invoice_pipeline_tests.engine.review.helpers import (
    INSTANCE,
    failure_messages,
    held_invoice,
    status_and_reasons,
)
from invoice_pipeline_tests.factories import pipeline_resources

ROOT = Path(__file__).resolve().parents[2]


def review_job(database_url: str, access: ReviewAccess, name: str = REVIEW_INVOICE) -> JobDefinition:
    defs = make_definitions(pipeline_resources(database_url) | {"review_access": access})
    return defs.resolve_job_def(name)


def approve(job: JobDefinition, invoice_id: UUID, reviewer: str) -> ExecuteInProcessResult:
    config: dict[str, Any] = {
        "decision": "approve",
        "invoice_ids": [str(invoice_id)],
        "reviewer": reviewer,
        "note": "agreed",
    }
    return job.execute_in_process(
        run_config={"ops": {"review_invoices": {"config": config}}}, instance=INSTANCE, raise_on_error=False
    )


def users_file(path: Path) -> Path:
    """The review page's users file in proxy form (names and orgs; no passwords needed)."""
    path.write_text(
        json.dumps({"ana": {"orgs": ["acme"]}, "nobody-org": {"orgs": []}, "boss": {}}), encoding="utf-8"
    )
    return path


def test_a_listed_reviewer_acts_only_for_their_orgs(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    acme = held_invoice(store, "acme", "LP-1", ["negative_total: payable -50.00 EUR"])
    globex = held_invoice(store, "globex", "LP-2", ["negative_total: payable -50.00 EUR"])
    access = ReviewAccess(deployment="local", users_file=str(users_file(tmp_path / "users.json")))
    job = review_job(database_url, access)

    other_org = approve(job, globex, "ana")
    assert not other_org.success
    assert "not_their_org" in failure_messages(other_org)
    assert status_and_reasons(database_url, globex)[0] == "needs_review"
    assert store.review.review_history(globex) == []

    no_org = approve(job, acme, "nobody-org")
    assert not no_org.success and "not_their_org" in failure_messages(no_org)
    assert status_and_reasons(database_url, acme)[0] == "needs_review"

    correct = review_job(database_url, access, CORRECT_INVOICE).execute_in_process(
        run_config={
            "ops": {
                "correct_fields": {
                    "config": {"invoice_id": str(globex), "payable_total": "50.00", "reviewer": "ana"}
                }
            }
        },
        instance=INSTANCE,
        raise_on_error=False,
    )
    assert not correct.success and "not_their_org" in failure_messages(correct)
    assert store.review.review_history(globex) == []

    own_org = approve(job, acme, " ana ")
    assert own_org.success, failure_messages(own_org)
    assert status_and_reasons(database_url, acme)[0] != "needs_review"
    (audit,) = store.review.review_history(acme)
    assert audit.action == "approve" and audit.actor == f"dagster-run:{own_org.run_id} (ana)"


def test_a_reviewer_missing_from_the_users_file_is_refused(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    inv = held_invoice(store, "acme", "LP-3", ["negative_total: payable -50.00 EUR"])
    access = ReviewAccess(deployment="local", users_file=str(users_file(tmp_path / "users.json")))
    job = review_job(database_url, access)
    for reviewer in ("mallory", "", "ANA"):
        result = approve(job, inv, reviewer)
        assert not result.success
        assert "is not in the review users file" in failure_messages(result), reviewer
    broken = ReviewAccess(deployment="local", users_file=str(tmp_path / "gone.json"))
    result = approve(review_job(database_url, broken), inv, "ana")
    assert not result.success and "no Launchpad review can run" in failure_messages(result)
    assert status_and_reasons(database_url, inv)[0] == "needs_review"
    assert store.review.review_history(inv) == []


def test_only_a_local_deployment_approves_whatever_its_users_file(
    database_url: str, store: InvoiceStore, tmp_path: Path
) -> None:
    inv = held_invoice(store, "acme", "LP-4", ["negative_total: payable -50.00 EUR"])
    users = str(users_file(tmp_path / "users.json"))
    for deployment in ("production", "", "staging"):
        # Listed or not, the name is typed into a webserver with no login: nothing vouches for it.
        for access in (
            ReviewAccess(deployment=deployment),
            ReviewAccess(deployment=deployment, users_file=users),
        ):
            result = approve(review_job(database_url, access), inv, "ana")
            assert not result.success
            assert "nothing vouches for the reviewer's name" in failure_messages(result), access
    # A code location that names no review access at all refuses too.
    defs = make_definitions(pipeline_resources(database_url))
    result = approve(defs.resolve_job_def(REVIEW_INVOICE), inv, "ana")
    assert not result.success and "nothing vouches for the reviewer's name" in failure_messages(result)
    assert status_and_reasons(database_url, inv)[0] == "needs_review"
    assert store.review.review_history(inv) == []

    local = approve(review_job(database_url, ReviewAccess(deployment="local")), inv, "me")
    assert local.success, failure_messages(local)
    assert status_and_reasons(database_url, inv)[0] != "needs_review"


def test_a_launchpad_review_run_in_the_helm_recipes_pods_acts_for_nobody(
    database_url: str, store: InvoiceStore
) -> None:
    """Issue 53: the deployed code location leaves the review jobs out; should they be put back,
    a review run approves nothing there. The access each pod of deploy/helm/values.yaml gets from
    its environment (the code server's, and the run pods' the run launcher starts) is used for a
    real approval, which is refused and leaves the invoice held."""
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "values.yaml").read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    pods = {
        "code server": {e["name"]: e["value"] for e in deployment["env"]},
        "run pods": dict(
            v.split("=", 1) for v in values["runLauncher"]["config"]["k8sRunLauncher"]["envVars"]
        ),
    }
    inv = held_invoice(store, "acme", "LP-9", ["negative_total: payable -50.00 EUR"])
    for pod, env in pods.items():
        access = ReviewAccess.from_settings(Settings.from_env(env))
        result = approve(review_job(database_url, access), inv, "ana")
        assert not result.success, f"a Launchpad approval succeeded in the Helm recipe's {pod}"
        assert "nothing vouches for the reviewer's name" in failure_messages(result), pod
    assert status_and_reasons(database_url, inv)[0] == "needs_review"
    assert store.review.review_history(inv) == []
