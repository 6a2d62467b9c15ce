"""Make sure Debian's Chromium is there for the browser tests (run by `make test`).

Playwright cannot download its own browser here, so the tests drive /usr/bin/chromium. When
it is missing and we are root, install it with apt-get; otherwise say loudly why the browser
tests will be skipped.
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


def main() -> int:
    if os.path.exists(CHROMIUM):
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        print(
            f"!! {CHROMIUM} is missing and cannot be installed here: browser tests will be SKIPPED",
            file=sys.stderr,
        )
        return 0
    print("installing Debian chromium for the browser tests ...", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        result = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            print(
                f"!! {' '.join(cmd)} failed: browser tests will be SKIPPED\n{result.stderr[-2000:]}",
                file=sys.stderr,
            )
            return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
