"""The production recipe (deploy/Dockerfile, deploy/helm/values.yaml) stays in step with the code.

The Helm values cannot be installed on this machine kind (no Kubernetes), and the image is built
and run by invoice_pipeline_tests/test_container_image.py only where podman is: these checks keep
both honest everywhere. Every module they run exists; every INVOICE_PIPELINE_*
variable they name is one the code reads; the Dagster libraries they pin pair with the pinned
dagster; the deployment's image is the Dockerfile's.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from invoice_pipeline import config
from invoice_pipeline.orchestration import celery_jobs

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
VALUES = ROOT / "deploy" / "helm" / "values.yaml"


def _known_env_names() -> set[str]:
    names = {v for k, v in vars(config).items() if k.startswith("ENV_") and isinstance(v, str)}
    names |= {v for k, v in vars(celery_jobs).items() if k.startswith("ENV_") and isinstance(v, str)}
    return names


def _modules(text: str) -> set[str]:
    """Python modules a command line names: `-m MOD`, `-A MOD`, and quoted invoice_pipeline.* paths."""
    found = set(re.findall(r"(?:-m|-A)\"?,?\s*\"?(invoice_pipeline[\w.]*)", text))
    found |= set(re.findall(r"\"(invoice_pipeline\.[\w.]+)\"", text))
    return found


def test_every_module_the_recipe_runs_exists() -> None:
    for path in (DOCKERFILE, VALUES):
        modules = _modules(path.read_text())
        assert "invoice_pipeline.orchestration.definitions" in modules, path
        for module in modules:
            assert importlib.util.find_spec(module) is not None, (
                f"{path.name} runs {module}, which does not exist"
            )


def test_the_default_code_location_is_the_one_dagster_loads_locally() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    module = pyproject["tool"]["dagster"]["module_name"]
    cmd = next(line for line in DOCKERFILE.read_text().splitlines() if line.startswith("CMD"))
    assert cmd.endswith(f'"-m", "{module}"]'), cmd
    values = yaml.safe_load(VALUES.read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", module]


def test_every_invoice_pipeline_variable_named_is_one_the_code_reads() -> None:
    known = _known_env_names()
    for path in (DOCKERFILE, VALUES):
        named = set(re.findall(r"\bINVOICE_PIPELINE_[A-Z_]+\b", path.read_text()))
        assert named, path
        unknown = named - known
        assert not unknown, f"{path.name} names {sorted(unknown)}, which nothing in the code reads"


def test_values_set_only_valid_settings() -> None:
    values = yaml.safe_load(VALUES.read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    config.Settings.from_env(env)  # raises ConfigError on a malformed value
    launcher_env = dict(v.split("=", 1) for v in values["runLauncher"]["config"]["k8sRunLauncher"]["envVars"])
    config.Settings.from_env(launcher_env)
    assert values["postgresql"]["enabled"] is False, "Dagster's storage is the external PostgreSQL"


def test_dagster_libraries_pinned_in_the_image_pair_with_the_pinned_dagster() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    core = re.search(r'"dagster==1\.(\d+)\.(\d+)"', pyproject)
    assert core is not None
    library = f"0.{int(core.group(1)) + 16}.{core.group(2)}"
    pins = re.findall(r"dagster-[a-z0-9-]+==([\d.]+)", DOCKERFILE.read_text())
    assert pins and all(p == library for p in pins), (pins, library)
    assert f"dagster-celery=={library}" in pyproject


def test_the_deployment_image_is_the_dockerfile_s_and_python_matches() -> None:
    values = yaml.safe_load(VALUES.read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert deployment["image"]["repository"].endswith("/invoice-pipeline")
    assert "deploy/Dockerfile" in VALUES.read_text()
    # The base is a build argument (the tests build on a Debian base), by default the slim Python.
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", DOCKERFILE.read_text(), re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", DOCKERFILE.read_text(), re.M)
    # The Helm values are not run here: the file says so at the top. The image is built and run
    # by test_container_image.py.
    assert "NOT RUN HERE" in VALUES.read_text()[:1200]


def _job_names(env: dict[str, str]) -> set[str]:
    """The code location's jobs as a fresh interpreter loads them with `env`: Dagster keeps a
    process-wide definitions-load context, which an earlier test's instance may have left behind."""
    script = (
        "from invoice_pipeline.orchestration.definitions import defs\n"
        "print(' '.join(j.name for j in defs.get_repository_def().get_all_jobs()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(done.stdout.split())


def test_the_production_code_location_has_no_launchpad_approvals() -> None:
    """Dagster's webserver has no login: a Launchpad review job would let anyone who reaches it
    approve any org's invoice under any name. The deployed code location leaves them out
    (issue 41); a development one (the variable unset) keeps them."""
    from invoice_pipeline.orchestration.review_jobs import CORRECT_INVOICE, REQUEUE_INVOICES, REVIEW_INVOICE

    approvals = {REVIEW_INVOICE, CORRECT_INVOICE, REQUEUE_INVOICES}
    values = yaml.safe_load(VALUES.read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    deployed = {e["name"]: e["value"] for e in deployment["env"]}
    launched = dict(v.split("=", 1) for v in values["runLauncher"]["config"]["k8sRunLauncher"]["envVars"])
    for env in (deployed, launched):
        assert config.Settings.from_env(env).review_jobs is False
    development = {k: v for k, v in os.environ.items() if k != config.ENV_REVIEW_JOBS}
    jobs = _job_names(development | {config.ENV_REVIEW_JOBS: deployed[config.ENV_REVIEW_JOBS]})
    assert "process_invoice" in jobs and not jobs & approvals
    assert approvals <= _job_names(development)
    with pytest.raises(config.ConfigError):
        config.Settings.from_env({config.ENV_REVIEW_JOBS: "false"})
