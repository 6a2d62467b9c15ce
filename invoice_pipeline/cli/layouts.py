"""`invoice-pipeline review layouts list|show|learn|disable|export|import`: the vendor layouts an org's
decisions taught (issue 23; engine/layouts.py). Export and import use the JSON format of
docs/layouts.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from invoice_pipeline.cli.arguments import checked_org
from invoice_pipeline.cli.exit_codes import EXIT_OK
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import Settings
from invoice_pipeline.engine.store import open_store
from invoice_pipeline.terminal import printable, printable_json

EXIT_NOT_FOUND = 1


def _org(value: str | None) -> str | None:
    """`--org` checked when given: the filters take no org as every org."""
    return None if value is None else checked_org(value)


def cmd_layouts_list(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.layouts import describe_rows

    store = open_store(settings, COMMAND_POOL)
    try:
        rows = store.layouts.list_layouts(_org(args.org), include_disabled=args.all)
    finally:
        store.close()
    if not rows:
        print("no vendor layouts" + ("" if args.all else " enabled (--all shows disabled ones too)"))
    for line in describe_rows(rows):
        print(printable(line))
    return EXIT_OK


def cmd_layouts_show(args: argparse.Namespace, settings: Settings) -> int:

    store = open_store(settings, COMMAND_POOL)
    try:
        row = store.layouts.layout_row(args.layout_id)
    finally:
        store.close()
    if row is None:
        print(f"no vendor layout {args.layout_id}", file=sys.stderr)
        return EXIT_NOT_FOUND
    out: dict[str, Any] = {
        "id": row.id,
        "org_id": row.org_id,
        **row.vendor_layout().to_json(),
        "disabled_reason": row.disabled_reason,
        "superseded_by": row.superseded_by,
        "confirmations": row.confirmations,
        "last_confirmed_at": row.last_confirmed_at.isoformat() if row.last_confirmed_at else None,
    }
    for line in json.dumps(out, indent=2, ensure_ascii=False).splitlines():
        print(printable(line))
    return EXIT_OK


def cmd_layouts_learn(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.layouts import teach_layout
    from invoice_pipeline.engine.review import Actor

    store = open_store(settings, COMMAND_POOL)
    try:
        learnt = teach_layout(store, args.invoice_id, Actor.os_user().name)
    finally:
        store.close()
    print(printable(f"{learnt.outcome}: {learnt.detail}"))
    return EXIT_NOT_FOUND if learnt.outcome == "skipped" else EXIT_OK


def cmd_layouts_disable(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.review import Actor

    reason = f"disabled by {Actor.os_user().name}" + (f": {args.reason.strip()}" if args.reason else "")
    store = open_store(settings, COMMAND_POOL)
    try:
        done = store.layouts.disable_layout(args.layout_id, reason, _org(args.org))
    finally:
        store.close()
    if not done:
        print(
            f"no enabled vendor layout {args.layout_id}" + (f" in org {args.org}" if args.org else ""),
            file=sys.stderr,
        )
        return EXIT_NOT_FOUND
    print(
        f"layout {args.layout_id} disabled ({reason}); pages of its vendor are read template-free or by another layout"
    )
    return EXIT_OK


def cmd_layouts_export(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.layouts import export_layouts

    org = _org(args.org)
    assert org is not None
    store = open_store(settings, COMMAND_POOL)
    try:
        data = export_layouts(store, org, include_disabled=args.all)
    finally:
        store.close()
    text = printable_json(data) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{len(data['layouts'])} layout(s) of org {org} written to {args.output}")
    return EXIT_OK


def cmd_layouts_import(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.documents.reading.layout_export import parse_export_text
    from invoice_pipeline.engine.layouts import import_layouts
    from invoice_pipeline.engine.review import Actor

    org = _org(args.org)
    assert org is not None
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    data = parse_export_text(text)  # ExportRefused (a ValueError): the CLI prints why, exit 2
    store = open_store(settings, COMMAND_POOL)
    try:
        rows = import_layouts(store, data, org, Actor.os_user().name)
    finally:
        store.close()
    for row in rows:
        print(printable(f"imported {row.vendor_key} as layout {row.id} v{row.version} in org {org}"))
    print(f"{len(rows)} layout(s) imported")
    return EXIT_OK


def add_layout_commands(actions: Any) -> None:
    """`review layouts ...` under the `review` subcommands (cli.review.add_review_commands)."""
    layouts = actions.add_parser(
        "layouts", help="vendor layouts learnt from approvals: list, show, learn, disable, export, import"
    )
    sub = layouts.add_subparsers(dest="layouts_action", required=True)
    listing = sub.add_parser("list", help="the layouts, with the invoice each was learnt from")
    listing.add_argument("--org", help="only this org's layouts")
    listing.add_argument("--all", action="store_true", help="disabled and superseded versions too")
    listing.set_defaults(func=cmd_layouts_list)
    show = sub.add_parser("show", help="one layout: its anchors, positions and fingerprint, as JSON")
    show.add_argument("layout_id", type=int)
    show.set_defaults(func=cmd_layouts_show)
    learn = sub.add_parser(
        "learn", help="vouch that a posted page-read invoice was read right: learn its vendor's layout"
    )
    learn.add_argument("invoice_id")
    learn.set_defaults(func=cmd_layouts_learn)

    disable = sub.add_parser("disable", help="stop reading with a layout (it is kept)")
    disable.add_argument("layout_id", type=int)
    disable.add_argument("--org", help="refuse unless the layout is this org's")
    disable.add_argument("--reason", help="why, for the record")
    disable.set_defaults(func=cmd_layouts_disable)
    export = sub.add_parser("export", help="an org's layouts as JSON (docs/layouts.md)")
    export.add_argument("--org", required=True)
    export.add_argument("--all", action="store_true", help="disabled versions too")
    export.add_argument("--output", "-o", help="a file (default: standard output)")
    export.set_defaults(func=cmd_layouts_export)
    imp = sub.add_parser("import", help="layouts from an export, as new versions in an org")
    imp.add_argument("file", help="the JSON file (- for standard input)")
    imp.add_argument("--org", required=True, help="the org they are for (whatever org they came from)")
    imp.set_defaults(func=cmd_layouts_import)
