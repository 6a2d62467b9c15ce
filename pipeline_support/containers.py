"""Podman for the container tests (invoice_pipeline_tests/test_container_image.py): the base image
built from Debian's packages (nothing can be pulled from a registry here), the product's image
from deploy/Dockerfile, and containers run with the machine's traps avoided (see
../shared/NOTES.md, "Learned 2026-12-03": crun and the default ulimits fail here, runc without
default ulimits works).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "localhost/invoice-pipeline-base:bookworm"
IMAGE = "localhost/invoice-pipeline:test"
POSTGRES_CONTAINERFILE = ROOT / "invoice_pipeline_tests" / "containers" / "postgres.Containerfile"
# Tagged by the Containerfile's content: an edited recipe is a new image, built once.
POSTGRES_IMAGE = (
    "localhost/invoice-pipeline-test-postgres:"
    + hashlib.sha256(POSTGRES_CONTAINERFILE.read_bytes()).hexdigest()[:12]
)
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# The base: Debian's python3 (3.11 on bookworm) with venv, the libraries opencv needs for OCR,
# and CA certificates for pip. The Dockerfile installs nothing with apt, so it builds offline
# from apt's point of view (pip still reaches PyPI).
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "libgl1", "libglib2.0-0")
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


def ensure_base_image(env: dict[str, str]) -> bool:
    """Build the base from Debian's packages with debootstrap unless podman has it already.
    Returns whether it was built now (about 3 minutes) rather than found."""
    if image_exists(env, BASE_IMAGE):
        return False
    with tempfile.TemporaryDirectory(prefix="ip-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(BASE_PACKAGES)}",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            check=True,
            capture_output=True,
            timeout=1800,
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


def build_image(env: dict[str, str], image: str = IMAGE) -> None:
    """deploy/Dockerfile on the Debian base, from the checkout (pip needs the network: host's)."""
    podman(
        env,
        "build",
        "--network=host",
        *pip_ca_secret(),
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        "-f",
        str(ROOT / "deploy" / "Dockerfile"),
        "-t",
        image,
        str(ROOT),
    )


def ensure_postgres_image(env: dict[str, str]) -> None:
    """The test's PostgreSQL image (Debian's postgresql-15 on the base), unless podman has it."""
    if not image_exists(env, POSTGRES_IMAGE):
        podman(
            env,
            "build",
            "--network=host",
            "--build-arg",
            f"BASE_IMAGE={BASE_IMAGE}",
            "-f",
            str(POSTGRES_CONTAINERFILE),
            "-t",
            POSTGRES_IMAGE,
            str(POSTGRES_CONTAINERFILE.parent),
        )
