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
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from invoice_pipeline import config
from invoice_pipeline.orchestration import celery_jobs
from pipeline_support.helpers import free_port, start_cli_server, stop_process_group

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


def _job_names(env: dict[str, str], module: str = "invoice_pipeline.orchestration.definitions") -> set[str]:
    """The code location's jobs as a fresh interpreter loads them with `env`: Dagster keeps a
    process-wide definitions-load context, which an earlier test's instance may have left behind."""
    script = (
        f"from {module} import defs\n"
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
    (issue 41); a development one (the variable unset) keeps them. The recipe also names the
    production deployment, in which a Launchpad review run acts for nobody, should the jobs be
    put back."""
    from invoice_pipeline.orchestration.review_jobs import CORRECT_INVOICE, REQUEUE_INVOICES, REVIEW_INVOICE

    approvals = {REVIEW_INVOICE, CORRECT_INVOICE, REQUEUE_INVOICES}
    values = yaml.safe_load(VALUES.read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    deployed = {e["name"]: e["value"] for e in deployment["env"]}
    launched = dict(v.split("=", 1) for v in values["runLauncher"]["config"]["k8sRunLauncher"]["envVars"])
    for env in (deployed, launched):
        assert config.Settings.from_env(env).review_jobs is False
        assert config.Settings.from_env(env).deployment == "production"
    development = {k: v for k, v in os.environ.items() if k != config.ENV_REVIEW_JOBS}
    jobs = _job_names(development | {config.ENV_REVIEW_JOBS: deployed[config.ENV_REVIEW_JOBS]})
    assert "process_invoice" in jobs and not jobs & approvals
    assert approvals <= _job_names(development)
    with pytest.raises(config.ConfigError):
        config.Settings.from_env({config.ENV_REVIEW_JOBS: "false"})


# -- the Kubernetes manifests (deploy/kube/), run by containers/test_kube_play.py ------------------

KUBE = ROOT / "deploy" / "kube"
DEPLOYMENT = KUBE / "invoice-pipeline.yaml"
PRODUCTION_INSTANCE = ROOT / "deploy" / "dagster.production.yaml"
BACKING = ROOT / "invoice_pipeline_tests" / "containers" / "backing.yaml"
# Every container that loads the code location (or runs its steps) and must see the settings.
CODE_CONTAINERS = {"code", "webserver", "daemon", "celery"}


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _containers(path: Path) -> dict[str, dict]:
    found: dict[str, dict] = {}
    for doc in _documents(path):
        spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc.get("spec", {})
        for container in spec.get("containers", []):
            found[container["name"]] = container
    return found


def _config_map(name: str) -> dict[str, str]:
    (config_map,) = [
        d for d in _documents(DEPLOYMENT) if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name
    ]
    return config_map["data"]


def test_the_manifests_pass_the_kubernetes_schemas_strictly() -> None:
    """Offline (kubernetes-validate ships the schemas): an unknown field is an error, not ignored."""
    import kubernetes_validate

    kinds = []
    for path in sorted(KUBE.glob("*.yaml")) + [BACKING]:
        for doc in _documents(path):
            kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
            kinds.append((path.name, doc["kind"], doc["metadata"]["name"]))
    assert ("invoice-pipeline.yaml", "Deployment", "worker") in kinds
    assert ("migrate.yaml", "Pod", "invoice-pipeline-migrate") in kinds
    (worker,) = [d for d in _documents(DEPLOYMENT) if d["metadata"]["name"] == "worker"]
    assert worker["spec"]["replicas"] == 2


def test_the_manifests_run_what_the_helm_values_run() -> None:
    values = yaml.safe_load(VALUES.read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    image = f"{deployment['image']['repository']}:{deployment['image']['tag']}"
    pods = {**_containers(DEPLOYMENT), **_containers(KUBE / "migrate.yaml")}
    assert set(pods) == CODE_CONTAINERS | {"migrate", "review", "auth-proxy"}
    assert {c["image"] for name, c in pods.items() if name != "auth-proxy"} == {image}
    helm_env = {e["name"]: e["value"] for e in deployment["env"]}
    secrets = {s["name"] for s in deployment["envSecrets"]}
    for name in CODE_CONTAINERS:
        env = {e["name"]: e["value"] for e in pods[name]["env"]}
        assert {k: env.get(k) for k in helm_env} == helm_env, f"{name}: settings differ from the Helm values"
        config.Settings.from_env(env)
        assert config.Settings.from_env(env).review_jobs is False, name
        assert secrets <= {s["secretRef"]["name"] for s in pods[name]["envFrom"]}, name
    # The code server: the values' port, the celery location their comment points to.
    code = pods["code"]["command"]
    assert code[:3] == ["dagster", "api", "grpc"] and code[code.index("-p") + 1] == str(deployment["port"])
    assert code[-2:] == ["-m", "invoice_pipeline.orchestration.celery_definitions"]
    workspace = yaml.safe_load(_config_map("dagster-instance")["workspace.yaml"])
    assert workspace["load_from"][0]["grpc_server"]["port"] == deployment["port"]
    # The run workers: the command the values give for the celery workers, word for word.
    comment = re.search(r"#\s+command: (\[.*?\])\n", VALUES.read_text(), re.S)
    assert comment is not None
    worker_command = yaml.safe_load(re.sub(r"\n#\s+", " ", comment.group(1)))
    assert pods["celery"]["command"][: len(worker_command)] == worker_command


def test_the_instance_config_agrees_with_the_production_one() -> None:
    """The ConfigMap's dagster.yaml is deploy/dagster.production.yaml but for the run launcher
    (Dagster's default here: runs in the code server's container, steps on the celery workers)."""
    production = yaml.safe_load(PRODUCTION_INSTANCE.read_text())
    instance = yaml.safe_load(_config_map("dagster-instance")["dagster.yaml"])
    assert "run_launcher" not in instance
    # Where Dagster writes may differ (the ConfigMap is read-only); nothing else.
    written = {"local_artifact_storage", "compute_logs"}
    assert {k: v for k, v in production.items() if k != "run_launcher"} == {
        k: v for k, v in instance.items() if k not in written
    }


def test_the_manifests_code_server_loads_no_launchpad_approvals() -> None:
    """Issue 53: the code container's module, loaded as the container loads it (its environment;
    the secrets' database URL a placeholder, loading connects to nothing), serves the pipeline's
    jobs and no Launchpad review job."""
    from invoice_pipeline.orchestration.review_jobs import CORRECT_INVOICE, REQUEUE_INVOICES, REVIEW_INVOICE

    code = _containers(DEPLOYMENT)["code"]
    module = code["command"][code["command"].index("-m") + 1]
    own = {k: v for k, v in os.environ.items() if not k.startswith("INVOICE_PIPELINE_")}
    secrets = {config.ENV_DATABASE_URL: "postgresql://nobody@127.0.0.1:9/none"}
    jobs = _job_names(own | secrets | {e["name"]: e["value"] for e in code["env"]}, module)
    assert "process_invoice_batch_celery" in jobs, jobs
    assert not jobs & {REVIEW_INVOICE, CORRECT_INVOICE, REQUEUE_INVOICES}, jobs


def test_the_manifests_dagster_instance_runs_run_monitoring(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 53: the ConfigMap's dagster.yaml, loaded by Dagster as the daemon loads it (storage in
    the test's database, written folders in tmp_path), makes the daemon run run monitoring: what
    ends a celery run past its deadline, or one whose worker never started it."""
    from dagster import DagsterInstance

    instance_yaml = yaml.safe_load(_config_map("dagster-instance")["dagster.yaml"])
    for key in ("local_artifact_storage", "compute_logs"):
        instance_yaml[key]["config"]["base_dir"] = str(tmp_path / key)
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(instance_yaml))
    monkeypatch.setenv("DAGSTER_PG_URL", database_url.replace("postgresql://", "postgresql+psycopg2://", 1))
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_monitoring_enabled
        assert "MONITORING" in instance.get_required_daemon_types()


def test_the_manifests_review_page_is_reachable_only_through_its_authenticating_proxy() -> None:
    """Issue 41: the review page deployed behind authentication. It listens on the pod's
    loopback and trusts the user header from there only; the proxy is the pod's one port."""
    from invoice_pipeline.engine.reviewers import load_users

    pods = _containers(DEPLOYMENT)
    review = pods["review"]["command"]
    assert review[:2] == ["invoice-pipeline", "review-ui"]
    assert review[review.index("--host") + 1] == "127.0.0.1"
    assert "--trusted-proxy" not in review  # loopback only, the default
    assert review[review.index("--proxy-header") + 1] == "X-Forwarded-User"
    assert review[review.index("--allowed-host") + 1]
    assert "ports" not in pods["review"] and pods["auth-proxy"]["ports"]
    proxy = pods["auth-proxy"]["args"]
    assert f"--upstream=http://127.0.0.1:{review[review.index('--port') + 1]}/" in proxy
    assert "--pass-user-headers=true" in proxy
    users = _review_users(pods["review"])
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"review-users-{os.getpid()}.json"
    tmp.write_text(users)
    try:
        assert load_users(tmp, passwords=False)  # proxy mode: names and orgs, no passwords
    finally:
        tmp.unlink()
    assert "password" not in users


def _review_users(review: dict) -> str:
    """The users file the review container reads: from the ConfigMap its volume mounts."""
    command = review["command"]
    users_file = Path(command[command.index("--users") + 1])
    mount = next(m for m in review["volumeMounts"] if m["mountPath"] == str(users_file.parent))
    (deployment,) = [
        d for d in _documents(DEPLOYMENT) if d["kind"] == "Deployment" and d["metadata"]["name"] == "review"
    ]
    (source,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    return _config_map(source["configMap"]["name"])[users_file.name]


def test_the_manifests_review_page_answers_on_its_pods_loopback_only(
    database_url: str, tmp_path: Path
) -> None:
    """Issue 53: the review container's own command, run here (a free port for its 3100, its users
    file from the ConfigMap, the test's database), answers on 127.0.0.1 and refuses a connection to
    any other address of the machine (127.0.0.2 stands for the pod's own IP): only the proxy in its
    pod reaches it."""
    review = _containers(DEPLOYMENT)["review"]
    command = list(review["command"])
    port = free_port()
    command[command.index("--port") + 1] = str(port)
    users_at = command.index("--users") + 1
    users = tmp_path / Path(command[users_at]).name
    users.write_text(_review_users(review))
    command[users_at] = str(users)
    assert command[0] == "invoice-pipeline"
    env = os.environ | {config.ENV_DATABASE_URL: database_url}
    log = tmp_path / "review.log"
    proc = start_cli_server(command[1:], env, log, f"http://127.0.0.1:{port}/healthz", timeout=180)
    try:
        assert proc.poll() is None, log.read_text()[-3000:]
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", port), timeout=10).close()
    finally:
        stop_process_group(proc)
