"""The standing sabotage check: each safety mechanism broken on purpose, and its test must fail.

`make mutants` (`python -m pipeline_support.mutants`). Each entry of SABOTAGES names a
mechanism, the exact text that implements it (file, text, replacement) and the pytest node id of
the test that guards it. The runner copies the checkout to a temporary folder, applies one
sabotage there, runs only that test with the project's interpreter, and reports:
- `killed`: the test failed, as it must, with an assertion (an `assert`, `pytest.fail`, a
  `pytest.raises` that saw nothing raised) or with an exception the entry names in `raises` (its
  mechanism's natural failure); the result records the failure's first line;
- `SURVIVED`: the test passed with the mechanism removed (the test does not guard it);
- `BROKEN`: the sabotage no longer applies (its text is gone from the code), or the test did not
  get as far as its assertions: an import or collection error, an error in a fixture's setup,
  another exception, a timeout (pytest-timeout's or the runner's), a skip. A test that breaks
  that way proves nothing about the mechanism: the list is out of date.
Anything but `killed` fails the run. The checkout itself is never touched. The verdict is read
from pytest's JUnit XML report (`<failure>` of the test's call, `<error>` of its setup,
teardown or collection), not from its exit code.

Selection: `--all` (every entry), `--today` (the rotating subset CI runs: the entries whose index
falls on today's weekday, so every entry runs once a week), `--only NAME ...`. `--out` writes the
result as JSON (benchmarks/results/mutants.json holds the last full run). A new safety mechanism
joins the list with its test; `invoice_pipeline_tests/test_mutants.py` checks in the normal suite
that every entry still applies to the code (a sabotaged .py file compiles and names nothing
undefined), names a test that exists, and, where that test is a property, one whose killing case
is explicit (`unexampled_draws`).
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from pathlib import Path

from ruff import find_ruff_bin

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "mutants.json"
# Long enough for the slowest guarded test (a SIGKILLed run, a chaos scenario); a hang is a result.
TEST_TIMEOUT_S = 900
DAYS_PER_ROTATION = 7


@dataclass(frozen=True)
class Edit:
    """Replace `old` by `new` in `path` (relative to the checkout); `old` must occur `count` times."""

    path: str
    old: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class Sabotage:
    name: str
    mechanism: str
    edits: tuple[Edit, ...]
    test: str
    # Exceptions (class names) that are the mechanism's natural failure, besides an assertion:
    # a database's refusal, say, where the mechanism exists to avoid it.
    raises: tuple[str, ...] = ()
    # The sabotage breaks every example a property of the test draws (the test measures the
    # generator itself, say), so no explicit case is needed: see unexampled_draws.
    any_draw_kills: bool = False


def _one(
    name: str, mechanism: str, path: str, old: str, new: str, test: str, raises: tuple[str, ...] = ()
) -> Sabotage:
    return Sabotage(name, mechanism, (Edit(path, old, new),), test, raises)


LIVENESS = "invoice_pipeline_tests/engine/test_liveness.py"
STAGES_TESTS = "invoice_pipeline_tests/engine/test_stages.py"
BUDGET_TESTS = "invoice_pipeline_tests/review_ui/test_review_ui_budget.py"
ATTACKS_TESTS = "invoice_pipeline_tests/review_ui/test_review_ui_attacks.py"
OCR_TESTS = "invoice_pipeline_tests/documents/test_ocr.py"
GLYPH_TESTS = "invoice_pipeline_tests/documents/test_ocr_glyphs.py"
ACCOUNTANT_STATEFUL = "invoice_pipeline_tests/engine/test_accountant_stateful.py"
# The accountant property's known sequences: a state machine has no @example (see unexampled_draws).
ACCOUNTANT_KNOWN = f"{ACCOUNTANT_STATEFUL}::test_known_sequences_are_booked_as_an_accountant_books_them"
PAYMENT_TESTS = "invoice_pipeline_tests/engine/test_payment_decision.py"
LAUNCHPAD_TESTS = "invoice_pipeline_tests/orchestration/test_launchpad_reviewers.py"
DAGSTER_GUARD_TEST = "invoice_pipeline_tests/test_dagster_guard.py::test_a_test_that_leaves_an_instance_entered_fails_and_the_next_finds_none"
ON_CONFLICT = "ON CONFLICT (invoice_id) WHERE status = 'running' DO NOTHING"

# The processing lock gone: the running-job index not unique, no ON CONFLICT on it, and no
# bounce off a running job in acquire_processing_lock.
PROCESSING_LOCK_GONE = (
    Edit(
        "sql/0001_schema.sql",
        "CREATE UNIQUE INDEX processing_jobs_one_running_per_invoice",
        "CREATE INDEX processing_jobs_one_running_per_invoice",
    ),
    Edit("sql/0002_lock_functions.sql", ON_CONFLICT, ""),
    Edit("sql/0005_chunk_locks.sql", ON_CONFLICT, ""),
    Edit("sql/0009_lock_order.sql", ON_CONFLICT, "", count=2),
    Edit(
        "sql/0009_lock_order.sql",
        "    IF EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = p_invoice_id AND j.status = 'running') THEN\n"
        "        RETURN NULL;\n"
        "    END IF;\n",
        "",
    ),
)

ACCOUNTANT_READS = "invoice_pipeline_tests/documents/test_what_an_accountant_reads.py"
ACCOUNTANT_POSTS = "invoice_pipeline_tests/engine/test_what_an_accountant_posts.py"
EXPORT_TESTS = "invoice_pipeline_tests/engine/exports"
LINELESS_TESTS = "invoice_pipeline_tests/engine/test_lineless_page_read.py"

# The mail checkpoint committed in a transaction of its own, before the message's attachments.
MAIL_CHECKPOINT_APART = (
    "invoice_pipeline/engine/store/mail.py",
    "        with self.db.transaction() as conn:\n            if not self._checkpoint(conn, message):\n",
    "        with self.db.transaction() as early:\n"
    "            claimed = self._checkpoint(early, message)\n"
    "        with self.db.transaction() as conn:\n"
    "            if not claimed:\n",
)

SABOTAGES: tuple[Sabotage, ...] = (
    _one(
        "fence-sql",
        "fence_jobs returns only running jobs (a swept lease's late write is refused)",
        "sql/0013_fence_heartbeat.sql",
        "            WHERE r.id = ANY(p_job_ids) AND r.status = 'running'\n",
        "            WHERE r.id = ANY(p_job_ids)\n",
        "invoice_pipeline_tests/test_document_limits.py::test_a_stuck_stage_fails_its_attempt_and_its_late_write_is_refused",
    ),
    _one(
        "fence-python",
        "a chunk write writes only the leases its fence returned",
        "invoice_pipeline/engine/store/database.py",
        "live = [(lease, payload) for lease, payload in items if lease.job_id in alive]",
        "live = list(items)",
        f"{STAGES_TESTS}::test_a_lease_lost_mid_chunk_loses_that_invoice_alone",
    ),
    _one(
        "chunk-fallback",
        "a refused chunk write is written again an invoice at a time",
        "invoice_pipeline/engine/store/database.py",
        "            if len(items) == 1:\n                return ChunkWrite({}, {}, {items[0][0].invoice_id: exc})\n",
        "            return ChunkWrite({}, {}, {lease.invoice_id: exc for lease, _ in items})\n",
        f"{STAGES_TESTS}::test_a_write_the_database_refuses_for_one_invoice_fails_that_invoice_alone",
    ),
    _one(
        "systemic",
        "an unreachable database fails the stage, not each invoice",
        "invoice_pipeline/engine/store/database.py",
        "    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError | PoolTimeout | PoolClosed)",
        "    return False",
        f"{STAGES_TESTS}::test_a_systemic_error_fails_the_stage_instead_of_each_invoice",
    ),
    _one(
        "contention-retried",
        "a lock timeout is contention: retried, then only its invoice fails",
        "invoice_pipeline/engine/store/database.py",
        '    return sqlstate is not None and (sqlstate.startswith("40") or sqlstate in CONTENTION_SQLSTATES)',
        "    return False",
        f"{LIVENESS}::test_a_write_that_loses_to_contention_is_retried_then_fails_only_its_invoice",
    ),
    _one(
        "heartbeat-skip-locked",
        "the keeper's heartbeat skips a job row a write holds (SKIP LOCKED)",
        "sql/queries/claims.sql",
        "        ORDER BY id FOR UPDATE SKIP LOCKED\n",
        "        ORDER BY id FOR UPDATE\n",
        f"{LIVENESS}::test_a_blocked_chunk_stops_neither_its_siblings_heartbeats_nor_the_sweep",
    ),
    _one(
        "sweep-skip-locked",
        "the sweep skips a job row a write holds (SKIP LOCKED)",
        "sql/0009_lock_order.sql",
        "            ORDER BY s.id FOR UPDATE SKIP LOCKED\n",
        "            ORDER BY s.id FOR UPDATE\n",
        f"{LIVENESS}::test_a_blocked_chunk_stops_neither_its_siblings_heartbeats_nor_the_sweep",
        # Without SKIP LOCKED the sweep waits on the row, into its short lock_timeout.
        raises=("LockNotAvailable",),
    ),
    _one(
        "sweep-only-stale",
        "the sweep frees only leases whose heartbeat is older than stale_after",
        "sql/0009_lock_order.sql",
        "            WHERE s.status = 'running' AND s.heartbeat_at < clock_timestamp() - p_stale_after\n",
        "            WHERE s.status = 'running'\n",
        f"{LIVENESS}::test_a_blocked_chunk_stops_neither_its_siblings_heartbeats_nor_the_sweep",
    ),
    _one(
        "store-ttl-claim",
        "a chunk claim sweeps only leases stale past the TTL its store was opened with",
        "invoice_pipeline/engine/store/maintenance.py",
        '        params = {"invoice_ids": list(invoice_ids), "stale_after": self.db.lock_ttl}\n',
        '        params = {"invoice_ids": list(invoice_ids), "stale_after": timedelta(0)}\n',
        "invoice_pipeline_tests/engine/test_locks.py::"
        "test_the_store_sweeps_with_the_ttl_it_was_opened_with_on_claim_and_in_the_sweep",
    ),
    _one(
        "store-ttl-sweep",
        "the sweep frees only leases stale past the TTL its store was opened with",
        "invoice_pipeline/engine/store/maintenance.py",
        '            "stale_after": self.db.lock_ttl,\n',
        '            "stale_after": timedelta(0),\n',
        "invoice_pipeline_tests/engine/test_locks.py::"
        "test_the_store_sweeps_with_the_ttl_it_was_opened_with_on_claim_and_in_the_sweep",
    ),
    _one(
        "claim-bounces",
        "a chunk claim leaves out an invoice whose running job it sees, before locking any row",
        "sql/0009_lock_order.sql",
        "          AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = i.id AND j.status = 'running')\n"
        "        ORDER BY i.id\n",
        "        ORDER BY i.id\n",
        f"{LIVENESS}::test_a_claim_bounces_off_a_holder_mid_write_and_the_holder_goes_on[original_row]",
    ),
    _one(
        "reschedule-recheck",
        "reschedule_failed re-checks for a running job under the row lock",
        "sql/queries/claims.sql",
        "    WHERE i.id = ANY(%(invoice_ids)s::uuid[]) AND i.status = 'processing'\n"
        "      AND NOT EXISTS (SELECT 1 FROM processing_jobs j WHERE j.invoice_id = i.id AND j.status = 'running')\n",
        "    WHERE i.id = ANY(%(invoice_ids)s::uuid[]) AND i.status = 'processing'\n",
        f"{LIVENESS}::test_maintenance_never_reschedules_an_invoice_claimed_after_its_snapshot",
    ),
    _one(
        "beat-at-commit",
        "a fenced write heartbeats its jobs as it commits",
        "invoice_pipeline/engine/store/database.py",
        '        if job_ids:\n            conn.execute(FENCE["beat_at_commit"]',
        '        if job_ids and False:\n            conn.execute(FENCE["beat_at_commit"]',
        f"{LIVENESS}::test_a_write_that_waited_after_its_fence_commits_a_fresh_heartbeat",
    ),
    _one(
        "claim-release",
        "a claim op that fails after taking leases releases them",
        "invoice_pipeline/orchestration/ops.py",
        "        loop.release_after_failure(\n"
        "            claims,\n"
        '            f"claim failed after taking the lock: {describe_error(exc)}",\n'
        "            dagster_hooks(context, store),\n"
        "        )\n",
        "",
        f"{LIVENESS}::test_a_claim_that_fails_after_taking_its_leases_releases_them",
    ),
    _one(
        "stage-op-release",
        "a stage op that fails outside its stage releases its chunk on its last try",
        "invoice_pipeline/orchestration/ops.py",
        "            if _last_try(context) or not isinstance(exc, Exception):\n"
        "                loop.release_after_failure(chunk.claims, message, hooks)\n",
        "",
        f"{LIVENESS}::test_a_stage_op_that_fails_outside_its_stage_releases_its_chunk",
    ),
    _one(
        "chunk-loop-release",
        "a chunk the loop drives in one go (the celery task) is released at once when a stage raises",
        "invoice_pipeline/engine/chunk_loop.py",
        '            self.release_after_failure(claims, f"chunk failed: {describe_error(exc)}", hooks)\n',
        "",
        "invoice_pipeline_tests/engine/test_chunk_loop.py::test_a_chunk_whose_stage_raises_is_released_at_once",
    ),
    Sabotage(
        "processing-lock",
        "one running job per invoice: the unique index and the bounce of acquire_processing_lock",
        PROCESSING_LOCK_GONE,
        "invoice_pipeline_tests/engine/review/test_review_races.py::test_two_reviewers_approve_and_reject_at_once",
    ),
    Sabotage(
        "review-page-lock",
        "a review page action takes the invoice's processing lock (busy while another holds it)",
        PROCESSING_LOCK_GONE,
        "invoice_pipeline_tests/review_ui/test_review_ui_http.py::test_an_action_while_another_holds_the_lock_writes_nothing",
    ),
    _one(
        "csrf",
        "a review form's CSRF token must be its session's",
        "invoice_pipeline/review_ui/auth.py",
        "    return session is not None and bool(token) and hmac.compare_digest(session.csrf, str(token))",
        "    return session is not None",
        "invoice_pipeline_tests/review_ui/test_review_ui_http.py::test_a_forged_post_without_the_token_is_refused",
    ),
    _one(
        "rekey-0003",
        "0003's data migration rekeys invoices decided before it",
        "invoice_pipeline/db/migrate.py",
        '    "0003_blocking_keys_and_review.sql": rekey_decided_invoices,',
        '    "0003_blocking_keys_and_review.sql": lambda conn: None,',
        "invoice_pipeline_tests/db/test_migrate.py::test_invoices_decided_before_blocking_keys_are_rekeyed_and_still_found",
    ),
    _one(
        "number-keys-0007",
        "0007's data migration fills the number key of invoices decided before it",
        "invoice_pipeline/db/migrate.py",
        '    "0007_page_money_fails_closed.sql": set_number_keys,',
        '    "0007_page_money_fails_closed.sql": lambda conn: None,',
        "invoice_pipeline_tests/db/test_migrate.py::test_invoices_decided_before_number_keys_are_found_by_a_copy_without_currency",
    ),
    _one(
        "number-key-lock",
        "a duplicate decision also locks its number key",
        "invoice_pipeline/domain/keys.py",
        "    return tuple(sorted({*lock_ids(block), number.id}))",
        "    return tuple(sorted({*lock_ids(block)}))",
        "invoice_pipeline_tests/engine/test_money_fails_closed.py::test_number_twins_decided_at_the_same_moment_never_make_two_originals",
    ),
    Sabotage(
        "generator-guard",
        "the copy generator of the key property tests makes pairs the matcher accepts",
        (
            Edit(
                "invoice_pipeline_tests/domain/test_keys.py",
                "        invoice_number=copy_number,",
                '        invoice_number=copy_number + "1",',
            ),
        ),
        "invoice_pipeline_tests/domain/test_keys.py::test_generated_copies_are_mostly_accepted",
        # Every copy's number gets a digit: the share accepted falls whatever pairs are drawn.
        any_draw_kills=True,
    ),
    _one(
        "save-once-per-chunk",
        "a stage saves what it read as it goes (every save_after_seconds of work), not at the chunk's end",
        "invoice_pipeline/engine/stages.py",
        "        if pending and (worked >= save_after or index == len(items) - 1):",
        "        if pending and index == len(items) - 1:",
        "invoice_pipeline_tests/test_crash_cost.py::test_a_kill_mid_chunk_keeps_what_was_read_and_rereads_only_the_rest",
    ),
    Sabotage(
        "safe-path-children",
        "child interpreters run the installed package: -P, and PYTHONSAFEPATH for their children",
        (
            Edit(
                "invoice_pipeline/child_python.py",
                "    return [sys.executable, SAFE_PATH_FLAG, *args]",
                "    return [sys.executable, *args]",
            ),
            Edit("invoice_pipeline/child_python.py", '    env["PYTHONSAFEPATH"] = "1"\n', ""),
        ),
        "invoice_pipeline_tests/test_any_folder.py::test_process_from_an_old_checkout_folder_runs_the_installed_package",
    ),
    _one(
        "quiet-file",
        "a file nobody wrote for QUIET_SECONDS is taken at the first scan",
        "invoice_pipeline/engine/ingest.py",
        "        return previous == self or now_ns - self.mtime_ns >= QUIET_SECONDS * 1_000_000_000",
        "        return previous == self",
        "invoice_pipeline_tests/orchestration/sensors/test_new_invoices.py::test_a_file_nobody_wrote_for_a_while_is_taken_at_the_first_scan",
    ),
    _one(
        "restart-overlap",
        "the PostgreSQL restart scenario stops the server while runs are in flight",
        "chaos/pg_restart.py",
        "                server.stop(mode=mode)\n",
        "                if holding is not None:\n"
        "                    holding.close()\n"
        "                for p in procs:\n"
        "                    p.join(600)\n"
        "                server.stop(mode=mode)\n",
        "invoice_pipeline_tests/chaos/test_chaos.py::test_fast_subset_holds_every_invariant[postgres_restart]",
    ),
    _one(
        "self-fence",
        "a lease not renewed for 2/3 of its TTL may not be held (self-fencing)",
        "invoice_pipeline/engine/leases.py",
        "        return self._clock() - renewed < self._fence_after",
        "        return True",
        "invoice_pipeline_tests/cluster/test_self_fencing.py::test_a_lease_not_renewed_for_most_of_the_ttl_may_not_be_held",
    ),
    _one(
        "keeper-renews",
        "the lease keeper renews every lease its beat confirms",
        "invoice_pipeline/engine/leases.py",
        "                    self._renewed[job_id] = sent\n",
        "                    pass\n",
        "invoice_pipeline_tests/cluster/test_self_fencing.py::test_renewed_leases_stay_held_and_lost_ones_do_not",
    ),
    _one(
        "keeper-beats-waiting-branches",
        "the keeper's one statement beats every lease of a batch, the waiting branches too",
        "sql/queries/claims.sql",
        "    UPDATE processing_jobs SET heartbeat_at = clock_timestamp()\n    WHERE id IN (\n",
        "    UPDATE processing_jobs SET heartbeat_at = heartbeat_at\n    WHERE id IN (\n",
        "invoice_pipeline_tests/orchestration/test_jobs.py::test_waiting_batch_branches_keep_their_leases_under_a_running_sweep",
    ),
    _one(
        "layout-org",
        "a vendor layout reads only its own organisation's pages",
        "invoice_pipeline/documents/reading/layouts/match.py",
        "    return layout.enabled and layout.org_id == org_id",
        "    return layout.enabled",
        "invoice_pipeline_tests/documents/test_vendor_layouts.py::test_never_applied_for_another_org",
    ),
    _one(
        "field-unread",
        "a legible page with an unread field is held for a person, not quarantined (issue 37)",
        "invoice_pipeline/engine/stages.py",
        "        if problems and found.read_from_page:\n",
        "        if False:\n",
        "invoice_pipeline_tests/engine/test_vendors.py::"
        "test_a_legible_page_without_its_total_is_held_corrected_and_posted_as_typed",
    ),
    _one(
        "vendor-unconfirmed",
        "a page-read seller no registered vendor confirms is held (issue 37)",
        "invoice_pipeline/domain/payment.py",
        "        not fields.read_from_page\n",
        "        True\n",
        "invoice_pipeline_tests/engine/test_vendors.py::"
        "test_a_page_read_seller_not_in_the_registry_is_held_and_approval_registers_it",
    ),
    _one(
        "bank-details",
        "an IBAN the vendor is not known to have is held, on every format (issue 37)",
        "invoice_pipeline/domain/payment.py",
        '    if iban is not None and not vendor.has("iban", iban.value):\n',
        "    if False:\n",
        "invoice_pipeline_tests/engine/test_vendors.py::test_a_changed_iban_is_held_on_a_structured_invoice_too",
    ),
    # The org's own identity is never taken for the seller's (issue 37), one safeguard at a time
    # (issue 53: one entry that removed the whole function let the IBAN filter go untested).
    _one(
        "own-identity-vat",
        "a page's seller VAT id that is the org's own is dropped (it is the buyer's) (issue 37)",
        "invoice_pipeline/domain/identity.py",
        '    if profile.has("vat", fields.seller_vat_id):\n',
        "    if False:\n",
        "invoice_pipeline_tests/engine/test_vendors.py::test_the_orgs_own_identity_is_never_taken_for_the_sellers",
    ),
    _one(
        "own-identity-name",
        "a page's seller name that is the org's own, in any spelling, is dropped (issue 37)",
        "invoice_pipeline/domain/identity.py",
        '    if fields.seller_name and profile.has("name", fields.seller_name):\n',
        "    if False:\n",
        "invoice_pipeline_tests/engine/test_vendors.py::"
        "test_own_identity_is_dropped_in_any_language_and_the_page_iban_is_the_sellers",
    ),
    _one(
        "own-identity-page-iban",
        "the IBAN to pay on a page is its first valid IBAN that is not the org's own (a direct-debit "
        "notice prints the org's account first) (issue 37)",
        "invoice_pipeline/domain/identity.py",
        '        theirs = [iban for iban in ibans_on_page(page_text) if not profile.has("iban", iban)]\n',
        "        theirs = list(ibans_on_page(page_text))\n",
        "invoice_pipeline_tests/engine/test_vendors.py::"
        "test_own_identity_is_dropped_in_any_language_and_the_page_iban_is_the_sellers",
    ),
    _one(
        "parser-crash",
        "an unexpected parser exception quarantines the file as unreadable, never crashes the stage",
        "invoice_pipeline/documents/sandbox.py",
        "    except Exception as exc:\n        raise unreadable(type(exc).__name__, str(exc)) from None\n",
        "",
        "invoice_pipeline_tests/documents/test_sandbox.py::test_an_unexpected_parser_exception_is_bad_input_not_a_retry",
        # Without the catch the parser's own exception (a ValueError here) escapes the stage.
        raises=("ValueError",),
    ),
    Sabotage(
        "xml-entities",
        "XML with entities is refused: no entity resolved, none let through the screen or the tree check",
        (
            Edit(
                "invoice_pipeline/documents/xmlsafe.py",
                "        resolve_entities=False,\n",
                "        resolve_entities=True,\n",
            ),
            Edit("invoice_pipeline/documents/xmlsafe.py", "    _screen_raw(content)\n", ""),
            Edit(
                "invoice_pipeline/documents/xmlsafe.py",
                "    dtd = tree.docinfo.internalDTD\n",
                "    return False\n    dtd = tree.docinfo.internalDTD\n",
            ),
        ),
        "invoice_pipeline_tests/documents/test_xml_security.py::test_xxe_never_discloses_a_local_file",
    ),
    _one(
        "die-with-parent",
        "a worker child dies with its parent (PR_SET_PDEATHSIG): kill -9 of a command leaves no orphan",
        "invoice_pipeline/forked.py",
        "        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)\n",
        "        pass\n",
        "invoice_pipeline_tests/test_forked.py::test_children_die_with_a_parent_killed_by_sigkill",
    ),
    _one(
        "bind-loopback",
        "the review page refuses to listen beyond loopback when nobody has to log in",
        "invoice_pipeline/review_ui/auth.py",
        "    if is_loopback(host):\n        return\n    if not auth.authenticates:\n",
        "    return\n    if not auth.authenticates:\n",
        "invoice_pipeline_tests/review_ui/test_review_ui_http.py::"
        "test_binding_beyond_loopback_without_authentication_is_refused",
    ),
    _one(
        "orphan-row-lock",
        "the sweep row-locks the orphans it reschedules, skipping a row someone is writing",
        "sql/queries/maintenance.sql",
        "ORDER BY i.id\nFOR NO KEY UPDATE OF i SKIP LOCKED\n",
        "ORDER BY i.id\n",
        f"{LIVENESS}::test_the_sweep_skips_an_orphan_someone_is_writing_and_takes_it_at_the_next_sweep",
        # Without SKIP LOCKED the sweep waits on the row, into its short lock_timeout.
        raises=("LockNotAvailable",),
    ),
    _one(
        "dead-run-requests",
        "the sweep releases at once the requests of a run that died before claiming them",
        "invoice_pipeline/engine/maintenance.py",
        "    released = release_abandoned_requests(db, runs) if runs is not None else []\n",
        "    released: list[Rescheduled] = []\n",
        "invoice_pipeline_tests/test_kill_process.py::"
        "test_kill_9_of_process_at_random_moments_strands_nothing_past_one_sweep",
    ),
    _one(
        "dev-signal-handlers-first",
        "dev installs its stop handlers before starting dagster dev, so no child inherits an ignored SIGINT",
        "invoice_pipeline/cli/dev.py",
        "    previous = {sig: signal.signal(sig, on_signal) for sig in stop_signals}\n"
        "    try:\n"
        "        proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)\n",
        "    proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)\n"
        "    previous = {sig: signal.signal(sig, on_signal) for sig in stop_signals}\n"
        "    try:\n",
        "invoice_pipeline_tests/test_dev_signals.py::test_dev_started_by_a_script_stops_everything_on_sigterm",
    ),
    _one(
        "layout-vendor",
        "a vendor layout reads only pages whose vendor the registry confirms as its vendor (issues 37, 54)",
        "invoice_pipeline/documents/reading/layouts/match.py",
        '        return vendor.has("vat", value)\n',
        "        return True\n",
        "invoice_pipeline_tests/documents/test_vendor_layouts.py::"
        "test_a_layout_is_refused_for_another_vendor_that_prints_its_vat_id_as_the_buyers_or_in_a_reference",
    ),
    _one(
        "request-budget",
        "every request to the review page spends its client address's budget first; over it: 429 (issue 41)",
        "invoice_pipeline/review_ui/budget.py",
        "            refused = await self.budget.admit(client_address(self.auth, HTTPConnection(scope)))\n",
        "            refused = None\n",
        f"{BUDGET_TESTS}::test_an_address_over_its_budget_gets_429_while_another_is_served",
    ),
    _one(
        "request-tarpit",
        "at most 8 requests per address wait for a token; the next one is refused at once (issue 41)",
        "invoice_pipeline/review_ui/budget.py",
        "            bucket.waiting >= self.config.max_waiting_per_address\n            or self.waiting",
        "            self.waiting",
        f"{BUDGET_TESTS}::test_waiting_requests_are_bounded_the_ninth_refused_at_once",
    ),
    _one(
        "budget-table-bound",
        "the review page's table of client addresses is bounded, least recently seen forgotten first (issue 41)",
        "invoice_pipeline/review_ui/budget.py",
        "        while len(self._buckets) > self.config.max_addresses:\n            self._buckets.popitem(last=False)\n",
        "",
        f"{BUDGET_TESTS}::test_the_address_table_never_exceeds_its_bound",
    ),
    _one(
        "launchpad-orgs",
        "a review or correction by someone who may not act for the invoice's org is refused (issue 41)",
        "invoice_pipeline/engine/review.py",
        "        return self.orgs is None or org_id in self.orgs\n",
        "        return True\n",
        f"{LAUNCHPAD_TESTS}::test_a_listed_reviewer_acts_only_for_their_orgs",
    ),
    _one(
        "launchpad-local-only",
        "only a local deployment's Launchpad review runs act, with or without a users file (issue 41)",
        "invoice_pipeline/orchestration/review_jobs.py",
        "    if access.deployment != LOCAL_DEPLOYMENT:\n",
        "    if False:\n",
        f"{LAUNCHPAD_TESTS}::test_only_a_local_deployment_approves_whatever_its_users_file",
    ),
    _one(
        "review-host-check",
        "a request whose Host is not one of the review page's names gets 400: no DNS rebinding (issue 41)",
        "invoice_pipeline/review_ui/auth.py",
        '    return name.rstrip(".") in auth.host_names\n',
        "    return True\n",
        f"{ATTACKS_TESTS}::test_a_rebound_host_name_is_refused_and_cannot_approve",
    ),
    _one(
        "review-session-at-login",
        "the review page keeps a session only for a login: an anonymous request leaves nothing (issue 41)",
        "invoice_pipeline/review_ui/web.py",
        '            session = Session("", self.tokens.csrf(nonce, who), now, now, reviewer, flash, transient=True)\n',
        "            session = self.sessions.new(reviewer)\n",
        f"{ATTACKS_TESTS}::test_anonymous_requests_leave_no_session_behind",
    ),
    _one(
        "review-session-bound",
        "the review page's sessions are bounded, a login past the bound ending the least recently seen (issue 41)",
        "invoice_pipeline/review_ui/auth.py",
        "                if len(self._by_id) < self.max_sessions and not self._expired(oldest, now):\n",
        "                if not self._expired(oldest, now):\n",
        f"{ATTACKS_TESTS}::test_sessions_are_bounded_the_least_recently_seen_going_first",
    ),
    _one(
        "review-login-throttle",
        "a login while its account or address backs off is refused (429) before any password check (issue 41)",
        "invoice_pipeline/review_ui/auth.py",
        "            if wait > 0:\n                return wait\n            self._address(address).pending += 1\n",
        "            self._address(address).pending += 1\n",
        f"{ATTACKS_TESTS}::test_password_guessing_is_throttled_and_locks_the_account",
    ),
    _one(
        "review-login-lockout",
        "ten wrong passwords in a row lock the account for 15 minutes, from any address (issue 41)",
        "invoice_pipeline/review_ui/auth.py",
        "                acc.until = max(acc.until, now + LOCKOUT_SECONDS)\n",
        "",
        f"{ATTACKS_TESTS}::test_password_guessing_is_throttled_and_locks_the_account",
    ),
    _one(
        "review-page-pixels",
        "a page image over the pipeline's 40 M pixels is refused from its size, before it is drawn (issue 41)",
        "invoice_pipeline/documents/page_images.py",
        "    if width * height <= MAX_PAGE_PIXELS:\n",
        "    if True:\n",
        f"{ATTACKS_TESTS}::test_huge_pages_are_refused_from_their_size_and_the_refusal_shown",
    ),
    _one(
        "review-proxy-unknown-user",
        "a name the proxy sends that the users file does not list acts on no org: 403 (issue 41)",
        "invoice_pipeline/review_ui/auth.py",
        "    return Reviewer(name, known.orgs) if known is not None else None\n",
        "    return Reviewer(name, known.orgs if known is not None else None)\n",
        f"{ATTACKS_TESTS}::test_proxy_names_missing_from_the_users_file_get_403",
    ),
    _one(
        "review-empty-orgs",
        'an account with "orgs": [] sees no org in the review queue, not every org (issue 41)',
        "invoice_pipeline/engine/review_page_records.py",
        '            "orgs": list(self.orgs) if self.orgs is not None else None,\n',
        '            "orgs": list(self.orgs) if self.orgs else None,\n',
        f"{ATTACKS_TESTS}::test_an_account_with_no_orgs_sees_no_org",
    ),
    _one(
        "review-users-file-change",
        "a session whose account changed in the users file (removed, other orgs) ends when next seen (issue 41)",
        "invoice_pipeline/review_ui/auth.py",
        "                or session.user is None\n                or account(session.user.name) != session.user\n",
        "                or session.user is None\n",
        f"{ATTACKS_TESTS}::test_a_changed_users_file_ends_the_sessions_it_changed",
    ),
    _one(
        "kube-review-jobs",
        "the Kubernetes manifests' code server loads no Launchpad review jobs (issue 41)",
        "deploy/kube/invoice-pipeline.yaml",
        "the code\n            # server's setting is what removes them, the others keep to it.\n"
        '            - name: INVOICE_PIPELINE_REVIEW_JOBS\n              value: "0"\n',
        "the code\n            # server's setting is what removes them, the others keep to it.\n"
        '            - name: INVOICE_PIPELINE_REVIEW_JOBS\n              value: "1"\n',
        "invoice_pipeline_tests/test_deploy_recipe.py::test_the_manifests_code_server_loads_no_launchpad_approvals",
    ),
    _one(
        "helm-production-deployment",
        "the Helm values' run pods name the production deployment: Launchpad review runs act for "
        "nobody there (issue 41)",
        "deploy/helm/values.yaml",
        '        - "INVOICE_PIPELINE_DEPLOYMENT=production"\n',
        "",
        f"{LAUNCHPAD_TESTS}::test_a_launchpad_review_run_in_the_helm_recipes_pods_acts_for_nobody",
    ),
    _one(
        "kube-run-monitoring",
        "the manifests' Dagster instance monitors runs (a celery run's deadline is enforced by it)",
        "deploy/kube/invoice-pipeline.yaml",
        "    run_monitoring:\n      enabled: true\n",
        "    run_monitoring:\n      enabled: false\n",
        "invoice_pipeline_tests/test_deploy_recipe.py::test_the_manifests_dagster_instance_runs_run_monitoring",
    ),
    _one(
        "kube-review-loopback",
        "the manifests' review page listens on its pod's loopback, reachable only through the proxy",
        "deploy/kube/invoice-pipeline.yaml",
        'command: ["invoice-pipeline", "review-ui", "--host", "127.0.0.1", "--port", "3100",',
        'command: ["invoice-pipeline", "review-ui", "--host", "0.0.0.0", "--port", "3100",',
        "invoice_pipeline_tests/test_deploy_recipe.py::test_the_manifests_review_page_answers_on_its_pods_loopback_only",
    ),
    _one(
        "ranker-unsure-unread",
        "a ranker choice below the field's minimum confidence is no value (held for a person), never a guess",
        "invoice_pipeline/documents/reading/ranker.py",
        "        if share < model.min_confidence:\n",
        "        if False:\n",
        "invoice_pipeline_tests/documents/test_ranker.py::"
        "test_an_unsure_ranker_leaves_the_field_for_a_person_never_a_guess",
    ),
    _one(
        "ranker-country-no-seller",
        "a country name alone (an address's last line) is never a seller-name candidate",
        "invoice_pipeline/documents/reading/candidates.py",
        " or (name, seg.line) in seen or compact in COUNTRY_NAMES:\n",
        " or (name, seg.line) in seen:\n",
        "invoice_pipeline_tests/documents/test_ranker.py::"
        "test_the_letterhead_is_ranked_by_size_and_weight_and_a_country_line_is_no_seller",
    ),
    _one(
        "printed-currency-kept",
        "a currency the page prints but the pipeline does not take is never replaced by the "
        "seller's VAT country (the field stays empty: held for a person)",
        "invoice_pipeline/documents/text_fields.py",
        "    if currency is None and printed is None and not shared and vat is not None:\n",
        "    if currency is None and not shared and vat is not None:\n",
        "invoice_pipeline_tests/documents/test_reading_roles.py::"
        "test_a_printed_currency_the_pipeline_does_not_take_is_not_replaced_by_the_sellers_country",
    ),
    _one(
        "ocr-euro-substitute",
        "a scan's euro sign, which the recogniser spells '∈' (its alphabet has no '€'), is read as "
        "the euro (issue 40)",
        "invoice_pipeline/documents/ocr.py",
        'OCR_SUBSTITUTES = FULL_WIDTH_TO_ASCII | {ord("∈"): ord("€")}\n',
        "OCR_SUBSTITUTES = FULL_WIDTH_TO_ASCII\n",
        f"{OCR_TESTS}::test_full_width_marks_and_signs_the_recogniser_cannot_spell_are_read_as_printed",
    ),
    _one(
        "ocr-numero-sign",
        "a scan's 'n?' before a number is the numero sign the recogniser misread (issue 40)",
        "invoice_pipeline/documents/ocr.py",
        '    text = _NUMERO_AS_QUESTION.sub(r"\\1°", text.translate(OCR_SUBSTITUTES))\n',
        "    text = text.translate(OCR_SUBSTITUTES)\n",
        f"{OCR_TESTS}::test_full_width_marks_and_signs_the_recogniser_cannot_spell_are_read_as_printed",
    ),
    _one(
        "ocr-ranker-line-confidence",
        "on a scan the ranker offers no value from a line OCR read below the field threshold (issue 40)",
        "invoice_pipeline/documents/reading/ranker.py",
        "            if read < MIN_FIELD_CONFIDENCE:\n",
        "            if False:\n",
        f"{OCR_TESTS}::test_the_ranker_reads_scans_no_surer_than_ocr_read_the_line",
    ),
    _one(
        "ocr-run-together-labels",
        "on a scan a label the recogniser ran into the word before or after it ('comVAT:') is still "
        "a label (issue 40)",
        "invoice_pipeline/documents/text_fields.py",
        "        doc = TextDoc(text, run_together=ocr)\n",
        "        doc = TextDoc(text, run_together=False)\n",
        f"{OCR_TESTS}::test_words_the_recogniser_ran_together_are_still_read_on_a_scan",
    ),
    _one(
        "ocr-value-run-into-label",
        "on a scan a value run into its label ('TVAFR…') is still read after it (issue 40)",
        "invoice_pipeline/documents/reading/labels.py",
        "                if not doc.value_joined(seg.text[m.end()]):\n",
        "                if True:\n",
        f"{OCR_TESTS}::test_words_the_recogniser_ran_together_are_still_read_on_a_scan",
    ),
    _one(
        "month-day-comma-year",
        "'October 1,2023' is a date: a comma alone may part the day from the year (issue 40)",
        "invoice_pipeline/documents/reading/page_values.py",
        r"(\d{1,2})(?:st|nd|rd|th)?(?:,\s*|\s+)(\d{4})",
        r"(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})",
        f"{OCR_TESTS}::test_words_the_recogniser_ran_together_are_still_read_on_a_scan",
    ),
    _one(
        "instalment-due",
        "a premium or an instalment due is the amount an insurer's or a utility's invoice asks for: "
        "such a page is an invoice, not 'not_an_invoice' (issue 40)",
        "invoice_pipeline/documents/reading/amounts.py",
        "        + INSTALMENT_DUE,\n",
        '        + "(?!)",\n',
        "invoice_pipeline_tests/documents/test_reading_roles.py::"
        "test_premium_notices_and_instalment_invoices_are_invoices",
    ),
    _one(
        "ocr-legal-form-apart",
        "on a scan a legal form run into the seller's name ('MusterGmbH') is set apart (issue 40)",
        "invoice_pipeline/documents/text_fields.py",
        "        fields = replace(fields, seller_name=legal_form_apart(fields.seller_name))\n",
        "        pass\n",
        f"{OCR_TESTS}::test_a_legal_form_the_recogniser_ran_into_the_name_is_set_apart",
    ),
    _one(
        "legal-form-after-a-name",
        "a legal form names a company only after a name: '412,250 KG' is a weight, not the seller (issue 40)",
        "invoice_pipeline/documents/reading/seller_buyer.py",
        "                named_company(seg.text)\n",
        "                LEGAL_FORM.search(seg.text)\n",
        "invoice_pipeline_tests/documents/test_reading_roles.py::test_a_weight_in_kilograms_is_no_company",
    ),
    _one(
        "scan-currency-held",
        "a currency a scan only suggests by the seller's VAT country is held for a person: OCR "
        "cannot spell '€' or '£' (issue 40)",
        "invoice_pipeline/domain/review.py",
        "    if fields.currency_inferred_on_a_scan:\n",
        "    if False:\n",
        f"{OCR_TESTS}::test_a_currency_a_scan_only_suggests_by_the_sellers_country_is_held",
    ),
    _one(
        "ocr-legal-marker-run-together",
        "on a scan a legal footer's marker run into its number ('SIRET1234…') still marks the "
        "footer, so the issuer is not taken from the buyer's window (issue 40)",
        "invoice_pipeline/documents/reading/parties.py",
        "    markers = _LEGAL_MARKERS_RUN_TOGETHER if run_together else LEGAL_MARKERS\n",
        "    markers = LEGAL_MARKERS\n",
        f"{OCR_TESTS}::test_a_legal_footer_whose_markers_ran_into_their_numbers_still_names_the_issuer",
    ),
    _one(
        "euro-shape-confirmed",
        "a euro sign told by its shape on a scan is paid in only when the seller's VAT country "
        "confirms the euro (issue 40)",
        "invoice_pipeline/documents/text_fields.py",
        '    if vat is not None and currency_of_vat_id(vat.value, issue.value if issue else None) == "EUR":\n',
        "    if vat is not None:\n",
        f"{GLYPH_TESTS}::test_a_euro_told_by_its_shape_posts_only_when_the_sellers_country_confirms_it",
    ),
    _one(
        "euro-shape-margin",
        "a glyph is called a euro sign only when it looks more like one than like any rival by a "
        "margin: a coarse scan's 'c', 'C' or '£' that matches the euro well enough is still no euro "
        "(issues 40, 53)",
        "invoice_pipeline/documents/ocr_glyphs.py",
        "        return self.euro >= EURO_MIN_SCORE and self.euro >= self.rival_score + EURO_MARGIN\n",
        "        return self.euro >= EURO_MIN_SCORE\n",
        f"{GLYPH_TESTS}::test_a_rival_on_a_coarse_scan_is_no_euro_sign",
    ),
    _one(
        "euro-shape-min-score",
        "a glyph is called a euro sign only when it matches one well (a minimum score): a coarse "
        "scan's 'e', nearer the euro than any rival, is still no euro (issue 53)",
        "invoice_pipeline/documents/ocr_glyphs.py",
        "        return self.euro >= EURO_MIN_SCORE and self.euro >= self.rival_score + EURO_MARGIN\n",
        "        return self.euro >= self.rival_score + EURO_MARGIN\n",
        f"{GLYPH_TESTS}::test_a_rival_on_a_coarse_scan_is_no_euro_sign",
    ),
    _one(
        "review-proxy-user-peer",
        "the proxy's user header signs someone in only when the socket's peer is a --trusted-proxy "
        "(issue 53)",
        "invoice_pipeline/review_ui/auth.py",
        "    if not auth.proxy_header or not is_trusted_proxy(auth, client_host):\n",
        "    if not auth.proxy_header:\n",
        "invoice_pipeline_tests/review_ui/test_review_ui_proxy.py::"
        "test_the_proxy_user_header_from_a_client_that_is_no_trusted_proxy_signs_nobody_in",
    ),
    _one(
        "review-forwarded-for-peer",
        "X-Forwarded-For names the client (budget, login throttle) only when the socket's peer is a "
        "--trusted-proxy (issue 53)",
        "invoice_pipeline/review_ui/auth.py",
        "    if not auth.forwarded_for or not is_trusted_proxy(auth, peer):\n",
        "    if not auth.forwarded_for:\n",
        "invoice_pipeline_tests/review_ui/test_review_ui_proxy.py::test_forwarded_for_from_a_client_that_is_no_trusted_proxy_is_ignored",
    ),
    _one(
        "review-forwarded-for-rightmost",
        "X-Forwarded-For is read from the right: the client is the rightmost item that is no trusted "
        "proxy, not what the client wrote on the left (issue 53)",
        "invoice_pipeline/review_ui/auth.py",
        "    for item in reversed(items):\n",
        "    for item in items:\n",
        "invoice_pipeline_tests/review_ui/test_review_ui_proxy.py::test_a_trusted_proxys_forwarded_for_lines_name_the_rightmost_untrusted_address",
    ),
    _one(
        "review-forwarded-for-all-lines",
        "every X-Forwarded-For header line is read, as one list in order, not the first line only (issue 53)",
        "invoice_pipeline/review_ui/auth.py",
        '    items = [item.strip() for line in lines for item in line.split(",")]\n',
        '    items = [item.strip() for line in lines[:1] for item in line.split(",")]\n',
        "invoice_pipeline_tests/review_ui/test_review_ui_proxy.py::test_a_trusted_proxys_forwarded_for_lines_name_the_rightmost_untrusted_address",
    ),
    _one(
        "review-login-reservation",
        "a login reserves its throttle slot before its password is hashed: guesses sent at once get "
        "no more password checks than one after another (issue 53)",
        "invoice_pipeline/review_ui/auth.py",
        "            self._address(address).pending += 1\n            if account is not None:\n"
        "                self._accounts.setdefault(account, _Failures()).pending += 1\n",
        "            self._address(address)\n",
        "invoice_pipeline_tests/review_ui/test_review_ui_proxy.py::test_guesses_sent_at_once_get_no_more_password_checks_than_one_after_another",
    ),
    _one(
        "review-action-fence",
        "a review action whose processing lock was swept before it wrote writes nothing (issue 52)",
        "invoice_pipeline/engine/store/review.py",
        "        with self.db.fenced(lease, before_fence) as conn:\n",
        "        with self.db.transaction() as conn:\n",
        "invoice_pipeline_tests/engine/review/test_review_fence.py::test_a_decision_whose_lock_was_swept_before_it_wrote_writes_nothing[reject]",
    ),
    _one(
        "review-correction-fence",
        "a correction whose processing lock was swept before it wrote writes nothing (issue 52)",
        "invoice_pipeline/engine/store/corrections.py",
        "        with self.db.fenced(lease, locks_first) as conn:\n",
        "        with self.db.transaction() as conn:\n",
        "invoice_pipeline_tests/engine/review/test_review_fence.py::test_a_decision_whose_lock_was_swept_before_it_wrote_writes_nothing[correct]",
    ),
    _one(
        "correction-on-fields-read",
        "a correction computed from the fields read before its lock is saved only if they are still "
        "the invoice's: another reviewer's correction in between is never undone (issue 57)",
        "invoice_pipeline/engine/store/corrections.py",
        "        if target.org_id != correction.org_id or InvoiceFields.from_json(target.fields) != correction.old:\n",
        "        if False:\n",
        "invoice_pipeline_tests/engine/review/test_correction_read_once.py::"
        "test_a_correction_made_on_fields_changed_before_its_lock_writes_nothing",
    ),
    _one(
        "correction-on-fields-read-property",
        "whatever reviewers read when, the saved fields are exactly the corrections reported done, "
        "each applied to the fields the one before left (issue 57)",
        "invoice_pipeline/engine/store/corrections.py",
        "        if target.org_id != correction.org_id or InvoiceFields.from_json(target.fields) != correction.old:\n",
        "        if False:\n",
        "invoice_pipeline_tests/engine/review/test_correction_read_once.py::"
        "test_the_saved_fields_are_the_done_corrections_applied_in_order",
    ),
    # -- issue 53: mechanisms a hand review broke without any test failing -----------------------
    _one(
        "correction-rechecks-payee",
        "a correction decides who is paid again for the fields as corrected: a changed IBAN typed "
        "into a held invoice is held as bank_details_changed beside corrected (issue 53)",
        "invoice_pipeline/engine/corrections.py",
        "    paid = who_is_paid(facts[invoice_id])\n",
        "    paid = []\n",
        "invoice_pipeline_tests/engine/test_vendors.py::test_a_correction_decides_who_is_paid_again",
    ),
    _one(
        "reexecution-never-adopts",
        "a run re-executed from failure adopts only a job its own run holds, never one another "
        "(maybe live) owner is running (issue 53)",
        "invoice_pipeline/engine/chunk_loop.py",
        "            if holder is not None and holder.owner == owner:\n",
        "            if holder is not None:\n",
        "invoice_pipeline_tests/orchestration/test_reexecution.py::"
        "test_a_reexecuted_run_never_adopts_a_job_another_owner_runs",
    ),
    _one(
        "import-refuses-two-vendors",
        "a vendor master row whose identifiers belong to two vendors is refused, never merged into "
        "one of them (issue 53)",
        "invoice_pipeline/engine/store/vendors.py",
        "                if len(owners) > 1:\n",
        "                if False:\n",
        f"{PAYMENT_TESTS}::test_a_vendor_master_row_naming_two_vendors_is_refused_and_merges_nothing",
    ),
    _one(
        "metrics-decision-moves",
        "a changed duplicate decision takes its count off the old kind (the trigger's -1), so the "
        "counters still equal a recount (issue 53)",
        "sql/0018_metrics.sql",
        "            INSERT INTO metric_count_deltas (metric, label, n) VALUES ('duplicate_decisions', "
        "OLD.duplicate_status, -1);\n",
        "            NULL;\n",
        "invoice_pipeline_tests/engine/test_metrics.py::test_the_counters_follow_a_duplicate_decision_a_person_changes",
    ),
    _one(
        "number-guard-labels",
        "the value after an invoice-number label is never a date, an amount or an identifier printed on the page (issue 52)",
        "invoice_pipeline/documents/text_fields.py",
        "        why = why_not_a_number(number.value, printed)\n",
        "        why = None\n",
        "invoice_pipeline_tests/documents/test_number_never_another_value.py::test_a_number_label_beside_another_value_leaves_the_number_unread[the issue date]",
    ),
    _one(
        "number-guard-candidates",
        "the ranker's invoice-number candidates never include a postcode, date, amount or identifier (issue 52)",
        "invoice_pipeline/documents/reading/candidates.py",
        "                or not could_be_invoice_number(token, printed)\n",
        "",
        "invoice_pipeline_tests/documents/test_number_never_another_value.py::test_the_rankers_candidates_never_include_another_value[the seller's postcode and town]",
    ),
    _one(
        "number-guard-layout",
        "a vendor layout's invoice number at its learnt place is refused when it is a date (issue 52)",
        "invoice_pipeline/documents/reading/layouts/read.py",
        '    if rule.field == "invoice_number" and (why := why_not_a_number(',
        '    if rule.field == "never" and (why := why_not_a_number(',
        "invoice_pipeline_tests/documents/test_number_never_another_value.py::test_a_vendor_layout_whose_number_place_holds_a_date_leaves_the_number_unread",
    ),
    _one(
        "number-under-another-row",
        "a number read below its label past another row (a quantity in the item table) is not taken (issue 52)",
        "invoice_pipeline/documents/text_fields.py",
        "            why = _under_another_row(doc, number)\n",
        "            why = None\n",
        "invoice_pipeline_tests/documents/test_number_never_another_value.py::test_a_resent_copy_whose_number_is_not_text_is_held_not_posted",
    ),
    # Issue 58 items 1, 2, 4: what an accountant posts (domain/doctypes.py, documents/collect.py).
    _one(
        "doctype-not-a-claim",
        "a document whose type code says nothing is owed (325 pro-forma) is held, never posted (issue 58)",
        "invoice_pipeline/domain/review.py",
        '    if row.document_class == "not_a_claim":\n',
        "    if False:\n",
        f"{ACCOUNTANT_POSTS}::test_a_pro_forma_is_never_posted",
    ),
    _one(
        "doctype-correction",
        "a corrected invoice (384) is held naming the invoice it corrects, never paid on top of it (issue 58)",
        "invoice_pipeline/domain/review.py",
        '    if row.document_class == "correction":\n',
        "    if False:\n",
        f"{ACCOUNTANT_POSTS}::test_a_correction_is_held_and_never_added_to_its_invoice",
    ),
    _one(
        "doctype-unknown-held",
        "a type code the document-type table does not list is held, never guessed (issue 58)",
        "invoice_pipeline/domain/review.py",
        "    row = document_type_of(code)\n",
        '    row = document_type_of(code) or document_type_of("380")\n',
        f"{ACCOUNTANT_READS}::test_an_unknown_type_code_is_held_not_guessed[cii]",
    ),
    _one(
        "doctype-conflict",
        "a credit-note type code on a document sent as an invoice (or the reverse) is held (issue 58)",
        "invoice_pipeline/domain/review.py",
        '    if (row.document_class == "credit_note") != (fields.document_type == "credit_note"):\n',
        "    if False:\n",
        f"{ACCOUNTANT_READS}::test_a_credit_note_code_on_an_invoice_sent_as_json_is_held",
    ),
    _one(
        "amount-due-prepaid",
        "without an amount due (BT-115) the prepaid amount is taken off the grand total (BR-CO-16), "
        "not paid again (issue 58)",
        "invoice_pipeline/documents/collect.py",
        "            amount -= prepaid.amount\n",
        "            amount -= 0\n",
        f"{ACCOUNTANT_POSTS}::test_a_prepayment_stated_without_an_amount_due_is_not_paid_again",
    ),
    _one(
        "amount-due-contradicted",
        "an amount due that grand total - prepaid + rounding contradicts is held (issue 58)",
        "invoice_pipeline/domain/review.py",
        "        if expected != due:\n",
        "        if False:\n",
        f"{ACCOUNTANT_READS}::test_an_amount_due_the_totals_contradict_is_held[ubl]",
    ),
    _one(
        "amount-precision",
        "an amount with more decimals than its currency's ISO 4217 minor units is held, never rounded "
        "(issue 58)",
        "invoice_pipeline/domain/validation.py",
        "    return isinstance(exponent, int) and -exponent > units\n",
        "    return False\n",
        f"{ACCOUNTANT_POSTS}::test_more_decimals_than_the_currency_has_are_held[JPY-2-decimals]",
    ),
    _one(
        "currency-mismatch",
        "an amount whose currencyID is not the document currency is held (issue 58)",
        "invoice_pipeline/documents/collect.py",
        "        if not code or code == currency:\n",
        "        if True:\n",
        f"{ACCOUNTANT_POSTS}::test_chf_amounts_in_a_euro_document_are_held",
    ),
    _one(
        "currency-tax-kept-apart",
        "a tax amount in the stated tax currency (BT-6) is no currency mismatch (issue 58)",
        "invoice_pipeline/documents/collect.py",
        "        if tax_currency and code == tax_currency and local_name(node) in _TAX_AMOUNTS:\n",
        "        if False:\n",
        f"{ACCOUNTANT_READS}::test_the_tax_currency_is_kept_apart_and_no_mismatch[ubl]",
    ),
    _one(
        "credit-note-one-sign",
        "a credit note's amounts are stored as the positive amount credited, whatever sign its "
        "format writes (issue 58)",
        "invoice_pipeline/documents/collect.py",
        '        if doc_type == "credit_note" and isinstance(payable, Decimal) and payable < 0:\n',
        "        if False:\n",
        f"{ACCOUNTANT_POSTS}::test_a_positive_ubl_credit_note_and_a_negative_cii_381_post_the_same_credit",
    ),
    _one(
        "payment-means-direct-debit",
        "a SEPA direct debit (59) is read as a direct debit, not a transfer (issue 58)",
        "invoice_pipeline/domain/doctypes.py",
        '        "59": ("direct_debit", "SEPA direct debit"),\n',
        '        "59": ("transfer", "SEPA direct debit"),\n',
        f"{ACCOUNTANT_READS}::test_a_direct_debit_is_read_with_its_mandate[cii]",
    ),
    _one(
        "payment-means-mandate",
        "a direct-debit mandate without a means code is still a direct debit (issue 58)",
        "invoice_pipeline/domain/doctypes.py",
        "    if fields.mandate_reference:\n",
        "    if False:\n",
        f"{ACCOUNTANT_READS}::test_a_mandate_without_a_means_code_is_still_a_direct_debit",
    ),
    # -- money decided at posting, under the lock (issue 52) ----------------------------------
    _one(
        "posting-redecides",
        "the posting decides who is paid again, in its own transaction: an invoice the registry "
        "no longer confirms is held, not posted (issue 52)",
        "invoice_pipeline/engine/store/payments.py",
        "            if not decision.posts:\n",
        "            if False:\n",
        f"{PAYMENT_TESTS}::test_one_chunk_cannot_register_a_vendor_and_pay_its_second_iban",
    ),
    _one(
        "posting-redecides-model-trail",
        "the payment model's counterexample (the decision of the approval stage alone, the race of "
        "a registry read once per chunk) replayed on the real stages is refused by the posting's "
        "decision (issue 52)",
        "invoice_pipeline/engine/store/payments.py",
        "            if not decision.posts:\n",
        "            if False:\n",
        "invoice_pipeline_tests/model/test_payment_trail.py::"
        "test_approval_only_trail_is_refused_by_the_posting_decision",
    ),
    _one(
        "identity-locks",
        "the posting takes the advisory locks of its identity keys before deciding, so a "
        "registration racing it is seen, not duplicated (issue 52)",
        "invoice_pipeline/engine/store/payments.py",
        "                *(identity_lock_id(org_id, i) for org_id, fields in keys for i in identity_keys(fields)),\n",
        "",
        f"{PAYMENT_TESTS}::test_a_registration_racing_the_posting_is_seen_by_it",
    ),
    _one(
        "approval-redecides",
        "a person's approval re-decides who is paid and is refused when the reasons changed since "
        "the person looked (issue 52)",
        "invoice_pipeline/engine/store/review.py",
        "            if new:\n",
        "            if False:\n",
        f"{PAYMENT_TESTS}::test_an_approval_whose_reasons_changed_is_refused_and_shows_the_new_ones",
    ),
    _one(
        "vouched-only",
        "a person's approval covers only the reasons they were shown: the posting holds for a reason "
        "of its moment they did not vouch for (issue 52)",
        "invoice_pipeline/domain/payment.py",
        "    held = tuple(r for r in reasons if r.voucher not in facts.vouched or not r.vouchable)\n",
        "    held = tuple(r for r in reasons if not r.vouchable or facts.approver is None)\n",
        f"{PAYMENT_TESTS}::test_an_approval_made_before_the_registry_changed_is_decided_again_at_posting",
    ),
    _one(
        "own-identity-as-seller",
        "an invoice whose seller identity is the org's own is held, never paid or registered (issue 52)",
        "invoice_pipeline/domain/payment.py",
        "    hits = [i for i in identity_keys(fields) if profile.has(i.kind, i.shown)]\n",
        "    hits: list[Identifier] = []\n",
        f"{PAYMENT_TESTS}::test_the_orgs_own_identity_as_the_seller_is_held_never_registered",
    ),
    _one(
        "possible-impersonation",
        "a seller with a registered vendor's name but none of its identifiers is held (issue 52)",
        "invoice_pipeline/domain/payment.py",
        "    if namesakes and (known or asks_an_account or len(namesakes) > 1):\n",
        "    if False:\n",
        f"{PAYMENT_TESTS}::test_a_registered_vendors_name_without_its_vat_id_is_held_as_a_possible_impersonation",
    ),
    _one(
        "vendor-identity-conflict",
        "a vendor confirmed by its account while the page prints another VAT id is held (issue 52)",
        "invoice_pipeline/domain/payment.py",
        '    if vat is not None and vendor.of_kind("vat") and not vendor.has("vat", vat.value):\n',
        "    if False:\n",
        f"{PAYMENT_TESTS}::test_a_vendor_confirmed_by_its_account_while_the_page_names_another_vat_id_is_held",
    ),
    _one(
        "iban-invalid",
        "an IBAN that fails its check digits is never paid into (issue 52)",
        "invoice_pipeline/domain/payment.py",
        "    if fields.payee_iban and not iban_valid(fields.payee_iban):\n",
        "    if False:\n",
        f"{PAYMENT_TESTS}::test_an_iban_that_fails_its_check_digits_is_never_paid_into",
    ),
    _one(
        "vat-look-alike-letter",
        "a VAT id (IBAN, tax number) with a non-ASCII look-alike letter or digit is invalid, not "
        "compacted into another id (issue 52)",
        "invoice_pipeline/domain/identity.py",
        "    if foreign:\n",
        "    if False:\n",
        "invoice_pipeline_tests/domain/test_identifier_spelling.py::"
        "test_a_look_alike_letter_or_digit_makes_a_vat_id_invalid",
    ),
    _one(
        "vat-check-digits",
        "a VAT id whose check digits fail (python-stdnum) is no identifier (issue 52)",
        "invoice_pipeline/domain/identity.py",
        "        return vatin.validate(ascii_id).upper()\n",
        "        return vatin.compact(ascii_id).upper()\n",
        "invoice_pipeline_tests/domain/test_identifier_spelling.py::test_one_digit_changed_makes_a_vat_id_invalid",
    ),
    _one(
        "name-skeleton-confusables",
        "names compare by their TR39 skeleton: a Greek or Cyrillic look-alike letter is the Latin "
        "one (issue 52)",
        "invoice_pipeline/domain/identity.py",
        '    return "".join(table.get(ch, ch) for ch in text)\n',
        "    return text\n",
        "invoice_pipeline_tests/domain/test_identifier_spelling.py::"
        "test_names_that_differ_only_in_spelling_share_a_skeleton",
    ),
    _one(
        "name-skeleton-migration",
        "names stored before the skeleton are recomputed by sql/0022's data step (issue 52)",
        "invoice_pipeline/db/migrate.py",
        '    "0022_name_skeletons.sql": reskeleton_names,\n',
        "",
        "invoice_pipeline_tests/db/test_migrate_0022.py::"
        "test_stored_names_become_skeletons_and_invalid_vat_ids_stay",
    ),
    _one(
        "org-profile-seed-proposes",
        "`org profile seed` only proposes the buyer parties of posted e-invoices; nothing is added "
        "without a person (issue 52)",
        "invoice_pipeline/engine/vendors.py",
        "    profile = store.vendors.org_profiles([org_id])[org_id]\n",
        "    for name, vat, _ in store.vendors.buyer_parties_of_posted_einvoices(org_id):\n"
        '        for raw_kind, raw in (("name", name), ("vat", vat)):\n'
        "            try:\n"
        '                store.vendors.add_org_identity(org_id, raw_kind, raw or "", source="seed", added_by="seed")\n'
        "            except ValueError:\n"
        "                pass\n"
        "    profile = store.vendors.org_profiles([org_id])[org_id]\n",
        "invoice_pipeline_tests/engine/test_org_profile.py::test_seed_proposes_the_buyer_parties_and_adds_nothing",
    ),
    _one(
        "org-profile-not-a-vendors",
        "an identifier a registered vendor of the org has is refused for the org's own profile (issue 52)",
        "invoice_pipeline/engine/store/vendors.py",
        "            if owner is not None:\n                raise ValueError(\n",
        "            if False:\n                raise ValueError(\n",
        "invoice_pipeline_tests/engine/test_org_profile.py::"
        "test_adding_a_vendors_identifier_to_the_org_profile_is_refused",
    ),
    _one(
        "dedupe-date-window",
        "one seller's reformatted number is compared at any distance in time: no 3-day window (issue 58)",
        "invoice_pipeline/domain/matching.py",
        "    if seller_sim < 100.0 and score < threshold:\n",
        "    if (seller_sim < 100.0 and score < threshold) or date_sim == 0.0:\n",
        "invoice_pipeline_tests/domain/test_matching.py::test_a_resend_as_bare_digits_nine_days_later_is_held",
    ),
    _one(
        "dedupe-exact-amount",
        "an automatic duplicate needs amounts within 0.01; another amount of the seller's number is held (issue 58)",
        "invoice_pipeline/domain/matching.py",
        "    if seller_exact and same_number and amounts_agree and same_year:\n",
        "    if seller_exact and same_number and same_year:\n",
        "invoice_pipeline_tests/domain/test_matching.py::test_same_key_different_amount_is_held_not_posted_twice",
    ),
    _one(
        "dedupe-exact-year",
        "an automatic duplicate needs the same issue year: invoice 7 of 2026 is held beside 7 of 2025 (issue 58)",
        "invoice_pipeline/domain/matching.py",
        "    if seller_exact and same_number and amounts_agree and same_year:\n",
        "    if seller_exact and same_number and amounts_agree:\n",
        "invoice_pipeline_tests/domain/test_matching.py::test_invoice_7_of_2026_is_not_invoice_7_of_2025",
    ),
    _one(
        "dedupe-credit-sign",
        "credit notes are compared on the amount as posted, whatever sign their format wrote (issue 58)",
        "invoice_pipeline/domain/matching.py",
        '    return -abs(total) if c.document_type == "credit_note" else total\n',
        "    return total\n",
        "invoice_pipeline_tests/domain/test_matching.py::test_a_credit_note_with_positive_and_negative_totals_is_one_credit",
    ),
    _one(
        "rekey-0021",
        "0021's data migration rekeys the block keys of invoices decided before the amount left them (issue 58)",
        "invoice_pipeline/db/migrate.py",
        '    "0021_block_keys_without_amount.sql": rekey_decided_invoices,',
        '    "0021_block_keys_without_amount.sql": lambda conn: None,',
        "invoice_pipeline_tests/db/test_migrate.py::test_invoices_decided_before_0021_are_rekeyed_and_a_repriced_resend_is_held",
    ),
    _one(
        "one-original-per-year",
        "the unique index of originals has the issue year: a person may release invoice 7 of 2026 beside 7 of 2025 (issue 58)",
        "sql/0021_block_keys_without_amount.sql",
        "    ON invoices (org_id, business_key, payable_total, currency, block_key,\n"
        "                 coalesce(extract(year FROM issue_date), 0))\n",
        "    ON invoices (org_id, business_key, payable_total, currency, block_key)\n",
        "invoice_pipeline_tests/engine/test_one_number_paid_once.py::test_invoice_7_of_2026_is_held_beside_invoice_7_of_2025_not_rejected",
        # Without the year the index itself refuses the second original: its natural failure.
        raises=("UniqueViolation",),
    ),
    _one(
        "unread-number-near-copy",
        "a page whose number was not read is still compared by seller, amount and date, and the "
        "original it may copy is shown to the person who types the number (issue 52)",
        "invoice_pipeline/engine/stages.py",
        "                reasons += unread_number_copies(near, found)\n",
        "                reasons += []\n",
        "invoice_pipeline_tests/documents/test_number_never_another_value.py::"
        "test_a_resent_copy_whose_number_is_not_text_is_held_not_posted",
    ),
    _one(
        "conflict-pays-account-owner",
        "identifiers of two vendors, once vouched for, pay (and record) the owner of the account to "
        "pay, never one vendor's invoice into another's account (issue 52)",
        "invoice_pipeline/domain/payment.py",
        '        paid = next((v for v in owners if iban is not None and v.has("iban", iban.value)), owners[0])\n',
        "        paid = owners[0]\n",
        f"{PAYMENT_TESTS}::test_identifiers_of_two_vendors_once_vouched_pay_the_owner_of_the_account",
    ),
    _one(
        "import-refuses-own-identity",
        "a vendor master row naming the org's own identity is refused (issue 52)",
        "invoice_pipeline/engine/store/vendors.py",
        "                if theirs:\n",
        "                if False:\n",
        f"{PAYMENT_TESTS}::test_a_vendor_master_row_with_the_orgs_own_identity_is_refused",
    ),
    # -- the accountant's stateful property (issue 58): the same mechanisms, its oracle --------
    _one(
        "proforma-no-original",
        "a pro-forma or a correction is compared for duplicates only with its own kind: an invoice "
        "that follows a pro-forma with its number is not rejected as its copy (issue 58)",
        "invoice_pipeline/domain/doctypes.py",
        '    if row is not None and row.document_class in ("not_a_claim", "correction"):\n',
        "    if False:\n",
        f"{ACCOUNTANT_KNOWN}[invoice-after-its-proforma]",
    ),
    Sabotage(
        "accountant-oracle-year",
        "the accountant's property catches an automatic duplicate across issue years (issue 58)",
        (
            Edit(
                "invoice_pipeline/domain/matching.py",
                "    if seller_exact and same_number and amounts_agree and same_year:\n",
                "    if seller_exact and same_number and amounts_agree:\n",
            ),
        ),
        f"{ACCOUNTANT_KNOWN}[same-number-next-year]",
    ),
    Sabotage(
        "accountant-oracle-prepaid",
        "the accountant's property catches a prepaid amount paid again: the posting books the "
        "amount due, never the grand total (issue 58)",
        (
            Edit(
                "invoice_pipeline/engine/store/payments.py",
                "        amount = fields.payable_total\n",
                "        amount = fields.grand_total or fields.payable_total\n",
            ),
        ),
        f"{ACCOUNTANT_KNOWN}[prepaid-invoice]",
    ),
    _one(
        "correction-difference",
        "a corrected invoice that replaces its original books only the difference, never its whole "
        "amount on top (issue 58)",
        "invoice_pipeline/domain/corrected_invoices.py",
        "    return CorrectionBooking(original.invoice_id, choice, amount_due - original.booked)\n",
        "    return CorrectionBooking(original.invoice_id, choice, amount_due)\n",
        f"{ACCOUNTANT_POSTS}::test_a_correction_that_replaces_books_only_the_difference",
    ),
    _one(
        "correction-needs-choice",
        "a corrected invoice is approved only as replacing or reversing its original (issue 58)",
        "invoice_pipeline/engine/store/payments.py",
        '        if correction is None:\n            return (\n                f"it is a corrected invoice of',
        '        if False:\n            return (\n                f"it is a corrected invoice of',
        f"{ACCOUNTANT_POSTS}::test_a_correction_is_held_and_never_added_to_its_invoice",
    ),
    _one(
        "correction-original-decided",
        "a correction is booked only against an original that is decided (issue 58)",
        "invoice_pipeline/domain/corrected_invoices.py",
        '    if original.status != "processed" or original.decision is None:\n',
        "    if False:\n",
        f"{ACCOUNTANT_POSTS}::test_a_correction_that_cannot_be_booked_stays_held",
    ),
    _one(
        "amount-due-unformed-held",
        "a structured document stating amounts but no amount due that anything forms is held for a "
        "person, not quarantined (issue 58)",
        "invoice_pipeline/domain/review.py",
        '    if not problems or any(p.code != "missing_total" for p in problems) or all(a is None for a in stated):\n',
        "    if True:\n",
        f"{ACCOUNTANT_POSTS}::test_an_amount_due_nothing_forms_is_held_for_a_person_not_quarantined",
    ),
    _one(
        "correction-original-lock",
        "what is booked for an original is read under its advisory lock at posting (issue 58)",
        "invoice_pipeline/engine/store/payments.py",
        "                [(r.org_id, r.corrects) for r in requests if r.corrects is not None],\n",
        "                [],\n",
        f"{ACCOUNTANT_POSTS}::test_a_correction_is_booked_under_its_originals_lock",
    ),
    _one(
        "layout-import-shadow",
        "an imported vendor layout stays in shadow until a person approves an invoice read with it (issue 54)",
        "invoice_pipeline/engine/store/layouts.py",
        '                    self._insert_layout(conn, layout, taught_by, None, None, "", active=False)\n',
        '                    self._insert_layout(conn, layout, taught_by, None, None, "", active=True)\n',
        "invoice_pipeline_tests/engine/test_layout_shadow.py::"
        "test_an_imported_layout_runs_in_shadow_until_a_person_approves_an_invoice_read_with_it",
    ),
    _one(
        "layout-approval-teaches",
        "a layout learnt from a person's approval reads the vendor's next page at once (issue 54)",
        "invoice_pipeline/engine/layouts.py",
        "        learnt = learn_from_decision(store, invoice_id, taught_by, approved=True)\n",
        "        learnt = learn_from_decision(store, invoice_id, taught_by)\n",
        "invoice_pipeline_tests/engine/test_vendor_layouts_store.py::"
        "test_an_approved_correction_teaches_at_once_and_later_invoices_are_read_and_posted",
    ),
    _one(
        "shared-sign-not-vat-country",
        "a page printing only a sign several currencies share ('$', 'kr') is not read in the seller's "
        "VAT country's currency (issue 54)",
        "invoice_pipeline/documents/text_fields.py",
        "    if currency is None and printed is None and not shared and vat is not None:\n",
        "    if currency is None and printed is None and vat is not None:\n",
        "invoice_pipeline_tests/engine/test_registered_vendor.py::"
        "test_a_dollar_page_is_held_until_a_person_approved_the_vendors_invoice_in_a_dollar",
    ),
    _one(
        "shared-sign-not-default-currency",
        "the org's default currency fills a '$' or 'kr' page only when the sign can mean it (issue 54)",
        "invoice_pipeline/engine/stages.py",
        "            and policy.default_currency not in frozenset().union(*shared.values())\n",
        "            and False\n",
        "invoice_pipeline_tests/engine/test_registered_vendor.py::"
        "test_a_dollar_page_is_held_until_a_person_approved_the_vendors_invoice_in_a_dollar",
    ),
    _one(
        "registry-contradiction-no-layout",
        "a page whose seller VAT id contradicts the vendor its account confirms is read by no layout "
        "of that vendor (issue 54)",
        "invoice_pipeline/engine/stages.py",
        "        if vendor is not None and contradiction(fields, vendor) is not None:\n",
        "        if False:\n",
        "invoice_pipeline_tests/engine/test_registered_vendor.py::"
        "test_a_page_naming_another_sellers_vat_id_beside_the_vendors_account_is_held_and_filled_with_nothing",
    ),
    _one(
        "registry-contradiction-not-filled",
        "the registry never fills its vendor's name and VAT id over a page naming another seller's VAT "
        "id (issue 54)",
        "invoice_pipeline/domain/registered_vendor.py",
        "    if vendor is None or not fields.read_from_page or contradiction(fields, vendor) is not None:\n",
        "    if vendor is None or not fields.read_from_page:\n",
        "invoice_pipeline_tests/domain/test_registered_vendor.py::"
        "test_a_page_naming_another_sellers_vat_id_is_a_contradiction_and_nothing_is_filled",
    ),
    _one(
        "einvoice-validator-off",
        "every structured e-invoice is checked against the EN 16931 rules it declares (issue 55)",
        "invoice_pipeline/orchestration/resources/document_reader.py",
        "        if not self.validate_einvoices or extracted.format not in STRUCTURED_FORMATS:\n",
        "        if True:\n",
        "invoice_pipeline_tests/engine/test_einvoice_holds.py::test_an_e_invoice_that_breaks_a_rule_is_held_naming_it",
    ),
    _one(
        "einvoice-fatal-not-held",
        "a fatal rule an e-invoice breaks holds it einvoice_invalid, naming the rule (issue 55)",
        "invoice_pipeline/domain/review.py",
        "    if check is not None and check.fatal:\n",
        "    if False:\n",
        "invoice_pipeline_tests/engine/test_einvoice_holds.py::test_an_e_invoice_that_breaks_a_rule_is_held_naming_it",
    ),
    _one(
        "einvoice-plain-cii-fx-rules",
        "Factur-X's own rules (FX-SCH-*) are not applied to a plain CII file (issue 55)",
        "invoice_pipeline/documents/einvoice_rules.py",
        '"facturx-en16931/FACTUR-X_EN16931.xslt",\n    FX_OWN_RULES,\n)',
        '"facturx-en16931/FACTUR-X_EN16931.xslt",\n    "",\n)',
        "invoice_pipeline_tests/documents/test_einvoice_rules.py::test_a_document_changed_to_break_a_rule_fails_that_rule",
    ),
    _one(
        "page-comparison-off",
        "a Factur-X PDF's page is held against its own XML (issue 55)",
        "invoice_pipeline/documents/__init__.py",
        '    if compare_page and extracted.format == "facturx-pdf":\n',
        "    if False:\n",
        "invoice_pipeline_tests/engine/test_einvoice_holds.py::test_a_factur_x_page_that_disagrees_with_its_xml_is_held",
    ),
    _one(
        "page-unprinted-iban-disagrees",
        "an IBAN the page does not print is no disagreement with the XML's (issue 55)",
        "invoice_pipeline/documents/page_witness.py",
        "    if not printed or compact(xml_iban).upper() in printed:\n",
        "    if compact(xml_iban).upper() in printed:\n",
        "invoice_pipeline_tests/documents/test_einvoice_rules.py::test_a_field_the_page_does_not_print_is_no_disagreement",
    ),
    _one(
        "mail-checkpoint-in-ingest",
        "a message's checkpoint commits in the transaction that stores its attachments as invoices "
        "(issue 56): a mail fetch killed between them neither loses the message nor takes it half",
        *MAIL_CHECKPOINT_APART,
        "invoice_pipeline_tests/engine/mail/test_mail_kill.py::"
        "test_a_kill_inside_a_messages_transaction_leaves_it_untaken_and_the_next_fetch_takes_it",
    ),
    _one(
        "mail-checkpoint-property",
        "the property of the same mechanism (issue 56): a pass whose connection is cut anywhere "
        "leaves each message taken whole or not taken",
        *MAIL_CHECKPOINT_APART,
        "invoice_pipeline_tests/engine/mail/test_mail_property.py::"
        "test_a_pass_cut_anywhere_leaves_each_message_whole_or_untaken",
    ),
    _one(
        "einvoice-currency-quarantined",
        "a structured e-invoice in a currency ISO 4217 lacks is held einvoice_invalid naming BR-CL-04, "
        "not quarantined (issue 55)",
        "invoice_pipeline/domain/review.py",
        '    if check is None or not problems or any(p.code != "unknown_currency" for p in problems):\n',
        "    if True:\n",
        "invoice_pipeline_tests/engine/test_einvoice_holds.py::"
        "test_an_e_invoice_whose_currency_iso_4217_lacks_is_held_naming_br_cl_04",
    ),
    _one(
        "german-lineless-profile-posted",
        "a German seller's Factur-X MINIMUM / BASIC WL whose page could not be read (a bare XML, no text "
        "layer) is held not_an_einvoice for an org under German e-invoicing rules (issue 55)",
        "invoice_pipeline/domain/review.py",
        "    if fields.read_from_page or not page_is_the_invoice(fields, policy):\n",
        "    if True:\n",
        "invoice_pipeline_tests/engine/test_einvoice_holds.py::"
        "test_a_lineless_profile_is_no_e_invoice_for_an_org_under_german_rules",
    ),
    _one(
        "german-lineless-xml-taken-instead",
        "a German seller's Factur-X MINIMUM / BASIC WL is read from its page for an org under German "
        "e-invoicing rules: the page's values are the fields, the XML only evidence (issue 55)",
        "invoice_pipeline/engine/page_invoice.py",
        "    return page, replace(\n        page_fields,\n",
        "    return page, replace(\n        fields,\n",
        f"{LINELESS_TESTS}::test_a_german_lineless_factur_x_is_read_from_its_page_and_posts_when_page_and_xml_agree",
    ),
    _one(
        "german-lineless-evidence-ignored",
        "the XML of a page-read lineless Factur-X is evidence: a key field it states differently from "
        "the page holds the invoice page_disagrees_with_xml (issue 55)",
        "invoice_pipeline/engine/page_invoice.py",
        "        page_disagreements=compare_evidence(page_fields, fields, page.text),\n",
        "        page_disagreements=(),\n",
        f"{LINELESS_TESTS}::test_a_page_its_xml_contradicts_is_held_naming_the_field",
    ),
    _one(
        "german-lineless-evidence-excused-when-printed",
        "a page that is the invoice is held for every key field its reader read otherwise than the XML, "
        "even when the XML's value is printed elsewhere on it (issue 55)",
        "invoice_pipeline/documents/page_witness.py",
        "            continue\n        source = page_fields.sources.get(comparison.field)\n",
        "            continue\n        if comparison.printed(xml_value, PrintedPage.of(page_text)):\n"
        "            continue\n        source = page_fields.sources.get(comparison.field)\n",
        "invoice_pipeline_tests/documents/test_page_evidence.py::"
        "test_every_key_field_the_page_reads_otherwise_is_named",
    ),
    _one(
        "outbox-in-the-posting-transaction",
        "the statement that posts an invoice writes its export rows, one per target of the org (issue 56)",
        "sql/queries/documents.sql",
        "FROM posted p JOIN export_targets t ON t.org_id = p.org_id AND t.enabled\n",
        "FROM posted p JOIN export_targets t ON false\n",
        f"{EXPORT_TESTS}/test_outbox.py::test_the_posting_transaction_writes_one_export_row_per_target_of_the_org",
    ),
    _one(
        "exports-only-with-their-posting",
        "no transaction but the posting's own can write an export row (issue 56)",
        "sql/0025_exports.sql",
        "WHERE p.id = NEW.posting_id AND p.xmin = pg_current_xact_id()::xid\n",
        "WHERE p.id = NEW.posting_id\n",
        f"{EXPORT_TESTS}/test_outbox.py::test_no_other_transaction_can_write_an_export_row",
    ),
    _one(
        "delivery-fence",
        "fence_export_jobs returns only running export jobs: a swept deliverer marks nothing (issue 56)",
        "sql/0025_exports.sql",
        "        WHERE r.id = ANY(p_job_ids) AND r.status = 'running'\n        ORDER BY r.id FOR UPDATE OF r;\n",
        "        WHERE r.id = ANY(p_job_ids)\n        ORDER BY r.id FOR UPDATE OF r;\n",
        f"{EXPORT_TESTS}/test_delivery.py::test_a_swept_deliverer_cannot_mark_rows_delivered",
    ),
    _one(
        "delivery-fence-property",
        "the delivery property: a zombie's late answer never unmarks a delivered row (issue 56)",
        "sql/0025_exports.sql",
        "        WHERE r.id = ANY(p_job_ids) AND r.status = 'running'\n        ORDER BY r.id FOR UPDATE OF r;\n",
        "        WHERE r.id = ANY(p_job_ids)\n        ORDER BY r.id FOR UPDATE OF r;\n",
        f"{EXPORT_TESTS}/test_delivery_property.py::test_whatever_happens_each_posting_is_booked_once_and_delivered_in_the_end",
        # A zombie's late failure un-marking a delivered row also breaks the exports CHECK
        # (delivered exactly when delivered_at is set): the database refusing it is the failure too.
        ("CheckViolation",),
    ),
    _one(
        "idempotency-key-stable",
        "a webhook's Idempotency-Key is one per posting and target, the same on every redelivery (issue 56)",
        "invoice_pipeline/engine/exports/webhook.py",
        "    return str(item.export_id)\n",
        "    return f\"{item.export_id}:{__import__('uuid').uuid4()}\"\n",
        f"{EXPORT_TESTS}/test_delivery.py::test_the_idempotency_key_is_the_same_on_every_redelivery",
    ),
    _one(
        "sweep-frees-export-leases",
        "the one sweep (`sweep`, the sweep_stale_locks schedule) frees stale export leases too (issue 56)",
        "invoice_pipeline/engine/maintenance.py",
        "    export_swept = db.store.exports.release_stale()\n",
        "    export_swept = 0\n",
        "invoice_pipeline_tests/orchestration/test_export_sweep.py::"
        "test_the_sweep_schedule_frees_a_stale_export_lease_and_fails_its_dead_delivery_run",
    ),
    _one(
        "dead-delivery-run-reconciled",
        "a delivery run whose export lease was swept is marked failed, so the sensor launches the next (issue 56)",
        "invoice_pipeline/orchestration/maintenance.py",
        "    if run.job_name == DELIVER_EXPORTS:\n        return [",
        "    if run.job_name == 'no such job':\n        return [",
        "invoice_pipeline_tests/orchestration/test_export_sweep.py::"
        "test_the_sweep_schedule_frees_a_stale_export_lease_and_fails_its_dead_delivery_run",
    ),
    _one(
        "live-delivery-run-between-batches",
        "a delivery run's silence counts from its last lease's finish: one between batches is not failed (issue 56)",
        "invoice_pipeline/orchestration/maintenance.py",
        "            idle = min([_seconds_since_last_event(instance, run.run_id), *since_lease])\n",
        "            idle = _seconds_since_last_event(instance, run.run_id)\n",
        "invoice_pipeline_tests/orchestration/test_export_sweep.py::"
        "test_a_silent_delivery_run_is_dead_only_when_it_finished_no_lease_within_the_ttl",
    ),
    _one(
        "system-user-lock",
        "processes starting their first embedded server at once create its system user one at a time",
        "invoice_pipeline/db/embedded.py",
        "        fcntl.flock(fd, fcntl.LOCK_EX)\n",
        "",
        "invoice_pipeline_tests/db/test_system_user.py::"
        "test_processes_making_the_user_at_once_all_get_the_one_it_ends_as",
    ),
    # The suite's own guards: a test that breaks one passes where it should not, silently.
    _one(
        "ci-skip-fails",
        "under CI, a skipped test that needs a tool fails, naming the tool (issue 53)",
        "invoice_pipeline_tests/tools.py",
        '    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):\n',
        "    if True:\n",
        "invoice_pipeline_tests/test_needs_tool.py::test_under_ci_a_missing_tool_fails_the_test_and_names_the_tool",
    ),
    _one(
        "dagster-guard-fails",
        "a test that leaves a Dagster instance entered fails at its teardown",
        "invoice_pipeline_tests/dagster_guard.py",
        "        pytest.fail(",
        "        print(",
        DAGSTER_GUARD_TEST,
    ),
    _one(
        "dagster-guard-resets",
        "after a test that left a Dagster instance entered, the next finds none entered",
        "invoice_pipeline_tests/dagster_guard.py",
        "        _current_storage.set(None)\n",
        "",
        DAGSTER_GUARD_TEST,
    ),
)


@dataclass(frozen=True)
class Outcome:
    name: str
    test: str
    verdict: str  # killed | SURVIVED | BROKEN
    detail: str
    seconds: float
    # The first line of the failure that killed the sabotage ("AssertionError: assert ..."); empty
    # for anything but `killed`.
    assertion: str = ""


# A test's own failure: an assert, or pytest's Failed (pytest.fail, or pytest.raises seeing
# nothing raised). Anything else fails in the test's way, not in the mechanism's.
ASSERTIONS = ("AssertionError", "Failed")
# pytest-timeout ends a test with pytest.fail and this text: a hang, never a kill.
PYTEST_TIMEOUT = "Timeout (>"
# An exception group's members, as pytest prints them ("  | ValueError: ...", maybe after "E").
_GROUP_MEMBER = re.compile(r"^\s*\|\s*(?:E\s+)?([A-Za-z_][\w.]*)(?::|$)", re.M)


@dataclass(frozen=True)
class RunVerdict:
    """What one pytest run of a sabotage's named test says about the sabotage."""

    verdict: str  # killed | SURVIVED | BROKEN
    assertion: str  # the killing failure's first line ("" unless killed)
    detail: str


def exception_name(message: str) -> str:
    """The class name a pytest crash message starts with: "psycopg.errors.LockNotAvailable: ..."
    gives "LockNotAvailable", "AssertionError: the total" and "assert 2 == 3" give "AssertionError"."""
    first = message.split("\n", 1)[0]
    if first.startswith("assert "):
        # A plain `assert` pytest rewrote: it drops the "AssertionError: " prefix.
        return "AssertionError"
    return first.split(":", 1)[0].strip().rsplit(".", 1)[-1]


def _failure_kills(message: str, text: str, allowed: Sequence[str]) -> str | None:
    """Why a test's failure does not kill its sabotage (None: it does)."""
    name = exception_name(message)
    first = message.split("\n", 1)[0]
    if name == "Failed" and first.removeprefix("Failed: ").startswith(PYTEST_TIMEOUT):
        return f"timed out (pytest-timeout): {first}"
    if name in allowed:
        return None
    if name.endswith("ExceptionGroup"):
        # Hypothesis reports several distinct failures as one group: each must be allowed.
        members = {m.rsplit(".", 1)[-1] for m in _GROUP_MEMBER.findall(text)} - {name}
        strange = sorted(m for m in members if m not in allowed)
        if members and not strange:
            return None
        return f"an exception group with {', '.join(strange) or 'no readable member'}: {first}"
    return f"failed with {name}, not an assertion: {first}"


def judge_report(report: Path, raises: Sequence[str] = ()) -> RunVerdict:
    """The verdict of a finished pytest run, from its JUnit XML `report`.

    An `<error>` (collection, a fixture's setup or teardown) is BROKEN, wherever it is; a
    `<failure>` of the test's call kills the sabotage when it is an assertion or one of `raises`;
    a run where every test was skipped, or none ran, is BROKEN; otherwise the test passed."""
    allowed = (*ASSERTIONS, *raises)
    cases = ET.parse(report).getroot().iter("testcase")
    killed: list[str] = []
    broken: list[str] = []
    passed = 0
    skipped: list[str] = []
    for case in cases:
        name = case.get("name", "?")
        errors = case.findall("error")
        failures = case.findall("failure")
        for error in errors:
            broken.append(f"{name}: error ({error.get('message', '')})")
        for failure in failures:
            message = failure.get("message", "")
            why_not = _failure_kills(message, failure.text or "", allowed)
            if why_not is None:
                killed.append(message.split("\n", 1)[0])
            else:
                broken.append(f"{name}: {why_not}")
        found_skips = case.findall("skipped")
        if found_skips:
            skipped.append(f"{name}: skipped ({found_skips[0].get('message', '')})")
        elif not errors and not failures:
            passed += 1
    if broken:
        return RunVerdict("BROKEN", "", "; ".join(broken))
    if killed:
        return RunVerdict("killed", killed[0], "; ".join(killed))
    if passed:
        return RunVerdict("SURVIVED", "", f"{passed} passed" + (f"; {'; '.join(skipped)}" if skipped else ""))
    return RunVerdict("BROKEN", "", "; ".join(skipped) or "no test ran")


def run_test(
    python: str,
    test: str,
    cwd: Path,
    env: Mapping[str, str],
    timeout: float,
    raises: Sequence[str] = (),
) -> RunVerdict:
    """Run the pytest node `test` under `cwd` with `python`, and judge it (`judge_report`).

    A run the runner has to stop after `timeout` seconds is BROKEN; so is one that wrote no
    report (pytest could not start, or died)."""
    report = cwd / ".mutant-report.xml"
    report.unlink(missing_ok=True)
    cmd = [python, "-m", "pytest", test, "-x", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return RunVerdict("BROKEN", "", f"timed out after {timeout:g}s (the runner stopped it)")
    tail = "\n".join(proc.stdout.strip().splitlines()[-3:])
    if not report.exists():
        return RunVerdict("BROKEN", "", f"pytest exit {proc.returncode}, no report: {tail}")
    verdict = judge_report(report, raises)
    if verdict.verdict == "SURVIVED" and proc.returncode != 0:
        return RunVerdict("BROKEN", "", f"pytest exit {proc.returncode} with nothing failed: {tail}")
    return verdict


def todays(sabotages: Sequence[Sabotage], day: date) -> list[Sabotage]:
    """The rotating subset for `day`: entry i runs on weekday i mod 7 (Monday 0), so the whole
    list runs once a week."""
    return [s for i, s in enumerate(sabotages) if i % DAYS_PER_ROTATION == day.weekday()]


# pyflakes' checks (through ruff) of what a replacement may name: an undefined name (F821), one in
# __all__ (F822), a local read before it is bound (F823), a definition that shadows an unused one
# (F811). A sabotage that brings one in breaks its test at import or in a way unrelated to the
# mechanism: what looks like a kill is a broken entry.
NAME_CHECKS = ("F821", "F822", "F823", "F811")


@functools.cache
def name_findings(path: str, text: str) -> Counter[str]:
    """The NAME_CHECKS findings in `text` (the source of `path`), as their messages ("Undefined
    name `_Page`") counted: without line numbers, which a replacement shifts."""
    proc = subprocess.run(
        [find_ruff_bin(), "check", "--isolated", "--no-cache", "--target-version", "py311"]
        + ["--select", ",".join(NAME_CHECKS), "--output-format", "json", "--stdin-filename", path, "-"],
        input=text,
        capture_output=True,
        text=True,
    )
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"ruff failed on {path}: {proc.stderr.strip()}")
    return Counter(f"{f['code']} {f['message']}" for f in json.loads(proc.stdout))


def sabotaged_problems(path: str, original: str, sabotaged: str) -> list[str]:
    """Why the sabotaged text of `path` is broken in itself, whatever its test says: Python that
    does not compile, or that names what its original does not define. A `.sql` or `.yaml`
    sabotage gets no such check: nothing as cheap parses PL/pgSQL and resolves its names without
    a database; a broken one shows as an error when its entry runs (`make mutants`)."""
    if not path.endswith(".py"):
        return []
    try:
        compile(sabotaged, path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return [f"{path}: the sabotaged text does not compile: {exc.msg} (line {exc.lineno})"]
    new = name_findings(path, sabotaged) - name_findings(path, original)
    return [f"{path}: the sabotaged text brings in {finding}" for finding in sorted(new)]


def named_test(sabotage: Sabotage) -> tuple[str, str]:
    """The file and the function of the test `sabotage` names (its node id without parameters)."""
    test_file, _, test_name = sabotage.test.partition("::")
    return test_file, test_name.split("[", 1)[0].rsplit("::", 1)[-1]


def check_applies(root: Path, sabotage: Sabotage) -> list[str]:
    """Why `sabotage` no longer applies to the code under `root` (empty: it applies): an edit's
    text is not in its file as often as the edit says, the sabotaged Python does not compile or
    names something undefined (`sabotaged_problems`), or the named test does not exist."""
    problems = []
    texts: dict[str, tuple[str, str]] = {}  # path: (original, sabotaged so far)
    for edit in sabotage.edits:
        if edit.path not in texts:
            path = root / edit.path
            text = path.read_text() if path.exists() else ""
            texts[edit.path] = (text, text)
        original, current = texts[edit.path]
        # Counted in the text the edits before it left, as `apply` replaces them one by one.
        found = current.count(edit.old)
        if found != edit.count:
            problems.append(
                f"{edit.path}: the text occurs {found} times, expected {edit.count}: {edit.old[:80]!r}"
            )
        texts[edit.path] = (original, current.replace(edit.old, edit.new))
    if not problems:
        for rel, (original, sabotaged) in texts.items():
            problems.extend(sabotaged_problems(rel, original, sabotaged))
    test_file, function = named_test(sabotage)
    test_path = root / test_file
    if not test_path.exists() or f"def {function}(" not in test_path.read_text():
        problems.append(f"no test {sabotage.test}")
    return problems


def _callee(node: ast.expr) -> str:
    """The name a decorator or a call goes by: `given` for @given(...), @hypothesis.given(...)."""
    target = node.func if isinstance(node, ast.Call) else node
    return (
        target.id
        if isinstance(target, ast.Name)
        else target.attr
        if isinstance(target, ast.Attribute)
        else ""
    )


@functools.cache
def _syntax_tree(source: str) -> ast.Module:
    """A test file's tree, parsed once for all the entries that name its tests."""
    return ast.parse(source)


def unexampled_draws(root: Path, sabotage: Sabotage) -> list[str]:
    """Why the test `sabotage` names may kill it only by the luck of a draw (empty: it cannot):
    a Hypothesis @given in it (on it, or on a function it defines and runs) without an @example,
    or a state machine it runs (they take no examples: the entry names a test that runs the
    killing sequence by hand). Under the derandomized profile, which examples run depends on the
    test's source, so an edit to the test can lose the one that killed the sabotage; an explicit
    example always runs (HYPOTHESIS_PROFILE=explicit runs only those). An entry whose sabotage
    breaks every example (`any_draw_kills`) needs none. Read from the test's source (ast), so a
    property the test reaches through a helper elsewhere goes unseen."""
    if sabotage.any_draw_kills:
        return []
    test_file, function = named_test(sabotage)
    tree = _syntax_tree((root / test_file).read_text())
    problems = []
    for test in ast.walk(tree):
        if not isinstance(test, ast.FunctionDef | ast.AsyncFunctionDef) or test.name != function:
            continue
        for node in ast.walk(test):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                decorators = {_callee(d) for d in node.decorator_list}
                if "given" in decorators and "example" not in decorators:
                    problems.append(f"{node.name} draws with @given and has no @example")
            elif isinstance(node, ast.Call) and _callee(node) == "run_state_machine_as_test":
                problems.append(f"{function} runs a state machine, which takes no explicit example")
    return problems


def _tracked_copy(root: Path, dest: Path) -> None:
    """The checkout's files as git sees them (tracked plus new, not ignored) under `dest`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = root / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def apply(root: Path, sabotage: Sabotage) -> None:
    for edit in sabotage.edits:
        path = root / edit.path
        path.write_text(path.read_text().replace(edit.old, edit.new))


def _overlay_venv(copy: Path, python: str) -> Path:
    """A virtualenv under `copy` whose Python imports the copy's packages first and the project
    venv's installed dependencies after, without that venv's editable install (a .pth naming the
    checkout): so even a test's child process started with a cleaned PYTHONPATH, or through a
    console script, runs the sabotaged copy. Console scripts are rewritten to its interpreter."""
    venv = copy / ".mutant-venv"
    subprocess.run([python, "-m", "venv", "--without-pip", str(venv)], check=True)
    new_python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    deps = subprocess.run([python, "-c", purelib], check=True, capture_output=True, text=True).stdout.strip()
    own = subprocess.run(
        [new_python, "-c", purelib], check=True, capture_output=True, text=True
    ).stdout.strip()
    Path(own, "00-mutant-copy.pth").write_text(f"{copy}\n{deps}\n")
    for script in Path(python).parent.iterdir():
        target = venv / "bin" / script.name
        if target.exists() or not script.is_file():
            continue
        try:
            text = script.read_text()
        except UnicodeDecodeError:
            continue
        first, _, rest = text.partition("\n")
        if first.startswith("#!") and "python" in first:
            target.write_text(f"#!{new_python}\n{rest}")
            target.chmod(0o755)
    return new_python


def run_one(sabotage: Sabotage, python: str, root: Path = ROOT) -> Outcome:
    started = time.monotonic()
    problems = check_applies(root, sabotage)
    if problems:
        return Outcome(sabotage.name, sabotage.test, "BROKEN", "; ".join(problems), 0.0)
    with tempfile.TemporaryDirectory(prefix=f"mutant-{sabotage.name}-") as tmp:
        copy = Path(tmp)
        _tracked_copy(root, copy)
        apply(copy, sabotage)
        mutant_python = _overlay_venv(copy, python)
        # Without CI: a test that cannot run here skips (BROKEN), rather than failing for the
        # missing tool as CI makes it, which would read as a kill.
        env = {k: v for k, v in os.environ.items() if k != "CI"} | {
            "PYTHONPATH": str(copy),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PATH": f"{mutant_python.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        verdict = run_test(str(mutant_python), sabotage.test, copy, env, TEST_TIMEOUT_S, sabotage.raises)
    return Outcome(
        sabotage.name,
        sabotage.test,
        verdict.verdict,
        verdict.detail,
        time.monotonic() - started,
        verdict.assertion,
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline_support.mutants", description=__doc__.splitlines()[0]
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every sabotage")
    which.add_argument("--today", action="store_true", help="today's rotating subset (CI)")
    which.add_argument("--only", nargs="+", metavar="NAME", choices=[s.name for s in SABOTAGES])
    which.add_argument("--list", action="store_true", help="list the sabotages and exit")
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the tests")
    return parser.parse_args(argv)


def verdict_counts(outcomes: Sequence[Outcome]) -> dict[str, int]:
    return {v: sum(o.verdict == v for o in outcomes) for v in ("killed", "SURVIVED", "BROKEN")}


def write_result(out: Path, selection: str, outcomes: Sequence[Outcome], planned: int) -> None:
    counts = verdict_counts(outcomes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "selection": selection,
                "complete": len(outcomes) == planned,
                "planned": planned,
                "killed": counts["killed"],
                "survived": counts["SURVIVED"],
                "broken": counts["BROKEN"],
                "total": len(outcomes),
                "outcomes": [asdict(o) for o in outcomes],
            },
            indent=2,
        )
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for i, s in enumerate(SABOTAGES):
            print(f"{i:2d} {s.name:24s} {s.mechanism}\n   {s.test}")
        return 0
    if args.all:
        chosen = list(SABOTAGES)
    elif args.today:
        chosen = todays(SABOTAGES, date.today())
    else:
        chosen = [s for s in SABOTAGES if s.name in args.only]
    selection = "all" if args.all else "today" if args.today else "only"
    outcomes: list[Outcome] = []
    for sabotage in chosen:
        outcome = run_one(sabotage, args.python)
        outcomes.append(outcome)
        print(
            f"{outcome.verdict:9s} {sabotage.name:24s} {outcome.seconds:6.1f}s  {sabotage.test}", flush=True
        )
        print("    " + outcome.detail.replace("\n", "\n    "), flush=True)
        if args.out:
            # After every entry: a run stopped half-way (the whole list takes an hour or more on
            # a loaded machine) still leaves what it found, marked incomplete.
            write_result(args.out, selection, outcomes, len(chosen))
    counts = verdict_counts(outcomes)
    print(
        f"{counts['killed']} of {len(outcomes)} sabotages killed by their test "
        f"({counts['SURVIVED']} survived, {counts['BROKEN']} broken)"
    )
    bad = len(outcomes) - counts["killed"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
