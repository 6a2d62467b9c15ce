"""`invoice-pipeline dev` started in the background by a script stops on SIGTERM (issue 26).

A non-interactive shell starts `cmd &` with SIGINT (and SIGQUIT) ignored, and the children
inherit that. dagster dev maps SIGTERM onto whatever SIGINT does, so before the fix the whole
tree ignored SIGTERM too and stayed until SIGKILL.

The processes are found through /proc: every process the tree starts inherits the test's
marker variable, so one that was reparented (its parent died first) or left the process group
(a session of its own) is still seen.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline_support.helpers import answers, cli_environment, free_port, wait_for

CONSOLE_SCRIPT = Path(sys.executable).parent / "invoice-pipeline"
MARKER = "INVOICE_PIPELINE_TEST_DEV_TREE"
SIGINT_BIT = 1 << (signal.SIGINT - 1)
# A failure bound, not a performance target: `dev` itself SIGKILLs what is left after
# DEV_STOP_GRACE_SECONDS (20 s).
STOP_BOUND_SECONDS = 60


def _proc_file(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # gone, or a kernel thread
        return b""


def _state(pid: int) -> str:
    for line in _proc_file(pid, "status").decode(errors="replace").splitlines():
        if line.startswith("State:"):
            return line.split()[1]
    return ""


def _ignores_sigint(pid: int) -> bool:
    for line in _proc_file(pid, "status").decode(errors="replace").splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & SIGINT_BIT)
    return False


def marked_processes(marker: str) -> list[int]:
    """Live processes (zombies are dead) whose environment carries MARKER=marker."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        if needle in _proc_file(pid, "environ").split(b"\0") and _state(pid) not in ("", "Z", "X"):
            found.append(pid)
    return found


def _command_line(pid: int) -> str:
    return _proc_file(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace").strip()


def _describe(pids: list[int]) -> str:
    return "; ".join(f"{pid}: {_command_line(pid)[:150]}" for pid in pids)


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> Iterator[dict[str, str]]:
    with cli_environment(
        tmp_path / "home",
        database_url,
        DAGSTER_HOME=str(tmp_path / "home" / "dagster_home"),
        **{MARKER: uuid.uuid4().hex},
    ) as values:
        yield values
        # Whatever the outcome, nothing of this test outlives it.
        for pid in marked_processes(values[MARKER]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def start_in_background_like_a_script(env: dict[str, str], *command: str) -> int:
    """`command &` in a non-interactive bash (no job control), in a session of its own; its pid."""
    launched = subprocess.run(
        ["bash", "-c", '"$@" </dev/null >"$LOG" 2>&1 &\necho $!', "bash", *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    assert launched.returncode == 0, launched.stderr
    return int(launched.stdout)


def test_a_script_backgrounds_commands_with_sigint_ignored(env: dict[str, str], tmp_path: Path) -> None:
    """The precondition the next test relies on: bash's `cmd &` in a script ignores SIGINT."""
    pid = start_in_background_like_a_script(dict(env, LOG=str(tmp_path / "sleep.log")), "sleep", "300")
    try:
        # The shell sets the dispositions between fork and exec: read them once `sleep` runs.
        wait_for(lambda: _command_line(pid).startswith("sleep"), timeout=10, what="sleep to start")
        assert _ignores_sigint(pid)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_dev_started_by_a_script_stops_everything_on_sigterm(env: dict[str, str], tmp_path: Path) -> None:
    """SIGTERM to `invoice-pipeline dev` (started as `invoice-pipeline dev &` by a script) ends
    it, dagster dev, the webserver, the daemon and the code server within the bound.

    Fails without the fix: with cmd_dev's old Popen/forwarding (handlers installed after the
    child started, no escalation), dagster dev and its children inherit SIGINT ignored, the
    SIGTERM is ignored, and all of them are still running at the bound (checked once by
    restoring the old cmd_dev)."""
    port = free_port()
    log = tmp_path / "dev.log"
    dev = start_in_background_like_a_script(
        dict(env, LOG=str(log)),
        str(CONSOLE_SCRIPT),
        "dev",
        "--port",
        str(port),
        "--review-port",
        str(free_port()),
    )
    marker = env[MARKER]
    wait_for(
        lambda: dev not in marked_processes(marker) or answers(f"http://127.0.0.1:{port}/server_info"),
        timeout=180,
        interval=0.2,
        what="invoice-pipeline dev to answer /server_info",
    )
    assert dev in marked_processes(marker), f"dev exited early: {log.read_text()[-3000:]}"
    tree = marked_processes(marker)
    # dev, dagster dev, the webserver and the daemon at least.
    assert len(tree) >= 4, _describe(tree)
    assert not [pid for pid in tree if pid != dev and _ignores_sigint(pid)], (
        "dev's children must start with SIGINT at its default, whatever dev inherited"
    )

    os.kill(dev, signal.SIGTERM)
    try:
        wait_for(
            lambda: not marked_processes(marker),
            timeout=STOP_BOUND_SECONDS,
            interval=0.2,
            what="every process `dev` started to exit after SIGTERM",
        )
    except AssertionError:
        left = marked_processes(marker)
        raise AssertionError(f"still running: {_describe(left)}\n{log.read_text()[-3000:]}") from None
