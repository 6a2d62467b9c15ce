"""How `make test`'s parallel workers share the suite (pytest-xdist, `-n 2 --dist loadgroup`).
These hooks run in xdist's controller, the process that hands tests to the workers; conftest.py
imports them to register them. With `-n 0` none of this runs.

* **Units.** Each test is a unit of its own, except the groups of XDIST_GROUPS: their tests run on
  one worker, one after another, as one unit (see the table for why each is grouped).
* **Longest first.** Units are handed out longest first (UNIT_SECONDS, measured), then the rest
  in collection order. A worker asks for its next unit when it is nearly out of work, so the
  short tests at the end even out the workers' finishing times (longest-processing-time-first).
  The figures only order the dispatch: a wrong one unbalances the end of a run, never its result.
* **The podman images in the background.** As soon as the workers have collected and the podman
  group is among their tests, the controller starts `python -m pipeline_support.containers`,
  which takes podman's machine-wide build lock and builds every image the group needs (minutes on
  a fresh machine: debootstrap, pip, Debian's packages; mostly network and disk, so it overlaps
  the rest of the suite). The podman group is held back while that build runs, unless nothing
  else is left; its tests wait on the same lock and then find the images, or, when the build
  failed, build them themselves and fail with podman's or debootstrap's own output. The summary
  at the end says how the background build went and where its log is.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline_support import containers

# Tests of one group run on one worker, one after another: they share something a worker starts
# once (the package's dagster dev, podman's images) or each takes the machine (a cluster of hosts
# in network namespaces, each a PostgreSQL and several Dagster workers; a chaos scenario's gang of
# worker processes: four at once overran their 600 s on a loaded machine, so the scenarios are in
# two groups and at most two run at once, whatever the number of workers). Keys: node id
# prefixes under this folder, the first that matches wins.
CHAOS_SCENARIO = "chaos/test_chaos.py::test_fast_subset_holds_every_invariant"
XDIST_GROUPS = {
    # The two chaos groups about equal, quiet and loaded: partitions (57 s quiet), security (21),
    # hostile_inputs (14) and redelivery_storm (about 15) against kill9 (33), crash_cost (25),
    # postgres_restart (13) and the short rest. A new scenario joins chaos-b.
    f"{CHAOS_SCENARIO}[partitions]": "chaos-a",
    f"{CHAOS_SCENARIO}[security]": "chaos-a",
    f"{CHAOS_SCENARIO}[hostile_inputs]": "chaos-a",
    f"{CHAOS_SCENARIO}[redelivery_storm]": "chaos-a",
    "chaos/": "chaos-b",
    "cluster/": "hosts",
    "orchestration/test_celery_deadline.py": "hosts",
    "containers/": "podman",
    "test_container_image.py": "podman",
    "orchestration/ui/": "dagster-dev",
}
PODMAN = "podman"

# Seconds per unit, the order units are handed out in: a group by its name, a test by a node id
# prefix under this folder (the longest that matches). Between the quiet fresh-machine run of
# 2026-12-05 (q1, 972 s) and a loaded one (fc1, 1161 s, load 4-12), setup, call and teardown
# together; the podman group with its images found (about 75 s). Units under about 10 s are left
# out and keep collection order after these; the top-level files come last in that order, so
# their longer tests are listed even when a little shorter.
UNIT_SECONDS: dict[str, float] = {
    "hosts": 280,
    "podman": 75,
    "dagster-dev": 130,
    "chaos-b": 120,
    "chaos-a": 110,
    "test_deploy_prometheus.py::test_prometheus_scrapes_the_product": 70,
    "engine/test_payment_stateful.py": 46,
    "engine/test_accountant_stateful.py": 30,
    "test_kill_process.py::test_kill_9_of_process_at_random_moments": 30,
    "db/test_private_folder.py::test_demo_from_a_private_folder": 20,
    "test_secrets.py::test_a_random_password_appears_nowhere": 19,
    "engine/exports/test_delivery_property.py": 18,
    "engine/exports/test_export_cli.py::test_the_demo_delivers": 15,
    "engine/review/test_review_races.py::test_reviewers_and_the_pipeline_at_once": 15,
    "engine/test_vendor_layouts_ocr.py": 15,
    "test_cli.py::test_ingest_process_status_show_on_generated_samples": 15,
    "orchestration/test_recovery.py::test_redelivery_storm_through_dagster": 14,
    "db/test_migrate.py::test_concurrent_migrators": 12,
    "engine/mail/test_mail_property.py": 12,
    "documents/test_ocr_glyphs.py::test_a_euro_sign_is_told_from_everything_else": 11,
    "orchestration/test_jobs.py::test_failure_hook_releases_at_once": 11,
    "db/test_upgrade.py::test_upgrade_from_the_oldest_release": 11,
    "test_dev_signals.py::test_dev_started_by_a_script_stops_everything": 10,
    "test_crash_cost.py::test_a_kill_mid_chunk": 10,
    "test_cli_newcomer.py::test_a_second_home_on_a_taken_port": 10,
    "test_any_folder.py::test_process_from_an_old_checkout_folder": 9,
    "test_cli.py::test_process_exit_code_says_whether_invoices_failed": 9,
}

TESTS = Path(__file__).resolve().parent


def unit_of(where: str) -> str:
    """The unit a test (its node id under this folder) is scheduled in: its group, else itself."""
    for prefix, group in XDIST_GROUPS.items():
        if where.startswith(prefix):
            return group
    return where


def unit_seconds(unit: str) -> float:
    """How long a unit is expected to take (0 when unknown: it keeps its collection order)."""
    matches = [prefix for prefix in UNIT_SECONDS if unit.startswith(prefix)]
    return UNIT_SECONDS[max(matches, key=len)] if matches else 0.0


@dataclass
class BackgroundBuild:
    """`python -m pipeline_support.containers`, started by the controller."""

    process: subprocess.Popen[bytes]
    log: Path

    def running(self) -> bool:
        return self.process.poll() is None


IMAGE_BUILD = pytest.StashKey[BackgroundBuild]()


def _relative_to_tests(config: pytest.Config) -> str:
    return TESTS.relative_to(config.rootpath).as_posix() + "/"


def pytest_xdist_node_collection_finished(node: Any, ids: Sequence[str]) -> None:
    """Start building podman's images as soon as a worker's collection shows the podman group
    (once; not when podman cannot run here: the tests' needs_tool marker decides then)."""
    config: pytest.Config = node.config
    if IMAGE_BUILD in config.stash or containers.unavailable_reason() is not None:
        return
    tests = _relative_to_tests(config)
    if not any(unit_of(nodeid.removeprefix(tests)) == PODMAN for nodeid in ids):
        return
    log = Path(tempfile.mkstemp(prefix="invoice-pipeline-image-build-", suffix=".log")[1])
    with log.open("wb") as out:
        # The controller's own process group: an interrupted run (Ctrl-C) stops the build with it.
        process = subprocess.Popen(
            [sys.executable, "-m", "pipeline_support.containers"],
            cwd=containers.ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    config.stash[IMAGE_BUILD] = BackgroundBuild(process, log)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    build = config.stash.get(IMAGE_BUILD, None)
    if build is None:
        return
    code = build.process.poll()
    if code is None:
        # Not stopped: killing debootstrap or podman midway leaves mounts and half-made layers.
        terminalreporter.write_line(
            f"podman images: the background build (pid {build.process.pid}) is still running and "
            f"finishes by itself; its log: {build.log}"
        )
    elif code == 0:
        said = build.log.read_text(errors="replace").strip().splitlines() or ["no report"]
        terminalreporter.write_line(f"podman images: built in the background ({said[-1]})")
        build.log.unlink(missing_ok=True)
    else:
        tail = "\n".join(build.log.read_text(errors="replace").splitlines()[-15:])
        terminalreporter.write_line(
            f"podman images: the background build FAILED (exit {code}), so the podman tests tried "
            f"again themselves (their own errors above). Its log: {build.log}, ending:\n{tail}",
            red=True,
        )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadscope scheduling with the units above and their order. Not xdist's own
    loadgroup: it renames the test's node id to mark the group, which pytest 9 no longer lets a
    plugin do."""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    tests = _relative_to_tests(config)

    class UnitScheduling(LoadScopeScheduling):
        workqueue: OrderedDict[str, dict[str, bool]]
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid.removeprefix(tests))

        def _assign_work_unit(self, node: Any) -> None:
            # xdist pops the work queue's first unit; its schedule() filled the queue in
            # collection order, most tests per unit first. Longest first instead (sorted is
            # stable: units without a figure keep collection order after those with one).
            if not self.ordered:
                units = sorted(self.workqueue.items(), key=lambda unit: -unit_seconds(unit[0]))
                self.workqueue = OrderedDict(units)
                self.ordered = True
            build = config.stash.get(IMAGE_BUILD, None)
            if build is not None and PODMAN in self.workqueue and len(self.workqueue) > 1:
                if build.running():
                    if next(iter(self.workqueue)) == PODMAN:
                        self.workqueue.move_to_end(PODMAN)
                else:
                    self.workqueue.move_to_end(PODMAN, last=False)
            super()._assign_work_unit(node)

    return UnitScheduling(config, log)
