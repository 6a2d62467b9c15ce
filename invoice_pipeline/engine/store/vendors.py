"""The org's own identity and its vendor registry (issue 37; docs/vendors.md).

Reads take every org of a chunk at once. The registry grows in three ways, each recorded with
its source and an audit row: an import of the ERP's vendor master, a structured e-invoice when
the org's policy lets its first one register the vendor, and a person's approval of an invoice
whose vendor was unconfirmed or whose bank details changed. The last two happen in the fenced
transaction that posts the invoice (`vendor_for_posting`), so a registration and the posting
that relied on it commit together or not at all.

Queries: sql/queries/vendors.sql.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import psycopg

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.domain.identity import (
    Identifier,
    IdentifierKind,
    OrgProfile,
    Vendor,
    normalise,
)
from invoice_pipeline.domain.payment import Registration, identity_lock_id
from invoice_pipeline.engine.store.database import Database

VENDORS = QueryFile("vendors")


@dataclass(frozen=True)
class VendorImportRow:
    name: str
    identifiers: tuple[Identifier, ...]
    default_currency: str | None = None


@dataclass(frozen=True)
class VendorImportResult:
    created: int
    extended: int
    identifiers_added: int
    refused: tuple[str, ...]


def _vendor(row: tuple[Any, ...]) -> Vendor:
    vendor_id, org_id, name, currency, kinds, values, shown = row
    idents = tuple(
        Identifier(k, v, s) for k, v, s in zip(kinds or (), values or (), shown or (), strict=True)
    )
    return Vendor(int(vendor_id), str(org_id), str(name), currency, idents)


class Vendors:
    """The org's own identity and its vendor registry (queries: vendors.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- the org's own identity -------------------------------------------------------------------

    def org_profiles(self, org_ids: Sequence[str]) -> dict[str, OrgProfile]:
        wanted = sorted(set(org_ids))
        if not wanted:
            return {}
        with self.db.pool.connection() as conn:
            return self.org_profiles_in(conn, wanted)

    @staticmethod
    def org_profiles_in(conn: psycopg.Connection[Any], org_ids: Sequence[str]) -> dict[str, OrgProfile]:
        """The orgs' own identities as `conn` sees them (the payment decision's transaction)."""
        found: dict[str, list[Identifier]] = {org: [] for org in org_ids}
        for org, kind, value, shown in conn.execute(VENDORS["org_identities"], {"org_ids": list(org_ids)}):
            found[org].append(Identifier(kind, value, shown))
        return {org: OrgProfile(org, tuple(idents)) for org, idents in found.items()}

    def org_profile_in(self, conn: psycopg.Connection[Any], org_id: str) -> OrgProfile:
        return self.org_profiles_in(conn, [org_id])[org_id]

    def add_org_identity(
        self, org_id: str, kind: IdentifierKind, value: str, *, source: str, added_by: str
    ) -> bool:
        """True when it was new. ValueError for a value that is no identifier (an invalid IBAN),
        and for one a registered vendor of the org has: the org's own identity is taken out of
        every invoice's seller position, so a vendor's VAT id, IBAN or name in the org's profile
        would hide that vendor on its own invoices (issue 52). The check and the insert share one
        transaction under the identifier's identity lock, which every registration of it takes too
        (store/payments.py, `import_vendors`): none can slip in between."""
        if not org_id.strip():
            raise ValueError("org_id must be a non-empty string")
        params = {
            "org_id": org_id,
            "kind": kind,
            "value": normalise(kind, value),
            "shown": value.strip(),
            "source": source,
            "added_by": added_by,
        }
        with self.db.transaction() as conn:
            self.lock_identities(conn, [(org_id, Identifier(kind, params["value"], params["shown"]))])
            owner = conn.execute(VENDORS["vendor_owning_identifier"], params).fetchone()
            if owner is not None:
                raise ValueError(
                    f"{kind} {value.strip()} belongs to vendor {owner[1]} (#{owner[0]}) of org {org_id}, "
                    "so it is not the org's own; if the vendor's record is wrong, correct the vendor first"
                )
            return conn.execute(VENDORS["add_org_identity"], params).fetchone() is not None

    def remove_org_identity(self, org_id: str, kind: IdentifierKind, value: str) -> bool:
        params = {"org_id": org_id, "kind": kind, "value": normalise(kind, value)}
        with self.db.transaction() as conn:
            return conn.execute(VENDORS["remove_org_identity"], params).fetchone() is not None

    def buyer_parties_of_posted_einvoices(self, org_id: str) -> list[tuple[str | None, str | None, int]]:
        """(buyer name, buyer VAT id, how many posted e-invoices name that pair) of the org's posted
        structured e-invoices: candidates for its profile, never added by themselves (anyone can
        send an e-invoice that names anyone as its buyer)."""
        with self.db.pool.connection() as conn:
            return [
                (r[0], r[1], int(r[2]))
                for r in conn.execute(VENDORS["buyer_parties_of_posted_einvoices"], {"org_id": org_id})
            ]

    # -- the vendor registry ----------------------------------------------------------------------

    def vendors_named_by(self, wanted: Sequence[tuple[str, Identifier]]) -> dict[str, list[Vendor]]:
        """Per org, the vendors that own any of the given (org, identifier) pairs."""
        if not wanted:
            return {}
        with self.db.pool.connection() as conn:
            return self.vendors_named_in(conn, wanted)

    @staticmethod
    def vendors_named_in(
        conn: psycopg.Connection[Any], wanted: Sequence[tuple[str, Identifier]]
    ) -> dict[str, list[Vendor]]:
        """`vendors_named_by` as `conn` sees the registry (the payment decision's transaction)."""
        out: dict[str, list[Vendor]] = {}
        if not wanted:
            return out
        params = {
            "org_ids": [org for org, _ in wanted],
            "kinds": [i.kind for _, i in wanted],
            "values": [i.value for _, i in wanted],
        }
        for row in conn.execute(VENDORS["vendors_named_by"], params):
            vendor = _vendor(row)
            out.setdefault(vendor.org_id, []).append(vendor)
        return out

    def currencies_a_person_approved(
        self, vendors: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[str, ...]]:
        """Per (org, vendor id), the currencies of its invoices a person approved and the ledger
        posted (an approval's rule "approved by <person>", `records.Approval.approver`)."""
        if not vendors:
            return {}
        params = {"org_ids": [org for org, _ in vendors], "vendor_ids": [v for _, v in vendors]}
        with self.db.pool.connection() as conn:
            return {
                (str(org), int(vendor_id)): tuple(currencies)
                for org, vendor_id, currencies in conn.execute(
                    VENDORS["currencies_a_person_approved"], params
                )
            }

    def list_vendors(self, org_id: str) -> list[Vendor]:
        with self.db.pool.connection() as conn:
            return [_vendor(row) for row in conn.execute(VENDORS["list_vendors"], {"org_id": org_id})]

    def known_orgs(self, limit: int = 1000) -> list[str]:
        """The org ids the database knows (a profile, a vendor or an invoice), sorted, at most `limit`."""
        with self.db.pool.connection() as conn:
            return [str(org) for (org,) in conn.execute(VENDORS["known_orgs"], {"limit": limit})]

    def vendor_events(self, org_id: str, vendor_id: int) -> list[tuple[str, str, str, UUID | None, Any]]:
        with self.db.pool.connection() as conn:
            return [
                tuple(r)
                for r in conn.execute(VENDORS["vendor_events_of"], {"org_id": org_id, "vendor_id": vendor_id})
            ]

    @staticmethod
    def lock_identities(conn: psycopg.Connection[Any], keys: Iterable[tuple[str, Identifier]]) -> None:
        """The (org, identifier) keys' advisory locks (domain/payment.identity_lock_id), in one sorted
        call: whoever reads or changes who owns an identifier, or who bears a name, takes them first."""
        Vendors.lock_ids(conn, (identity_lock_id(org_id, ident) for org_id, ident in keys))

    @staticmethod
    def lock_ids(conn: psycopg.Connection[Any], lock_ids: Iterable[int]) -> None:
        """Advisory locks, in one sorted call (the lock order, sql/0009)."""
        ids = sorted(set(lock_ids))
        if ids:
            conn.execute(VENDORS["take_identity_locks"], {"lock_ids": ids})

    def import_vendors(self, org_id: str, rows: Sequence[VendorImportRow], actor: str) -> VendorImportResult:
        """The ERP's vendor master, in one transaction: a row whose identifier another vendor of the
        org already owns extends that vendor; a row naming two different vendors, or the org's own
        identity, is refused."""
        created = extended = added = 0
        refused: list[str] = []
        with self.db.transaction() as conn:
            named = [Identifier("name", normalise("name", r.name), r.name) for r in rows]
            self.lock_identities(
                conn, [(org_id, i) for i in (*named, *(i for r in rows for i in r.identifiers))]
            )
            own = self.org_profile_in(conn, org_id)
            for number, (row, name) in enumerate(zip(rows, named, strict=True), start=1):
                theirs = [i for i in row.identifiers if own.has(i.kind, i.shown)]
                if theirs:
                    # The org's own identity is never a vendor's: the registry would then say the
                    # org pays itself (domain/payment.py holds such an invoice).
                    refused.append(
                        f"row {number} ({row.name}): {', '.join(f'{i.kind} {i.shown}' for i in theirs)} "
                        "is the org's own identity (org profile); correct the row or the profile"
                    )
                    continue
                owners = _owners(conn, org_id, row.identifiers)
                if len(owners) > 1:
                    refused.append(
                        f"row {number} ({row.name}): its identifiers belong to different vendors "
                        f"({', '.join(f'#{o}' for o in sorted(owners))}); split or merge them by hand"
                    )
                    continue
                if owners:
                    vendor_id = owners.pop()
                    extended += 1
                else:
                    vendor_id = _insert_vendor(conn, org_id, row.name, row.default_currency, "import", actor)
                    created += 1
                    _event(conn, org_id, vendor_id, "imported", f"imported as {row.name}", actor, None)
                for ident in (name, *row.identifiers):
                    if _add_identifier(conn, org_id, vendor_id, ident, "import", actor, None):
                        added += 1
        return VendorImportResult(created, extended, added, tuple(refused))

    def register_for_posting(
        self,
        conn: psycopg.Connection[Any],
        org_id: str,
        invoice_id: UUID,
        registration: Registration,
        vendor_id: int | None,
        currency: str | None,
    ) -> int:
        """The vendor an invoice is posted to, registered (`vendor_id` None) or taught the
        identifiers vouched for, in the posting's fenced transaction.

        The payment decision (store/payments.py) read the registry under the advisory locks of
        every identifier registered here, so no other transaction can register them meanwhile:
        the decision's "no vendor owns them" still holds. An identifier found owned all the same
        (a writer that took no lock) is left with its owner: the unique index says so, and
        nothing is taken from another vendor.
        """
        name = Identifier("name", normalise("name", registration.name), registration.name)
        if vendor_id is None:
            vendor_id = _insert_vendor(
                conn, org_id, registration.name, currency, registration.source, registration.actor
            )
            _event(
                conn,
                org_id,
                vendor_id,
                "registered",
                f"registered as {registration.name} from invoice {invoice_id} ({registration.source})",
                registration.actor,
                invoice_id,
            )
        for ident in (name, *registration.identifiers):
            if (
                _add_identifier(
                    conn, org_id, vendor_id, ident, registration.source, registration.actor, invoice_id
                )
                and ident.kind != "name"
            ):
                _event(
                    conn,
                    org_id,
                    vendor_id,
                    "identifier_added",
                    f"{ident.kind} {ident.shown} from invoice {invoice_id} ({registration.source})",
                    registration.actor,
                    invoice_id,
                )
        return vendor_id


# -- the registry's rows, written on the caller's connection (inside its transaction and locks) --


def _owners(
    conn: psycopg.Connection[Any],
    org_id: str,
    idents: Sequence[Identifier],
) -> set[int]:
    owners: set[int] = set()
    for ident in idents:
        if ident.kind == "name":
            continue
        row = conn.execute(
            VENDORS["vendor_owning"], {"org_id": org_id, "kind": ident.kind, "value": ident.value}
        ).fetchone()
        if row is not None:
            owners.add(int(row[0]))
    return owners


def _insert_vendor(
    conn: psycopg.Connection[Any],
    org_id: str,
    name: str,
    currency: str | None,
    source: str,
    actor: str,
) -> int:
    params = {
        "org_id": org_id,
        "name": name,
        "default_currency": currency,
        "source": source,
        "actor": actor,
    }
    row = conn.execute(VENDORS["insert_vendor"], params).fetchone()
    assert row is not None
    return int(row[0])


def _add_identifier(
    conn: psycopg.Connection[Any],
    org_id: str,
    vendor_id: int,
    ident: Identifier,
    source: str,
    actor: str,
    invoice_id: UUID | None,
) -> bool:
    params = {
        "org_id": org_id,
        "vendor_id": vendor_id,
        "kind": ident.kind,
        "value": ident.value,
        "shown": ident.shown,
        "source": source,
        "actor": actor,
        "invoice_id": invoice_id,
    }
    return conn.execute(VENDORS["add_vendor_identifier"], params).fetchone() is not None


def _event(
    conn: psycopg.Connection[Any],
    org_id: str,
    vendor_id: int,
    event: str,
    detail: str,
    actor: str,
    invoice_id: UUID | None,
) -> None:
    params = {
        "org_id": org_id,
        "vendor_id": vendor_id,
        "event": event,
        "detail": detail,
        "actor": actor,
        "invoice_id": invoice_id,
    }
    conn.execute(VENDORS["vendor_event"], params)
