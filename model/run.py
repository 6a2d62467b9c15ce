"""`make model`: Spin on every property of model/protocol.pml and model/payment.pml, then on every
mutant.

Each run compiles the model with its -D bounds into a scratch folder, runs the verifier and
prints the states stored and the time. The properties must verify with 0 errors; each mutant
(one mechanism removed) must FAIL, and its counterexample is kept in model/trails/: the Spin
trail itself (<mutant>.trail, replayable with `spin -t -D<MUTANT> ...`) and the schedule read
from it (<mutant>.schedule: the model's "@@ step=..." lines in trail order, one event a line),
which the replay tests in invoice_pipeline_tests/model/ drive the real SQL with.

Spin and a C compiler come from Debian's packages; as root with apt-get they are installed when
missing, otherwise this stops with what to install.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parent
MODEL = MODEL_DIR / "protocol.pml"
# Who is paid (issue 52): the payment decision under the identity lock, against registration.
PAYMENT = MODEL_DIR / "payment.pml"
TRAILS = MODEL_DIR / "trails"


@dataclass(frozen=True)
class Run:
    """One verifier run: the model's -D bounds, the pan compile flags and options."""

    name: str
    defines: tuple[str, ...]
    cflags: tuple[str, ...]
    pan_args: tuple[str, ...]
    must_fail: bool = False
    budget_s: float | None = None  # a search stopped (SIGINT) after this long: partial, said so
    model: Path = MODEL


SMALL = ("W=2", "M=2", "FAULTS=1")
SAFETY = ("-DNOCLAIM", "-DSAFETY")
# Exhaustive for the small bounds; bitstate (a hash of each state, ~2^30 bits) beyond them.
RUNS = (
    Run("safety, exhaustive (2 workers, 2 copies, 1 fault)", SMALL, SAFETY, ("-m2000000", "-w24")),
    Run(
        "safety, bitstate, 60 s budget (3 workers, 3 invoices incl. 2 copies, 2 faults)",
        ("W=3", "M=3", "FAULTS=2"),
        (*SAFETY, "-DBITSTATE"),
        ("-m2000000", "-w28", "-k3"),
        budget_s=60,
    ),
    Run(
        "liveness under weak fairness (2 workers, 2 copies, 1 fault)",
        SMALL,
        ("-DNFAIR=3",),  # weak fairness over the 6 processes (init, 2 workers, sweeper, clock, faults)
        ("-a", "-f", "-m2000000", "-w24"),
    ),
    Run(
        "payment decision: safety, exhaustive (2 workers, one new vendor)",
        (),
        SAFETY,
        ("-m100000",),
        model=PAYMENT,
    ),
)
MUTANTS = ("NO_FENCE", "NO_ADVISORY", "SWEEP_NO_RECHECK", "HB_QUEUED", "NO_INDEX")
# Breadth-first, so that each counterexample is a shortest one (what the replay drives).
MUTANT_RUNS = (
    *(Run(f"mutant {m}", (*SMALL, m), (*SAFETY, "-DBFS"), ("-w24",), must_fail=True) for m in MUTANTS),
    # The liveness property's mutant: an acceptance cycle (a lasso), kept but not replayed.
    Run(
        "mutant NO_RESCHEDULE (liveness)",
        (*SMALL, "NO_RESCHEDULE"),
        ("-DNFAIR=3",),
        ("-a", "-f", "-m2000000", "-w24"),
        must_fail=True,
    ),
    # The payment model's mutant: the decision the approval stage took, before any lock.
    Run(
        "mutant APPROVAL_ONLY (payment)",
        ("APPROVAL_ONLY",),
        (*SAFETY, "-DBFS"),
        (),
        must_fail=True,
        model=PAYMENT,
    ),
)


def ensure_tools() -> None:
    missing = [tool for tool in ("spin", "cc") if shutil.which(tool) is None]
    if not missing:
        return
    packages = ["spin" if tool == "spin" else "gcc" for tool in missing]
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"installing {' '.join(packages)} with apt-get", flush=True)
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", *packages], check=True, env=env)
        return
    sys.exit(
        f"make model needs {' and '.join(missing)}: install them (apt-get install -y {' '.join(packages)})"
    )


def verify(run: Run, work: Path) -> tuple[bool, str]:
    """Compile and run one verification; returns (errors found, pan's output)."""
    shutil.copy(run.model, work / run.model.name)
    defines = [f"-D{d}" for d in run.defines]
    subprocess.run(["spin", *defines, "-a", run.model.name], cwd=work, check=True, capture_output=True)
    subprocess.run(
        ["cc", "-O2", *run.cflags, "-o", "pan", "pan.c"], cwd=work, check=True, capture_output=True
    )
    pan = subprocess.Popen(["./pan", *run.pan_args], cwd=work, stdout=subprocess.PIPE, text=True)
    try:
        out, _ = pan.communicate(timeout=run.budget_s)
    except subprocess.TimeoutExpired:
        pan.send_signal(signal.SIGINT)  # pan prints its statistics when interrupted
        out, _ = pan.communicate()
        out += f"\n(stopped after the {run.budget_s:.0f} s budget: a partial search)"
    errors = re.search(r"errors: (\d+)", out)
    if errors is None:
        raise RuntimeError(f"{run.name}: no verdict from pan:\n{out}")
    return int(errors.group(1)) > 0, out


def keep_trail(run: Run, work: Path) -> Path:
    """Copy the trail into model/trails and write its schedule (the @@ lines, in order)."""
    mutant = run.defines[-1]
    TRAILS.mkdir(exist_ok=True)
    shutil.copy(work / f"{run.model.name}.trail", TRAILS / f"{mutant}.trail")
    defines = [f"-D{d}" for d in run.defines]
    replay = subprocess.run(
        ["spin", "-t", *defines, run.model.name], cwd=work, capture_output=True, text=True, check=True
    ).stdout
    steps = []
    for line in replay.splitlines():
        if line.strip().startswith("@@ step="):
            steps.append(line.strip()[len("@@ step=") :])
        elif "START OF CYCLE" in line:
            steps.append("cycle_starts")  # a liveness counterexample: the rest repeats forever
    violated = re.search(r"text of failed assertion: (.*)", replay)
    lines = [
        f"# Counterexample of model/{run.model.name} with -D{' -D'.join(run.defines)}, written by `make model`",
        "# from model/trails/" + f"{mutant}.trail (spin -t). One model step a line, in trail order.",
        *steps,
        f"violated {violated.group(1).strip() if violated else 'ltl terminates (an acceptance cycle)'}",
    ]
    path = TRAILS / f"{mutant}.schedule"
    path.write_text("\n".join(lines) + "\n")
    return path


def summary(out: str) -> str:
    stored = re.search(r"([\d.e+]+) states, stored", out)
    elapsed = re.search(r"elapsed time ([\d.e+]+) seconds", out)
    depth = re.search(r"depth reached (\d+)", out)
    partial = ", PARTIAL (budget)" if "stopped after the" in out else ""
    return (
        f"{stored.group(1) if stored else '?'} states, depth {depth.group(1) if depth else '?'}, "
        f"{elapsed.group(1) if elapsed else '?'} s{partial}"
    )


def main() -> int:
    ensure_tools()
    failed = False
    started = time.monotonic()
    # `python3 model/run.py mutants`: only the mutants (and their trails)
    runs = MUTANT_RUNS if sys.argv[1:] == ["mutants"] else (*MUTANT_RUNS, *RUNS)
    for run in runs:
        with tempfile.TemporaryDirectory(prefix="model-") as scratch:
            work = Path(scratch)
            found, out = verify(run, work)
            if run.must_fail:
                if found:
                    schedule = keep_trail(run, work)
                    print(f"{run.name}: counterexample found as it must ({summary(out)}) -> {schedule.name}")
                else:
                    failed = True
                    print(f"{run.name}: NO counterexample: the property does not bite ({summary(out)})")
            elif found:
                failed = True
                print(f"{run.name}: ERROR\n{out}")
            else:
                print(f"{run.name}: 0 errors ({summary(out)})")
            sys.stdout.flush()
    print(f"make model: {time.monotonic() - started:.0f} s in all")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
