"""`invoice-pipeline vendors list|import|events` and `invoice-pipeline org profile|add|remove|seed`:
the org's vendor registry and its own identity (issue 37; docs/vendors.md)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from invoice_pipeline.cli.arguments import checked_org
from invoice_pipeline.cli.exit_codes import EXIT_OK
from invoice_pipeline.cli.store import COMMAND_POOL
from invoice_pipeline.config import ConfigError, Settings
from invoice_pipeline.domain.identity import IDENTIFIER_KINDS
from invoice_pipeline.engine.review import Actor
from invoice_pipeline.engine.store import open_store
from invoice_pipeline.terminal import printable

if TYPE_CHECKING:  # the engine is imported when a command needs it (CLI start-up)
    from invoice_pipeline.engine.vendors import ProfileCandidate

EXIT_REFUSED = 2


def cmd_vendors_list(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.vendors import describe_vendors

    store = open_store(settings, COMMAND_POOL)
    try:
        vendors = store.vendors.list_vendors(checked_org(args.org))
    finally:
        store.close()
    if not vendors:
        print("no vendors registered (invoice-pipeline vendors import --org ORG FILE.csv)")
    for line in describe_vendors(vendors):
        print(printable(line))
    return EXIT_OK


def cmd_vendors_import(args: argparse.Namespace, settings: Settings) -> int:
    from invoice_pipeline.engine.vendors import VendorFileError, read_vendor_csv

    org = checked_org(args.org)
    try:
        rows = read_vendor_csv(Path(args.file).read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, VendorFileError) as exc:
        print(f"nothing imported: {printable(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    store = open_store(settings, COMMAND_POOL)
    try:
        result = store.vendors.import_vendors(org, rows, Actor.os_user().name)
    finally:
        store.close()
    print(
        f"org {printable(org)}: {result.created} vendor(s) registered, {result.extended} extended, "
        f"{result.identifiers_added} identifier(s) added"
    )
    for why in result.refused:
        print(f"  refused: {printable(why)}")
    return EXIT_OK if not result.refused else EXIT_REFUSED


def cmd_org_profile(args: argparse.Namespace, settings: Settings) -> int:
    org = checked_org(args.org)
    if args.action in ("add", "remove") and not (args.kind and args.value):
        raise ConfigError(
            f"org profile {args.action} needs a kind ({', '.join(IDENTIFIER_KINDS)}) and a value"
        )
    store = open_store(settings, COMMAND_POOL)
    try:
        actor = Actor.os_user().name
        if args.action == "add":
            store.vendors.add_org_identity(
                org, args.kind, args.value, source="set by a person", added_by=actor
            )
        elif args.action == "remove":
            store.vendors.remove_org_identity(org, args.kind, args.value)
        elif args.action == "seed":
            from invoice_pipeline.engine.vendors import org_profile_candidates

            _print_candidates(org, org_profile_candidates(store, org))
        profile = store.vendors.org_profiles([org])[org]
    except ValueError as exc:
        print(f"refused: {printable(str(exc))}", file=sys.stderr)
        return EXIT_REFUSED
    finally:
        store.close()
    print(f"org {printable(org)} is known as:")
    for kind in IDENTIFIER_KINDS:
        for shown in profile.of_kind(kind):
            print(f"  {kind:<5} {printable(shown)}")
    if not profile.identifiers:
        print(
            "  nothing yet (invoice-pipeline org profile --org ORG add vat DE136695976, or seed to see proposals)"
        )
    return EXIT_OK


def _print_candidates(org: str, candidates: list[ProfileCandidate]) -> None:
    """What `seed` proposes: nothing is added; each line says how to add it (a person decides)."""
    if not candidates:
        print(
            f"org {printable(org)}: no candidates (no posted e-invoice names a buyer not yet in its profile)"
        )
        return
    print(
        f"org {printable(org)}: the buyer parties of its posted e-invoices, not yet in its profile. Nothing "
        "was added: anyone can send an e-invoice naming anyone as its buyer; add those that are the org's own."
    )
    for c in candidates:
        line = f"  {c.kind:<5} {printable(c.shown)}  (named by {c.invoices} posted e-invoice(s))"
        if c.owner:
            print(f"{line}: not proposed, it belongs to {printable(c.owner)}")
        elif c.problem:
            print(f"{line}: not proposed, {printable(c.problem)}")
        else:
            command = shlex.join(["invoice-pipeline", "org", "profile", "--org", org, "add", c.kind, c.shown])
            print(f"{line}: {printable(command)}")


def add_vendor_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vendors = sub.add_parser("vendors", help="the org's vendor registry: list, import a vendor-master CSV")
    actions = vendors.add_subparsers(dest="vendors_command", required=True)
    listing = actions.add_parser("list", help="the org's registered vendors and their identifiers")
    listing.add_argument("--org", required=True)
    listing.set_defaults(func=cmd_vendors_list)
    imported = actions.add_parser(
        "import", help="import the ERP's vendor master (CSV: name, vat_id, tax_number, iban, currency)"
    )
    imported.add_argument("--org", required=True)
    imported.add_argument("file")
    imported.set_defaults(func=cmd_vendors_import)

    org = sub.add_parser("org", help="the org's own identity: names, VAT ids, tax numbers, IBANs")
    org_actions = org.add_subparsers(dest="org_command", required=True)
    profile = org_actions.add_parser(
        "profile",
        help="show, add to or remove from the org's profile; seed: propose the buyer parties of its posted e-invoices",
    )
    profile.add_argument("--org", required=True)
    profile.add_argument("action", nargs="?", choices=["show", "add", "remove", "seed"], default="show")
    profile.add_argument("kind", nargs="?", choices=IDENTIFIER_KINDS)
    profile.add_argument("value", nargs="?")
    profile.set_defaults(func=cmd_org_profile)
