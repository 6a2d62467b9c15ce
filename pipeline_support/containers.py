"""Podman for the container tests (invoice_pipeline_tests/test_container_image.py and
invoice_pipeline_tests/containers/test_kube_play.py): the base image built from Debian's packages
(nothing can be pulled from a registry here), the product's image from deploy/Dockerfile, the
test-only PostgreSQL and redis images, podman secrets in the form `podman kube play` reads, and
containers run with the machine's traps avoided (see ../shared/NOTES.md, "Learned 2026-12-03":
crun and the default ulimits fail here, runc without default ulimits works).
"""

from __future__ import annotations

import base64
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# The base: Debian's python3 (3.11 on bookworm) with venv, the libraries opencv needs for OCR,
# and CA certificates for pip. The Dockerfile installs nothing with apt, so it builds offline
# from apt's point of view (pip still reaches PyPI).
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "libgl1", "libglib2.0-0")


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


# Every image is tagged by its recipe, so an edited recipe is a new image, built once, and an
# image left on the machine by an older recipe is never taken for the new one: the base by its
# suite, mirror and packages; a test image by its Containerfile and the base it is built on.
BASE_IMAGE = (
    f"localhost/invoice-pipeline-base:{DEBIAN_SUITE}-{_digest(DEBIAN_SUITE, DEBIAN_MIRROR, *BASE_PACKAGES)}"
)
# What deploy/Dockerfile is built from: what it copies from the checkout, and the rest of deploy/.
PRODUCT_CONTEXT = ("pyproject.toml", "README.md", "sql", "invoice_pipeline", "deploy")
TEST_CONTAINERS = ROOT / "invoice_pipeline_tests" / "containers"
POSTGRES_CONTAINERFILE = TEST_CONTAINERS / "postgres.Containerfile"
REDIS_CONTAINERFILE = TEST_CONTAINERS / "redis.Containerfile"


def _tagged(repository: str, containerfile: Path) -> str:
    return f"{repository}:{_digest(containerfile.read_bytes(), BASE_IMAGE)}"


@functools.cache
def product_image() -> str:
    """The product's tag, by what goes into it: the files of its build context and the base. Two
    checkouts of different code on one machine (a branch beside main, the sabotage runner's
    copies) each build and run their own image, never one the other tagged a moment later; an
    unchanged checkout finds its image instead of building it again."""
    files = sorted(
        path
        for part in PRODUCT_CONTEXT
        for path in ([ROOT / part] if (ROOT / part).is_file() else (ROOT / part).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    )
    contents = [x for path in files for x in (path.relative_to(ROOT).as_posix(), path.read_bytes())]
    return f"localhost/invoice-pipeline:{_digest(BASE_IMAGE, *contents)}"


POSTGRES_IMAGE = _tagged("localhost/invoice-pipeline-test-postgres", POSTGRES_CONTAINERFILE)
REDIS_IMAGE = _tagged("localhost/invoice-pipeline-test-redis", REDIS_CONTAINERFILE)
CONTAINERS_CONF = """\
[containers]
default_ulimits = []

[engine]
runtime = "runc"
"""


def unavailable_reason() -> str | None:
    """Why the container tests cannot run here (None when they can)."""
    for tool in ("podman", "runc", "debootstrap"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (Debian: podman runc debootstrap)"
    if os.geteuid() != 0:
        return "podman build and debootstrap need root here"
    return None


def environment(home: Path) -> dict[str, str]:
    """The environment every podman call runs with: runc and no default ulimits."""
    home.mkdir(parents=True, exist_ok=True)
    conf = home / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    return dict(os.environ, CONTAINERS_CONF=str(conf))


def podman(
    env: dict[str, str], *args: str, check: bool = True, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["podman", *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(
            f"podman {' '.join(args)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return done


def image_exists(env: dict[str, str], image: str) -> bool:
    return podman(env, "image", "exists", image, check=False).returncode == 0


# Parallel test workers (and other sessions on this machine) need the same images: the first builds,
# the others wait on this lock and then find them.
BUILD_LOCK = Path(tempfile.gettempdir()) / "invoice-pipeline-podman-build.lock"


@contextmanager
def _one_build_at_a_time() -> Iterator[None]:
    with open(BUILD_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_base_image(env: dict[str, str]) -> bool:
    """Build the base from Debian's packages with debootstrap unless podman has it already.
    Returns whether it was built now (about 3 minutes) rather than found."""
    if image_exists(env, BASE_IMAGE):
        return False
    with tempfile.TemporaryDirectory(prefix="ip-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        made = subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                DEBIAN_SUITE,
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if made.returncode != 0:
            # debootstrap says what went wrong on stdout (its log) as often as on stderr.
            raise AssertionError(
                f"debootstrap failed ({made.returncode}):\n{made.stdout[-4000:]}\n{made.stderr[-4000:]}"
            )
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["podman", "import", "-", BASE_IMAGE], stdin=tar.stdout, env=env, capture_output=True, text=True
        )
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise AssertionError(f"podman import failed: {imported.stderr}")
    return True


def pip_ca_secret() -> list[str]:
    """The host's CA bundle as the build secret `pip-ca`: this machine reaches PyPI through a
    TLS-intercepting proxy whose CA only the host trusts. A secret mount is not kept in the image."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    return ["--secret", f"id=pip-ca,src={bundle}"] if bundle.exists() else []


def _build_on_base(
    env: dict[str, str], containerfile: Path, image: str, context: Path, *secrets: str
) -> None:
    """`podman build` of a Containerfile on the Debian base, with the host's network."""
    podman(
        env,
        "build",
        "--network=host",
        *secrets,
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        "-f",
        str(containerfile),
        "-t",
        image,
        str(context),
    )


def build_image(env: dict[str, str], image: str) -> None:
    """deploy/Dockerfile on the Debian base, from the checkout (pip needs the network: host's)."""
    _build_on_base(env, ROOT / "deploy" / "Dockerfile", image, ROOT, *pip_ca_secret())


def ensure_containerfile_image(env: dict[str, str], containerfile: Path, image: str) -> None:
    """A test-only image from its Containerfile on the Debian base, unless podman has it."""
    with _one_build_at_a_time():
        _ensure_containerfile_image(env, containerfile, image)


def _ensure_containerfile_image(env: dict[str, str], containerfile: Path, image: str) -> None:
    if image_exists(env, image):
        return
    _build_on_base(env, containerfile, image, containerfile.parent)


def ensure_postgres_image(env: dict[str, str]) -> None:
    """The test's PostgreSQL image (Debian's postgresql-15 on the base), unless podman has it."""
    ensure_containerfile_image(env, POSTGRES_CONTAINERFILE, POSTGRES_IMAGE)


def ensure_redis_image(env: dict[str, str]) -> None:
    """The test's celery broker (Debian's redis-server on the base), unless podman has it."""
    ensure_containerfile_image(env, REDIS_CONTAINERFILE, REDIS_IMAGE)


@dataclass(frozen=True)
class ReadyImage:
    """The product's image, ready: built now or found, and the base under it."""

    image: str
    base_built: bool
    base_seconds: float
    image_built: bool
    image_seconds: float

    def describe(self) -> str:
        def said(built: bool) -> str:
            return "built" if built else "found"

        return (
            f"base image {said(self.base_built)} in {self.base_seconds:.0f} s; "
            f"image {said(self.image_built)} in {self.image_seconds:.0f} s ({self.image})"
        )


def ready_image(env: dict[str, str]) -> ReadyImage:
    """The base (debootstrap only when podman lacks it), then the product's image on it from
    deploy/Dockerfile unless podman has it for this checkout's contents."""
    with _one_build_at_a_time():
        return _ready_image(env)


def _ready_image(env: dict[str, str]) -> ReadyImage:
    image = product_image()
    t = time.monotonic()
    built = ensure_base_image(env)
    base_s = time.monotonic() - t
    t = time.monotonic()
    image_built = not image_exists(env, image)
    if image_built:
        build_image(env, image)
    return ReadyImage(image, built, base_s, image_built, time.monotonic() - t)


def build_every_image(env: dict[str, str]) -> ReadyImage:
    """Every image the container tests use, under one hold of the build lock: the base, the
    product's image from the checkout, the test PostgreSQL and redis. `make test` runs this in the
    background from its first minute (`python -m pipeline_support.containers`, started by
    invoice_pipeline_tests/scheduling.py); the tests' own ready_image and ensure_* calls wait on the
    lock, then find the images (the product's tagged by the checkout's contents, so never stale)
    or build what is still missing themselves."""
    with _one_build_at_a_time():
        ready = _ready_image(env)
        _ensure_containerfile_image(env, POSTGRES_CONTAINERFILE, POSTGRES_IMAGE)
        _ensure_containerfile_image(env, REDIS_CONTAINERFILE, REDIS_IMAGE)
        return ready


# -- podman kube play ----------------------------------------------------------------------------


def create_secret(env: dict[str, str], name: str, values: dict[str, str]) -> None:
    """A podman secret `podman kube play` gives to `secretRef`/`secretKeyRef` as the Kubernetes
    secret `name`. Podman 4.3 reads its data as a JSON object of base64 values (the `data` of a
    Kubernetes Secret); a YAML Secret is refused ("not valid JSON"). Given on stdin: the values
    never touch the disk outside podman's own secret store."""
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    done = subprocess.run(
        ["podman", "secret", "create", name, "-"],
        input=json.dumps(data),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise AssertionError(f"podman secret create {name} failed: {done.stderr}")


def remove_secret(env: dict[str, str], name: str) -> None:
    podman(env, "secret", "rm", name, check=False, timeout=60)


def kube_play(env: dict[str, str], manifest: Path) -> str:
    """Start the manifest's pods (`podman kube play`); returns podman's report."""
    return podman(env, "kube", "play", str(manifest), timeout=600).stdout


def kube_down(env: dict[str, str], manifest: Path) -> None:
    """Stop and remove the manifest's pods, whatever state they are in (never raises)."""
    podman(env, "kube", "down", str(manifest), check=False, timeout=300)


def pod_container(pod: str, container: str) -> str:
    """The name podman gives a pod's container. A Deployment's pods are `<name>-pod-<i>`, one
    per replica, and their host name is the pod's name."""
    return f"{pod}-{container}"


def container_state(env: dict[str, str], name: str) -> dict[str, object]:
    """`podman inspect`'s State of a container (Status, ExitCode, ...); empty when it is gone."""
    done = podman(env, "container", "inspect", name, check=False, timeout=60)
    if done.returncode != 0:
        return {}
    (inspected,) = json.loads(done.stdout)
    return dict(inspected.get("State") or {})


def container_logs(env: dict[str, str], name: str, tail: int = 60) -> str:
    done = podman(env, "logs", "--tail", str(tail), name, check=False, timeout=60)
    return done.stdout + done.stderr


def main() -> int:
    """`python -m pipeline_support.containers`: build_every_image, saying what it did. Its output
    is the background build's log; a failure exits 1 with podman's or debootstrap's output."""
    with tempfile.TemporaryDirectory(prefix="ip-podman-build-") as home:
        started = time.monotonic()
        ready = build_every_image(environment(Path(home)))
        print(f"{ready.describe()}; every image ready after {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
