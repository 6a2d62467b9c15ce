"""Forked workers: every child's messages arrive, a failing or dying child is reported, and a
child never outlives its parent (a `kill -9` of `invoice-pipeline process` stops all its work)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from invoice_pipeline.engine.runs import RunShape
from invoice_pipeline.forked import ChildFailed, run_forked
from pipeline_support.helpers import wait_for


def _pid_of(index: int, send: Callable[[Any], None]) -> None:
    send((index, os.getpid(), os.getppid()))


def test_every_child_reports_from_its_own_process() -> None:
    got = sorted(run_forked(3, _pid_of))
    assert [index for index, _, _ in got] == [0, 1, 2]
    assert len({pid for _, pid, _ in got}) == 3 and os.getpid() not in {pid for _, pid, _ in got}
    assert {parent for _, _, parent in got} == {os.getpid()}


def _raises(index: int, send: Callable[[Any], None]) -> None:
    send(index)
    if index == 1:
        raise ValueError("a broken worker")


def test_a_child_that_raises_fails_the_whole_with_its_traceback() -> None:
    with pytest.raises(ChildFailed, match="ValueError: a broken worker"):
        list(run_forked(2, _raises))


def _dies(index: int, send: Callable[[Any], None]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_child_killed_without_a_word_is_reported_not_waited_for() -> None:
    with pytest.raises(ChildFailed, match="died"):
        list(run_forked(2, _dies))


PARENT = textwrap.dedent(
    """
    import os, signal, sys
    from invoice_pipeline.forked import run_forked

    def work(index, send):
        send(os.getpid())
        signal.pause()

    for pid in run_forked(2, work):
        print(pid, flush=True)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_children_die_with_a_parent_killed_by_sigkill() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        children = [int(parent.stdout.readline()) for _ in range(2)]
        assert all(_alive(pid) for pid in children)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        wait_for(lambda: not any(_alive(pid) for pid in children), timeout=30, what="the children to die")
    finally:
        parent.kill()
        parent.wait(30)


@pytest.mark.parametrize(
    ("due", "cores", "workers", "claim"),
    [
        (0, 2, 1, 1),  # nothing due: one worker, which finds nothing
        (100, 2, 1, 100),  # one chunk's worth: forking would not pay
        (500, 2, 2, 250),  # two chunks, two cores: cut evenly
        (500, 1, 1, 500),  # one core: one worker, one run of the batch size
        (5000, 8, 4, 500),  # never more workers than concurrent runs; runs stay within the batch size
        (600, 8, 3, 200),  # never more workers than chunks
    ],
)
def test_run_shape_spreads_a_backlog_over_cores_in_even_runs(
    due: int, cores: int, workers: int, claim: int
) -> None:
    shape = RunShape(500)
    assert shape.workers(due, cores) == workers
    assert shape.claim_size(due, workers) == claim
