"""The alerts and the dashboard (deploy/prometheus/, deploy/grafana/), against real Prometheus tools.

* `promtool test rules`: every alert in alerts.yml has unit tests (alerts_test.yml) that show it
  firing, and they pass.
* End to end: a real `prometheus` scrapes a running `invoice-pipeline metrics` over a real
  database, with the real alerts.yml (only its `for:` durations cut to 0 so the test needs no
  minutes). The backlog scenario is played: invoices due, then their due time back-dated two
  hours; InvoiceOldestDueTooOld is seen firing through Prometheus' API, after it was seen quiet.
  Then every expression of the Grafana dashboard is run through `promtool query instant`
  against that Prometheus, and every metric it names is one the endpoint declares (a labelled
  family with no series yet, such as postings before the first one, is declared all the same).

Skipped with a one-line reason where promtool or prometheus is missing (Debian: `prometheus`).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support.factories import json_invoice
from pipeline_support.helpers import (
    answers,
    cli_environment,
    free_port,
    start_cli_server,
    stop_process_group,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[1]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "invoice-pipeline.json"
METRIC_NAME = re.compile(r"\b(?:invoice_pipeline_[a-z_]+|up)\b")

needs_promtool = needs_tool(
    "promtool", None if shutil.which("promtool") else "not installed (Debian: prometheus)"
)
needs_prometheus = needs_tool(
    "prometheus and promtool",
    None if shutil.which("prometheus") and shutil.which("promtool") else "not installed (Debian: prometheus)",
)


def alert_names() -> list[str]:
    return [
        r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r
    ]


def dashboard_expressions() -> list[str]:
    return [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]


@needs_promtool
def test_every_alert_has_a_promtool_test_that_fires_it_and_they_pass() -> None:
    tests = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    fired = {
        case["alertname"] for t in tests for case in t.get("alert_rule_test", []) if case.get("exp_alerts")
    }
    assert set(alert_names()) <= fired, f"alerts never shown firing: {set(alert_names()) - fired}"
    done = subprocess.run(
        ["promtool", "test", "rules", ALERTS_TEST.name],
        cwd=ALERTS_TEST.parent,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


@pytest.fixture
def metrics_endpoint(tmp_path: Path, database_url: str) -> Iterator[int]:
    """`invoice-pipeline metrics` serving the test database on a free loopback port."""
    port = free_port()
    with cli_environment(tmp_path / "home", database_url) as env:
        log = tmp_path / "metrics.log"
        proc = start_cli_server(
            ["metrics", "--port", str(port)],
            env,
            log,
            f"http://127.0.0.1:{port}/metrics",
            timeout=60,
            interval=0.1,
        )
        try:
            assert proc.poll() is None, log.read_text()
            yield port
        finally:
            stop_process_group(proc)


@pytest.fixture
def prometheus(tmp_path: Path, metrics_endpoint: int) -> Iterator[str]:
    """A real Prometheus scraping the endpoint every second, with alerts.yml (`for:` cut to 0)."""
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            rule.pop("for", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp_path / "alerts.yml")],
        "scrape_configs": [
            {
                "job_name": "invoice-pipeline",
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_endpoint}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    with open(tmp_path / "prometheus.log", "w") as log:
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: proc.poll() is not None or answers(f"{url}/-/ready"),
            timeout=60,
            interval=0.2,
            what="prometheus",
        )
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
        yield url
    finally:
        stop_process_group(proc)


def declared_names(metrics_url: str) -> set[str]:
    """The sample names the endpoint's families declare (a counter's _total, a histogram's parts)."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    return {
        family.name + suffix
        for family in text_string_to_metric_families(text)
        for suffix in suffixes.get(family.type, ("",))
    }


def alerts_firing(url: str) -> set[str]:
    return {
        a["labels"]["alertname"]
        for a in get_json(f"{url}/api/v1/alerts")["data"]["alerts"]
        if a["state"] == "firing"
    }


def latest(url: str, expr: str) -> float | None:
    result = get_json(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["data"]["result"]
    return float(result[0]["value"][1]) if result else None


@needs_prometheus
def test_prometheus_scrapes_the_product_and_an_alert_fires(
    prometheus: str, metrics_endpoint: int, store: InvoiceStore, database_url: str
) -> None:
    ids = [
        store.documents.store_document(
            json_invoice(f"PR-{n}", total=f"{10 + n}.00"), "acme", f"{n}.json"
        ).invoice_id
        for n in range(3)
    ]
    # Quiet first: three due, the oldest for seconds, as seen by a scrape and a rule evaluation.
    wait_for(
        lambda: latest(prometheus, "invoice_pipeline_due_invoices") == 3,
        timeout=60,
        interval=0.5,
        what="a scrape showing the 3 due invoices",
    )
    rule_ran = wait_for(
        lambda: [
            g
            for g in get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
            if g.get("lastEvaluation", "").startswith("2")
        ],
        timeout=30,
        interval=0.5,
        what="a rule evaluation",
    )
    assert rule_ran and "InvoiceOldestDueTooOld" not in alerts_firing(prometheus)

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE invoices SET next_attempt_at = now() - interval '2 hours' WHERE id = ANY(%s)", (ids,)
        )
    wait_for(
        lambda: "InvoiceOldestDueTooOld" in alerts_firing(prometheus),
        timeout=60,
        interval=0.5,
        what="InvoiceOldestDueTooOld firing in Prometheus",
    )
    age = latest(prometheus, "invoice_pipeline_oldest_due_age_seconds")
    assert age is not None and age >= 7200

    scraped = set(get_json(f"{prometheus}/api/v1/label/__name__/values")["data"])
    declared = declared_names(f"http://127.0.0.1:{metrics_endpoint}/metrics")
    assert "invoice_pipeline_due_invoices" in scraped and "up" in scraped
    for expr in dashboard_expressions():
        done = subprocess.run(
            ["promtool", "query", "instant", prometheus, expr], capture_output=True, text=True
        )
        assert done.returncode == 0, f"{expr}: {done.stderr}"
        named = set(METRIC_NAME.findall(expr))
        assert named and named <= declared | {"up"}, (
            f"{expr} names {named - declared}, which the endpoint lacks"
        )
