"""Make sure the Debian packages the tests drive are there (run by `make test`).

Playwright cannot download its own browser here, so the browser tests drive /usr/bin/chromium;
the container image test needs podman, runc and debootstrap, the alert tests promtool and
prometheus. What is missing is installed with apt-get when we are root; otherwise say loudly
which tests will be skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

CHROMIUM = "/usr/bin/chromium"
# How the browser tests launch it: without the background-networking flags Chromium floods the
# closed network with refused connections.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


# The Debian packages other tests use, by the command each provides: the container image test
# (podman, runc, debootstrap), the alert and dashboard tests (promtool, prometheus), the hosts in
# network namespaces (ip and tc, PostgreSQL 15's server, the celery brokers redis-server and
# rabbitmq-server), the mail intake's IMAP server (dovecot-imapd), openssl (the webhook's HTTPS
# test makes its certificate). Without them those tests skip, each with a one-line reason, and
# fail under CI (the needs_tool marker,
# invoice_pipeline_tests/tools.py).
SYSTEM_TOOLS = {
    "/usr/bin/chromium": "chromium",
    "/usr/bin/podman": "podman",
    "/usr/sbin/runc": "runc",
    "/usr/sbin/debootstrap": "debootstrap",
    "/usr/bin/promtool": "prometheus",
    "/usr/sbin/ip": "iproute2",
    "/usr/lib/postgresql/15/bin/postgres": "postgresql-15",
    "/usr/bin/redis-server": "redis-server",
    "/usr/lib/rabbitmq/bin/rabbitmq-server": "rabbitmq-server",
    "/usr/sbin/dovecot": "dovecot-imapd",
    "/usr/bin/openssl": "openssl",
}


def main() -> int:
    missing = sorted({package for path, package in SYSTEM_TOOLS.items() if not os.path.exists(path)})
    if not missing:
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(
            f"!! {', '.join(missing)} missing and cannot be installed here: the tests that need them will be SKIPPED",
            file=sys.stderr,
        )
        return 0
    print(f"installing Debian {' '.join(missing)} for the tests ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            print(
                f"!! {' '.join(cmd)} failed: the tests that need {', '.join(missing)} will be SKIPPED\n"
                f"{result.stderr[-2000:]}",
                file=sys.stderr,
            )
            return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
