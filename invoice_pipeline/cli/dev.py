"""`invoice-pipeline dev`, `samples` and `demo`: the product running (Dagster's UI, daemon and
code servers in one process group, the review page beside them), sample invoices, and the demo
that ingests and processes them."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from invoice_pipeline.cli.arguments import add_batch_size_argument, port_number, positive_int
from invoice_pipeline.cli.exports import demo_targets
from invoice_pipeline.cli.output import progress
from invoice_pipeline.cli.process import process_due
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import Settings
from invoice_pipeline.db.connection import prepare_database
from invoice_pipeline.domain.review import reason_code
from invoice_pipeline.engine.records import TERMINAL_STATUSES
from invoice_pipeline.engine.review import REVIEW_STATUSES, Actor
from invoice_pipeline.engine.review_records import ReviewTarget
from invoice_pipeline.engine.store import open_store
from invoice_pipeline.terminal import printable

# How long `dev` lets dagster dev and its children shut down after SIGTERM/SIGINT before it
# SIGKILLs whatever is left of the group (dagster dev itself would wait 60 s per child).
DEV_STOP_GRACE_SECONDS = 20.0


# The start of the SupersessionWarning `dagster dev` prints (Dagster 1.13).
DAGSTER_DEV_SUPERSEDED = "Function `dev_command` is superseded"


class _StopRequested(Exception):
    pass


def cmd_dev(args: argparse.Namespace, settings: Settings) -> int:
    """Postgres, migrations, dagster.yaml, then `dagster dev` in its own process group."""
    import invoice_pipeline
    from invoice_pipeline.child_python import child_environment, python_command
    from invoice_pipeline.orchestration.dagster_home import prepare_dagster_home

    url = prepare_database(settings)
    home = prepare_dagster_home(settings, url)
    settings.inbox.mkdir(parents=True, exist_ok=True)
    # The folder holding the package: the checkout, or site-packages when installed from a wheel.
    root = Path(invoice_pipeline.__file__).resolve().parents[1]
    workspace = root / "workspace.yaml"
    command = python_command(
        # `dagster dev` warns that `dg dev` supersedes it; dg is no dependency of this project, and
        # the warning is noise in every `make dev`. Only that message is silenced.
        "-W",
        f"ignore:{DAGSTER_DEV_SUPERSEDED}:FutureWarning",
        "-m",
        "dagster",
        "dev",
        "-h",
        args.host,
        "-p",
        str(args.port),
    )
    if workspace.exists():
        command += ["-w", str(workspace)]
    else:
        # Installed from a wheel: without -d the code server would add the current folder to its
        # sys.path, and import whatever `invoice_pipeline` lies there. Load the package this
        # process runs instead.
        command += ["-m", "invoice_pipeline.orchestration.definitions", "-d", str(root)]
    print(
        f"Dagster UI on http://{args.host}:{args.port}  (DAGSTER_HOME={home}; inbox {settings.inbox})",
        flush=True,
    )
    # The review page beside it (review_ui/), on loopback, in its own process group. Started with
    # SIGINT handled here, so that exec gives it (and the workers it starts before its server
    # installs handlers: the login pool, the page sandbox) the default action, not an ignored
    # SIGINT a script's `invoice-pipeline dev &` handed this process (see run_process_group).
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        review_ui = subprocess.Popen(
            python_command("-m", "invoice_pipeline.cli", "review-ui", "--port", str(args.review_port)),
            env=child_environment(),
            start_new_session=True,
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    try:
        return run_process_group(
            command,
            cwd=root if workspace.exists() else None,
            env=child_environment(),
            grace_seconds=DEV_STOP_GRACE_SECONDS,
        )
    finally:
        _stop_group(review_ui, signal.SIGTERM, 5.0)


def run_process_group(
    command: list[str], *, cwd: Path | None, env: dict[str, str], grace_seconds: float
) -> int:
    """Run `command` as the leader of a new session until it exits or this process gets SIGINT
    or SIGTERM; then stop its whole process group and return the leader's exit status.

    Its own session: dagster dev ignores signals sent only to itself, and its children
    (webserver, daemon, code servers, run workers) would outlive it. Stopping sends the signal
    received (SIGTERM if the leader exited by itself) to the group, and SIGKILL to whatever is
    left of it after `grace_seconds`; a second signal while stopping SIGKILLs at once.

    The handlers are installed *before* the child starts, for two reasons: a signal that
    arrives while it is being started is not lost, and exec resets a handled signal to its
    default action but keeps an ignored one ignored. A script's `invoice-pipeline dev &` starts
    this process with SIGINT ignored; dagster dev maps SIGTERM onto whatever SIGINT does, so a
    child that inherited SIG_IGN would ignore both (issue 26).
    """
    proc: subprocess.Popen[bytes] | None = None
    stopping = False
    received: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        received.append(signum)
        if proc is None:
            return  # still starting: seen right after Popen returns
        if stopping:
            _signal_group(proc.pid, signal.SIGKILL)  # asked twice: no more patience
            return
        stopping = True
        raise _StopRequested

    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, on_signal) for sig in stop_signals}
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
        try:
            try:
                if not received:
                    proc.wait()
            finally:
                stopping = True
        except _StopRequested:
            pass
        status = _stop_group(proc, received[0] if received else signal.SIGTERM, grace_seconds)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - status if status < 0 else status


def _signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to a process group; False when nothing is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _stop_group(proc: subprocess.Popen[bytes], sig: int, grace_seconds: float) -> int:
    """`sig` to the leader's whole group, SIGKILL to what is left after the grace period."""
    deadline = time.monotonic() + grace_seconds
    _signal_group(proc.pid, sig)
    try:
        proc.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        pass
    # The leader may go first: its children are no children of ours, so no wait() tells when
    # they are gone; the group's emptiness does.
    while time.monotonic() < deadline and _signal_group(proc.pid, 0):
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    return proc.wait()


def cmd_samples(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.samples import generate_samples

    sample_set = generate_samples(Path(args.out), count=args.count, seed=args.seed)
    print(f"wrote {len(sample_set.files)} files to {args.out}")
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.ingest import ingest_paths
    from invoice_pipeline.samples import generate_samples

    started = time.monotonic()
    org = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    out = settings.home / "demo-samples" / org
    # The database first: a home that cannot have its server (a port taken) gets one line and
    # is left as it was, with no samples written into it.
    store = open_store(settings, COMMAND_POOL)
    try:
        # The demo includes two scans (OCR): a scanned copy of an XML invoice and a photo (PNG).
        samples = generate_samples(out, count=args.count, seed=args.seed, scans=True)
        print(f"generated {len(samples.files)} sample files in {out}; their org is {org}")
        # A team starts from its ERP's vendor master: page-read invoices of these sellers are
        # confirmed by the VAT id they print; any other seller's are held (vendor_unconfirmed).
        from invoice_pipeline.engine.vendors import read_vendor_csv

        master = out / "vendor-master.csv"
        master.write_text(samples.vendor_master_csv())
        imported = store.vendors.import_vendors(
            org, read_vendor_csv(master.read_text()), Actor.os_user().name
        )
        print(f"imported {imported.created} vendors from {master} (invoice-pipeline vendors import)")
        files = [f.path for f in samples.files]
        for i in range(len(files)):
            ingest_paths(store, [files[i]], org)
            progress(i + 1, len(files), "ingesting ")
        # Postings go to the books: a DATEV folder and a webhook to a receiver the demo runs.
        with demo_targets(store, settings, org) as deliver_and_tell:
            process_due(settings, batch_size=args.batch_size, label="processing")
            outcomes = store.reporting.outcomes_of_org(org)
            held = store.review.review_targets(REVIEW_STATUSES, org_id=org)
            print_demo_summary(outcomes, time.monotonic() - started, review_queue_counts(held))
            deliver_and_tell()
    finally:
        store.close()
    print_next_steps(org)
    return 0


def print_next_steps(org: str) -> None:
    """What a newcomer does right after the demo (README.md says the same)."""
    print(f"\nthe demo's invoices are in org {org}. Next:")
    for command, what in (
        ("invoice-pipeline status", "counts, every org, what is held and why"),
        (f"invoice-pipeline review list --org {org}", "the held invoices, each with its reasons"),
        ("invoice-pipeline show INVOICE_ID", "one invoice: fields and where they were read, attempts"),
        ("make dev", "Dagster's UI on :3000 and the review page on :3100 to decide on them"),
        (
            f"invoice-pipeline mail fetch --org {org} --imap-url imaps://USER@HOST:993/INBOX "
            "--password-file F",
            "take invoices from a real mailbox, each mail once (docs/mail.md)",
        ),
    ):
        print(f"  {command:<58} {what}")
    print("  (invoice-pipeline is .venv/bin/invoice-pipeline)")


def review_queue_counts(held: Sequence[ReviewTarget]) -> dict[str, int]:
    """Held invoices per review reason code (an invoice held for two reasons counts for both)."""
    counts: dict[str, int] = {}
    for target in held:
        for code in dict.fromkeys(reason_code(r) for r in target.review_reasons):
            counts[code] = counts.get(code, 0) + 1
    return dict(sorted(counts.items()))


def print_demo_summary(
    outcomes: Sequence[Any], seconds: float, review_counts: dict[str, int] | None = None
) -> None:
    processed = [o for o in outcomes if o.status == "processed"]
    originals = [o for o in processed if o.duplicate_status == "original"]
    duplicates = [o for o in processed if o.duplicate_status == "duplicate"]
    approved = [o for o in processed if o.approval == "approved"]
    review = [o for o in outcomes if o.status == "needs_review"]
    quarantined = [o for o in outcomes if o.status == "quarantined"]
    attention = [o for o in outcomes if o.status == "needs_attention"]
    other = [o for o in outcomes if o.status not in TERMINAL_STATUSES]
    print()
    print(f"{'processed':<16}{len(processed):>5}")
    print(f"{'  originals':<16}{len(originals):>5}")
    print(f"{'  duplicates':<16}{len(duplicates):>5}")
    print(
        f"{'  approved':<16}{len(approved):>5}   posted to the ledger: {sum(1 for o in outcomes if o.posted)}"
    )
    print(
        f"{'needs review':<16}{len(review):>5}   (held for a person, not posted; `invoice-pipeline review list`)"
    )
    for code, n in (review_counts or {}).items():
        print(f"{'  ' + code:<24}{n:>5}")
    print(f"{'needs attention':<16}{len(attention):>5}")
    print(f"{'quarantined':<16}{len(quarantined):>5}")
    if other:
        print(f"{'not finished':<16}{len(other):>5}   (retry scheduled; see `invoice-pipeline status`)")
    print(f"{'time taken':<16}{seconds:>5.1f}s")
    if duplicates:
        print("\nduplicates (how matched):")
        for o in duplicates:
            print(f"  {printable(o.filename):<40} = {printable(o.original_filename):<40} {o.match_how}")
    if review:
        print("\nneeds review (why; in full: invoice-pipeline review list):")
        for o in review:
            print(f"  {printable(o.filename):<40} {shortened(o.reason)}")
    if quarantined or attention:
        print("\nquarantined / needs attention (reason; in full: invoice-pipeline status):")
        for o in quarantined + attention:
            print(f"  {printable(o.filename):<40} {printable(o.code)}: {shortened(o.reason)}")


# How much of a reason the demo's summary prints on a file's line.
SUMMARY_REASON_CHARS = 110


def shortened(reason: str) -> str:
    """A reason cut at a word, never inside one, with "…" where it was cut."""
    return textwrap.shorten(printable(reason), width=SUMMARY_REASON_CHARS, placeholder=" …")


def add_dev_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = sub.add_parser("dev", help="run the Dagster UI, daemon, sensor and schedule")
    dev.add_argument("--host", default="127.0.0.1")
    dev.add_argument("--port", type=port_number, default=3000)
    dev.add_argument("--review-port", type=port_number, default=3100, help="the review page's port")
    dev.set_defaults(func=cmd_dev)
    samples = sub.add_parser("samples", help="write generated sample invoices to a folder")
    samples.add_argument("out")
    samples.add_argument("--count", type=positive_int, default=40)
    samples.add_argument("--seed", type=int, default=0)
    samples.set_defaults(func=cmd_samples)
    demo = sub.add_parser("demo", help="generate samples, ingest, process through Dagster, summarise")
    demo.add_argument("--count", type=positive_int, default=30)
    demo.add_argument("--seed", type=int, default=0)
    add_batch_size_argument(demo)
    demo.set_defaults(func=cmd_demo)
