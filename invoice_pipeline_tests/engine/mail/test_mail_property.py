"""Property: whatever the messages (0 to 3 attachments, the same bytes in several) and wherever a
pass loses its database connection (after downloading a message, or inside its transaction), every
message is afterwards either taken whole (checkpoint, and each attachment one invoice, linked) or
not taken at all; and the next pass takes every message exactly once.

The fault is real: the test holds the row the pass must write next (a checkpoint or a document,
uncommitted), and once the pass waits on it, terminates the pass's backend with
pg_terminate_backend. Committing the checkpoint in a transaction of its own (the sabotage entry
mail-checkpoint-in-ingest) leaves a message checkpointed without its invoices, and fails this.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from invoice_pipeline.engine.mail import MailboxUrl, fetch_mail, open_folder
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline_tests.engine.mail.mailbox import (
    HOLD_CHECKPOINT,
    HOLD_DOCUMENT,
    NEEDS_DOVECOT,
    checkpoints,
    holding,
    invoices_by_sha,
    message,
    sha,
)
from pipeline_support.dovecot import Dovecot
from pipeline_support.helpers import wait_for

pytestmark = NEEDS_DOVECOT
POOL = 4  # distinct attachments an example draws from, so messages share some


def _waiting_on(database_url: str, holder_pid: int) -> int | None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (holder_pid,)
        ).fetchone()
    return None if row is None else int(row[0])


def _cut_while_waiting(
    database_url: str, hold_sql: str, params: tuple[object, ...], work: Callable[[], object]
) -> None:
    """Run `work` in a thread; when it waits on the held row, terminate its backend; roll back."""
    holder = holding(database_url, hold_sql, params)
    thread = threading.Thread(target=lambda: _swallow(work), daemon=True)
    thread.start()
    try:
        pid = wait_for(
            lambda: _waiting_on(database_url, holder.info.backend_pid) or (not thread.is_alive() and -1),
            timeout=120,
            interval=0.01,
            what="the pass to wait on the held row",
        )
        assert pid != -1, "the pass ended without reaching the held row"
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
    finally:
        holder.rollback()
        holder.close()
        thread.join(120)


def _swallow(work: Callable[[], object]) -> None:
    try:
        work()
    except Exception:  # the cut: the pass fails, as a killed one would stop
        pass


@dataclass(frozen=True)
class Cut:
    """One example: the messages (each the attachments it holds, of the pool), the message `at`
    whose pass is cut, and whether inside its checkpoint's transaction or on a document of it."""

    messages: list[list[int]]
    at: int
    on_checkpoint: bool


@st.composite
def cuts(draw: st.DrawFn) -> Cut:
    messages = draw(st.lists(st.lists(st.integers(0, POOL - 1), max_size=3), min_size=1, max_size=4))
    at = draw(st.integers(0, len(messages) - 1))
    new = _first_new(messages, at) is not None
    on_checkpoint = not new or draw(st.integers(0, 3)) == 0  # mostly inside the transaction
    return Cut(messages, at, on_checkpoint)


def _first_new(messages: list[list[int]], at: int) -> int | None:
    """An attachment of message `at` that no earlier message of the org has: the pass waits on
    its document inside message `at`."""
    return next((j for j in messages[at] if all(j not in m for m in messages[:at])), None)


@pytest.mark.slow
def test_a_pass_cut_anywhere_leaves_each_message_whole_or_untaken(
    store: InvoiceStore, imap: Dovecot, database_url: str
) -> None:
    url = MailboxUrl.parse(imap.url())
    with open_folder(url, imap.password) as folder:
        uidvalidity = folder.uidvalidity
    delivered: dict[int, list[bytes]] = {}  # every example's messages stay in the mailbox
    orgs = (f"org{n}" for n in itertools.count())

    @settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    # One message of one attachment, cut on its document: the case that kills the sabotage entry
    # mail-checkpoint-property (pipeline_support/mutants.py), whatever the derandomized draw makes
    # of this test's source.
    @example(Cut([[0]], at=0, on_checkpoint=False))
    @given(cuts())
    def cut_pass(cut: Cut) -> None:
        org = next(orgs)
        pool = [b"%PDF-1.4 " + f"{org} attachment {i}".encode() for i in range(POOL)]
        drawn = cut.messages
        uids = imap.deliver_in_order(
            [message(f"{org} {i}", *((f"a{j}.pdf", pool[j]) for j in m)) for i, m in enumerate(drawn)]
        )
        delivered.update({uid: [pool[j] for j in m] for uid, m in zip(uids, drawn, strict=True)})
        first_new = _first_new(drawn, cut.at)
        if cut.on_checkpoint or first_new is None:
            hold = (HOLD_CHECKPOINT, (org, url.identity, uidvalidity, uids[cut.at]))
        else:
            hold = (HOLD_DOCUMENT, (sha(pool[first_new]),))

        _cut_while_waiting(database_url, *hold, lambda: fetch_mail(store, org, url, imap.password))
        _assert_whole_or_untaken(database_url, org, delivered)
        fetch_mail(store, org, url, imap.password)
        _assert_whole_or_untaken(database_url, org, delivered)
        assert [uid for uid, _, _ in checkpoints(database_url, org)] == sorted(delivered)
        assert invoices_by_sha(database_url, org) == dict.fromkeys(
            {sha(c) for cs in delivered.values() for c in cs}, 1
        )

    cut_pass()


def _assert_whole_or_untaken(database_url: str, org: str, delivered: dict[int, list[bytes]]) -> None:
    stored = invoices_by_sha(database_url, org)
    for uid, outcome, linked in checkpoints(database_url, org):
        assert linked == len(delivered[uid]), (
            f"{org} UID {uid}: checkpointed with {linked} of {len(delivered[uid])}"
        )
        assert all(stored.get(sha(c)) == 1 for c in delivered[uid]), (
            f"{org} UID {uid}: an attachment is no invoice"
        )
        assert outcome == ("ingested" if delivered[uid] else "skipped")
