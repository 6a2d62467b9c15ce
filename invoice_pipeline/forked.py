"""Work spread over children forked from a warm parent, that die with it.

`invoice-pipeline process` pays about two seconds before its first invoice (Python, Dagster,
the instance) and then works on one core. Forking after the imports gives every other core a
worker for free; each child opens its own connections and Dagster instance (nothing open is
shared across a fork), and reports back through a pipe.

A child dies with its parent (PR_SET_PDEATHSIG), so `kill -9` of the command stops all of its
work at once, as it did when the command worked in one process: leases nobody heartbeats any
more are swept, never kept alive by an orphan.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

_PR_SET_PDEATHSIG = 1


def usable_cores() -> int:
    """The cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ChildFailed(RuntimeError):
    """A child raised, or died without saying it was done (killed, out of memory)."""


@dataclass(frozen=True)
class _Done:
    pass


@dataclass(frozen=True)
class _Raised:
    text: str


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: an orphan finishes its run and exits
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _child(
    parent: int, index: int, work: Callable[[int, Callable[[Any], None]], None], pipe: Connection
) -> None:
    _die_with_parent(parent)
    try:
        work(index, pipe.send)
        pipe.send(_Done())
    except BaseException:
        pipe.send(_Raised(traceback.format_exc()))
        raise
    finally:
        pipe.close()


def run_forked(count: int, work: Callable[[int, Callable[[Any], None]], None]) -> Iterator[Any]:
    """Run `work(index, send)` in `count` forked children; yield what they send, as it arrives.

    Fork only from a process that holds no open connection and runs no other thread: a child
    gets copies of every socket and lock, but only the forking thread.
    """
    context = multiprocessing.get_context("fork")
    parent = os.getpid()
    children: dict[Connection, multiprocessing.process.BaseProcess] = {}
    try:
        for index in range(count):
            receive, send = context.Pipe(duplex=False)
            started = context.Process(target=_child, args=(parent, index, work, send), daemon=True)
            started.start()
            send.close()
            children[receive] = started
        while children:
            for ready in wait(list(children)):
                assert isinstance(ready, Connection)
                try:
                    message = ready.recv()
                except EOFError:
                    child = children.pop(ready)
                    child.join()
                    raise ChildFailed(f"worker {child.name} died (exit code {child.exitcode})") from None
                if isinstance(message, _Done):
                    children.pop(ready).join()
                elif isinstance(message, _Raised):
                    raise ChildFailed(f"a worker failed:\n{message.text}")
                else:
                    yield message
    finally:
        for child in children.values():
            child.kill()
            child.join()
