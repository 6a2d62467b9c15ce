"""`invoice-pipeline review ...` and `requeue`: the review queue and the redrive, one action at
a time or in bulk by filter (engine/review.py does the work, for this and the review page)."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace

from invoice_pipeline.cli.arguments import (
    age_arg,
    amount_or_none,
    checked_org,
    currency_or_none,
    days_or_none,
    einvoice_country_or_none,
    invoice_id_arg,
    positive_int,
    reason_code_arg,
    yes_or_no,
)
from invoice_pipeline.cli.exit_codes import EXIT_INVOICES_FAILED, EXIT_OK
from invoice_pipeline.cli.layouts import add_layout_commands
from invoice_pipeline.cli.output import in_days
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import ConfigError, Settings
from invoice_pipeline.engine.review import (
    REQUEUE_STATUSES,
    REVIEW_STATUSES,
    Actor,
    TargetFilter,
    act_on,
    statuses_for,
)
from invoice_pipeline.engine.review_records import Action, ActionOutcome
from invoice_pipeline.engine.store import dumps, open_store
from invoice_pipeline.terminal import printable

# The CLI's action names, and the actions they are.
REVIEW_COMMANDS: dict[str, Action] = {
    "approve": "approve",
    "reject": "reject",
    "not-duplicate": "not_duplicate",
    "confirm-duplicate": "confirm_duplicate",
}


# The review policy's settings `review policy` sets, each with its argument type and help. An
# option left out is absent from the arguments (argparse.SUPPRESS): the setting keeps its value.
POLICY_SETTINGS: dict[str, tuple[Callable[[str], object], str]] = {
    "auto_approve_limit": (amount_or_none, "hold invoices above this amount (none: no limit)"),
    "home_currency": (currency_or_none, "hold invoices in any other currency (none: any)"),
    "stale_after_days": (days_or_none, "hold invoices issued longer ago (none: never)"),
    "default_currency": (
        currency_or_none,
        "the currency of documents that name none (none: hold them as currency_unknown)",
    ),
    "register_einvoice_vendors": (
        yes_or_no,
        "yes (default): a vendor's first structured e-invoice registers the vendor; no: hold it",
    ),
    "einvoice_country": (
        einvoice_country_or_none,
        "DE: receive under the German e-invoicing rules (a German seller's Factur-X MINIMUM or BASIC WL "
        "is read from its page, its XML as evidence; one whose page cannot be read is held as "
        "not_an_einvoice); none (default): EN 16931 only",
    ),
}


def target_filter(args: argparse.Namespace, action: Action) -> TargetFilter:
    """Ids and filters from the arguments; refused (exit 2) when they select nothing on purpose."""
    flt = TargetFilter(
        invoice_ids=tuple(uuid.UUID(i) for i in args.invoice_ids),
        org_id=args.org,
        status=getattr(args, "status", None),
        reason=args.reason_code,
        older_than=args.older_than,
    )
    if flt.status is not None:
        statuses_for(action, flt.status)  # ValueError: exit 2 before any SQL
    if not flt.invoice_ids and not flt.has_filter and not args.all:
        raise ConfigError(
            "give invoice ids, or a filter (--org, --reason, --older-than"
            + (", --status" if action == "requeue" else "")
            + "), or --all"
        )
    return flt


def print_outcomes(outcomes: Sequence[ActionOutcome]) -> int:
    for o in outcomes:
        mark = "done   " if o.done else "refused"
        move = f"{o.from_status} -> {o.to_status}" if o.done else (o.from_status or "")
        print(f"{mark} {o.invoice_id}  {move:<28} {printable(o.message)}")
    done = sum(1 for o in outcomes if o.done)
    refused = len(outcomes) - done
    print(f"{done} done, {refused} refused" if outcomes else "no invoice matches")
    return EXIT_INVOICES_FAILED if refused else EXIT_OK


def cmd_review_action(args: argparse.Namespace, settings: Settings) -> int:
    action: Action = "requeue" if args.command == "requeue" else REVIEW_COMMANDS[args.action]
    flt = target_filter(args, action)
    note = args.reason if action == "reject" else args.note
    store = open_store(settings, COMMAND_POOL)
    try:
        outcomes = act_on(
            store, action, flt, Actor.os_user(), note, correction=getattr(args, "correction", None)
        )
    finally:
        store.close()
    code = print_outcomes(outcomes)
    if any(o.done and o.to_status == "pending" for o in outcomes):
        print("due now: the sensor under `invoice-pipeline dev` runs them, or run `invoice-pipeline process`")
    return code


def cmd_review_correct(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.domain.corrections import parse_changes
    from invoice_pipeline.engine.corrections import correct_invoice

    parse_changes(args.assignments)  # a CorrectionError (ValueError) exits 2 before any SQL
    store = open_store(settings, COMMAND_POOL)
    try:
        outcome = correct_invoice(store, args.invoice_id, args.assignments, Actor.os_user(), args.note)
    finally:
        store.close()
    code = print_outcomes([outcome])
    if outcome.done:
        print("still held: approve it (`invoice-pipeline review approve ID`) to post the corrected invoice")
    return code


def cmd_review_list(args: argparse.Namespace, settings: Settings) -> int:
    statuses = (args.status,) if args.status else REVIEW_STATUSES
    store = open_store(settings, COMMAND_POOL)
    try:
        # One more than a page: whether another page follows.
        targets = store.review.review_targets(
            statuses,
            org_id=args.org,
            reason=args.reason_code,
            older_than=args.older_than,
            limit=args.offset + args.limit + 1,
        )[args.offset :]
    finally:
        store.close()
    more = len(targets) > args.limit
    targets = targets[: args.limit]
    if args.json:
        print(dumps([asdict(t) for t in targets]))
        return EXIT_OK
    for t in targets:
        amount = f"{t.payable_total} {printable(t.currency)}" if t.payable_total is not None else "-"
        print(
            f"{t.invoice_id}  {printable(t.org_id):<14} {t.status:<15} waiting {in_days(t.age):>6}  "
            f"{printable(t.seller_name):<28} {printable(t.invoice_number):<14} {amount}"
        )
        for reason in t.review_reasons or [f"{t.quarantine_code or 'error'}: {t.last_error or ''}"]:
            print(f"    - {printable(reason)}")
    shown = f"{args.offset + 1}-{args.offset + len(targets)}" if targets else "none"
    print(f"{len(targets)} invoice(s) shown ({shown}, the longest waiting first)")
    if more:
        print(
            f"more follow: --offset {args.offset + args.limit}; or open the review page (`invoice-pipeline review-ui`)"
        )
    return EXIT_OK


def cmd_review_policy(args: argparse.Namespace, settings: Settings) -> int:
    checked_org(args.org)
    changes = {k: getattr(args, k) for k in POLICY_SETTINGS if k in args}
    store = open_store(settings, COMMAND_POOL)
    try:
        policy = store.review.review_policies([args.org])[args.org]
        if changes:
            policy = replace(policy, **changes)
            store.review.set_review_policy(args.org, policy, Actor.os_user().name)
    finally:
        store.close()
    print(
        f"org {printable(args.org)}: auto-approve limit {policy.auto_approve_limit or 'none'}, "
        f"home currency {policy.home_currency or 'any'}, stale after {policy.stale_after_days or 'never'}"
        + (" days" if policy.stale_after_days else "")
        + f", default currency {policy.default_currency or 'none (held as currency_unknown)'}"
        + ", a vendor's first e-invoice "
        + ("registers it" if policy.register_einvoice_vendors else "is held as vendor_unconfirmed")
        + f", e-invoicing rules {policy.einvoice_country or 'EN 16931 only'}"
    )
    return EXIT_OK


def add_target_arguments(parser: argparse.ArgumentParser, *, with_status: bool, reason_filter: bool) -> None:
    """Ids and the bulk filters. `--reason` filters by reason code, except on reject, where it
    is the rejection's reason and the filter is only `--reason-code`."""
    parser.add_argument("invoice_ids", nargs="*", type=invoice_id_arg, metavar="INVOICE_ID")
    parser.add_argument("--org", help="only this org's invoices")
    if with_status:
        parser.add_argument("--status", choices=REQUEUE_STATUSES, help="only invoices in this status")
    parser.add_argument(
        *(("--reason", "--reason-code") if reason_filter else ("--reason-code",)),
        dest="reason_code",
        type=reason_code_arg,
        help="only invoices held for this reason code (or quarantined with this code)",
    )
    parser.add_argument("--older-than", type=age_arg, help="only invoices waiting longer: 7d, 12h, 30m")
    parser.add_argument("--all", action="store_true", help="every invoice the action applies to")


def add_review_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    review = sub.add_parser("review", help="the review queue: list, approve, reject, duplicates, policy")
    actions = review.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="invoices waiting for a person, the longest waiting first")
    listing.add_argument("--org")
    listing.add_argument(
        "--status", choices=(*REVIEW_STATUSES, *REQUEUE_STATUSES), help="default: needs_review"
    )
    listing.add_argument("--reason", "--reason-code", dest="reason_code", type=reason_code_arg)
    listing.add_argument("--older-than", type=age_arg)
    listing.add_argument("--limit", type=positive_int, default=50, help="invoices per page (default 50)")
    listing.add_argument("--offset", type=int, default=0, help="skip this many (the next page)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_review_list)
    helps = {
        "approve": "approve held invoices: the pipeline posts them",
        "reject": "reject held invoices, with a reason: never posted",
        "not-duplicate": "release suspected duplicates as originals",
        "confirm-duplicate": "confirm suspected duplicates: rejected, never posted",
    }
    for name, help_text in helps.items():
        p = actions.add_parser(name, help=help_text)
        add_target_arguments(p, with_status=False, reason_filter=name != "reject")
        if name == "reject":
            p.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
        else:
            p.add_argument("--note", help="free text for the audit trail")
        if name == "approve":
            choice = p.add_mutually_exclusive_group()
            choice.add_argument(
                "--replaces",
                dest="correction",
                action="store_const",
                const="replace",
                help="a corrected invoice (type 384): it replaces the invoice it corrects; the difference is booked",
            )
            choice.add_argument(
                "--reverses",
                dest="correction",
                action="store_const",
                const="reverse",
                help="a corrected invoice (type 384): it reverses the invoice it corrects; what was booked is taken back",
            )
        p.set_defaults(func=cmd_review_action)
    correct = actions.add_parser(
        "correct", help="correct fields of a held invoice: validated and checked for duplicates again"
    )
    correct.add_argument("invoice_id", type=invoice_id_arg, metavar="INVOICE_ID")
    correct.add_argument(
        "--set",
        dest="assignments",
        action="append",
        required=True,
        metavar="FIELD=VALUE",
        help="e.g. --set payable_total=29.99 --set issue_date=2015-07-02 (repeatable)",
    )
    correct.add_argument("--note", help="free text for the audit trail")
    correct.set_defaults(func=cmd_review_correct)
    add_policy_command(actions)
    add_layout_commands(actions)

    requeue = sub.add_parser(
        "requeue", help="redrive dead letters (needs_attention), failed or fixed quarantined invoices"
    )
    add_target_arguments(requeue, with_status=True, reason_filter=True)
    requeue.add_argument("--note", help="free text for the audit trail")
    requeue.set_defaults(func=cmd_review_action)


def add_policy_command(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    policy = actions.add_parser("policy", help="show or set an org's review policy")
    policy.add_argument("--org", required=True)
    for setting, (kind, help_text) in POLICY_SETTINGS.items():
        option = "--" + setting.replace("_", "-")
        policy.add_argument(option, type=kind, default=argparse.SUPPRESS, help=help_text)
    policy.set_defaults(func=cmd_review_policy)
