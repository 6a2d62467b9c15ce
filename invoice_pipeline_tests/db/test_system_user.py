"""The embedded server's system user, made by whichever process needs it first (as root).

On a fresh machine the test suite's workers start their servers at once; each looked the user up,
found none and ran useradd. useradd does not serialise itself: a later one rewrote /etc/passwd
from what it had read, so the uid an earlier process had just chowned its files to was given to
nobody and the user came back with another. That worker's initdb could not read its own password
file, and every test on it errored (a fresh-machine run of 2026-12-05: 351 errors).
"""

from __future__ import annotations

import multiprocessing
import os
import pwd
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.common import worker_context
from invoice_pipeline.db.embedded import ensure_system_user
from invoice_pipeline_tests.tools import needs_tool

pytestmark = needs_tool("root", None if os.geteuid() == 0 else "only root creates system users")

PROCESSES = 4
ROUNDS = 8


def _make_and_look(
    name: str, start: multiprocessing.synchronize.Barrier, seen: multiprocessing.Queue
) -> None:
    start.wait(timeout=60)
    ensure_system_user(name)
    seen.put(pwd.getpwnam(name).pw_uid)


@pytest.fixture
def names() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    for name in made:
        subprocess.run(["userdel", name], capture_output=True)
        subprocess.run(["groupdel", name], capture_output=True)


def _entries(name: str) -> int:
    return sum(1 for line in Path("/etc/passwd").read_text().splitlines() if line.split(":", 1)[0] == name)


def test_processes_making_the_user_at_once_all_get_the_one_it_ends_as(names: list[str]) -> None:
    context = worker_context()
    for _ in range(ROUNDS):
        name = f"ip_test_{secrets.token_hex(4)}"
        names.append(name)
        start = context.Barrier(PROCESSES)
        seen: multiprocessing.Queue = context.Queue()
        workers = [context.Process(target=_make_and_look, args=(name, start, seen)) for _ in range(PROCESSES)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
            assert worker.exitcode == 0, f"a process making {name} failed (exit {worker.exitcode})"
        uids = [seen.get(timeout=10) for _ in workers]
        assert _entries(name) == 1
        # What each process was told is who the user still is: files chowned to it stay its own.
        assert set(uids) == {pwd.getpwnam(name).pw_uid}, (name, uids, pwd.getpwnam(name).pw_uid)
