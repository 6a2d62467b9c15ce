"""Vendor layouts, per organisation: the versions learnt from people's decisions (issue 23).

A layout is data (`documents.reading.layouts.VendorLayout`, stored as its JSON export); the
columns beside it say whose it is, which version, the invoice it was learnt from, who taught it
and when, and whether it is enabled. Reads for the pipeline take every org of a chunk at once.

Queries: sql/queries/layouts.sql.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from invoice_pipeline.db.sqlfiles import QueryFile
from invoice_pipeline.documents.reading.layouts import VendorLayout
from invoice_pipeline.engine.store.database import Database

LAYOUTS = QueryFile("layouts")


@dataclass(frozen=True)
class LayoutRow:
    """One stored version of a vendor's layout."""

    id: int
    org_id: str
    vendor_key: str
    version: int
    layout: dict[str, Any]
    learnt_from: UUID | None
    taught_by: str
    taught_at: datetime
    enabled: bool
    disabled_reason: str | None
    superseded_by: int | None
    confirmations: int
    last_confirmed_at: datetime | None
    # 'shadow' until a person approved an invoice read with it, then 'active' (0015).
    state: str = "active"

    def vendor_layout(self) -> VendorLayout:
        data = self.layout if isinstance(self.layout, dict) else json.loads(self.layout)
        read = VendorLayout.from_json(data, org_id=self.org_id, id=self.id)
        return replace(
            read,
            vendor_key=self.vendor_key,
            version=self.version,
            learnt_from=str(self.learnt_from) if self.learnt_from else None,
            taught_by=self.taught_by,
            taught_at=self.taught_at.isoformat(),
            enabled=self.enabled,
            shadow=self.state == "shadow",
        )


@dataclass(frozen=True)
class LayoutEvent:
    """An approval that activated a version, a rejection that undid one or restored one."""

    layout_id: int
    org_id: str
    event: str
    invoice_id: UUID | None
    actor: str
    at: datetime
    detail: str


class Layouts:
    """Vendor layouts, per organisation (queries: layouts.sql)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def enabled_layouts(self, org_ids: Sequence[str]) -> dict[str, list[VendorLayout]]:
        """Each org's enabled layouts: one query for a chunk's orgs."""
        out: dict[str, list[VendorLayout]] = {org: [] for org in org_ids}
        if not org_ids:
            return out
        with self.db.pool.connection() as conn:
            rows = self.db.fetch_all(conn, LayoutRow, LAYOUTS["enabled_layouts"], {"org_ids": list(org_ids)})
        for row in rows:
            out.setdefault(row.org_id, []).append(row.vendor_layout())
        return out

    def layouts_of_vendor(self, org_id: str, vendor_key: str) -> list[LayoutRow]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, LayoutRow, LAYOUTS["layouts_of_vendor"], {"org_id": org_id, "vendor_key": vendor_key}
            )

    def list_layouts(self, org_id: str | None = None, *, include_disabled: bool = False) -> list[LayoutRow]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(
                conn, LayoutRow, LAYOUTS["list_layouts"], {"org_id": org_id, "all": include_disabled}
            )

    def layout_row(self, layout_id: int) -> LayoutRow | None:
        with self.db.pool.connection() as conn:
            return self.db.fetch_one(conn, LayoutRow, LAYOUTS["layout_by_id"], {"id": layout_id})

    def save_layout(
        self,
        layout: VendorLayout,
        *,
        taught_by: str,
        learnt_from: UUID | None,
        supersedes: LayoutRow | None = None,
        why: str = "",
        active: bool = False,
    ) -> LayoutRow:
        """A new version of the vendor's layout in `layout.org_id`, in shadow unless `active` (learnt
        from a person's approval); with `supersedes`, that version is disabled as superseded by it,
        in the same transaction."""

        def save() -> LayoutRow:
            with self.db.transaction() as conn:
                return self._insert_layout(conn, layout, taught_by, learnt_from, supersedes, why, active)

        return self.db.retrying(save, "saving a vendor layout")

    def import_layouts(self, layouts: Sequence[VendorLayout], *, taught_by: str) -> list[LayoutRow]:
        """Each layout a new version of its vendor's layout, all in one transaction: an import
        that fails part-way (the database, a value it refuses) stores none of them."""
        # Vendors locked in one order, so two imports of overlapping exports cannot deadlock.
        ordered = sorted(layouts, key=lambda layout: (layout.org_id, layout.vendor_key))

        def save() -> list[LayoutRow]:
            with self.db.transaction() as conn:
                # Imported: in shadow until a person approves an invoice read with it.
                return [
                    self._insert_layout(conn, layout, taught_by, None, None, "", active=False)
                    for layout in ordered
                ]

        try:
            return self.db.retrying(save, "importing vendor layouts")
        except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
            # A value the database will not store (a NUL in a name, a key its CHECK refuses):
            # the person importing gets the reason, as for any other refused document.
            why = exc.diag.message_primary or type(exc).__name__
            raise ValueError(f"the database refused a layout of the export ({why})") from None

    def _insert_layout(
        self,
        conn: Any,
        layout: VendorLayout,
        taught_by: str,
        learnt_from: UUID | None,
        supersedes: LayoutRow | None,
        why: str,
        active: bool,
    ) -> LayoutRow:
        key = {"org_id": layout.org_id, "vendor_key": layout.vendor_key}
        conn.execute(LAYOUTS["lock_vendor"], key)
        data = layout.to_json()
        data.pop("enabled", None)
        row = conn.execute(
            LAYOUTS["insert_layout"],
            key
            | {
                "layout": Jsonb(data),
                "learnt_from": learnt_from,
                "taught_by": taught_by,
                "state": "active" if active else "shadow",
            },
        ).fetchone()
        assert row is not None
        if supersedes is not None:
            if supersedes.org_id != layout.org_id:
                raise ValueError("a layout only supersedes a layout of its own organisation")
            conn.execute(
                LAYOUTS["supersede_layout"],
                {
                    "id": supersedes.id,
                    "org_id": layout.org_id,
                    "by": row[0],
                    "version": row[1],
                    "why": why or "a decision contradicted it",
                },
            )
        stored = self.db.fetch_one(conn, LayoutRow, LAYOUTS["layout_by_id"], {"id": row[0]})
        assert stored is not None
        return stored

    def confirm_layout(self, org_id: str, layout_id: int, *, invoice_id: UUID, actor: str) -> bool:
        """A decision on another invoice than the one the layout was learnt from, read as the
        layout reads it: counted; a shadow version becomes active, and that is recorded with the
        invoice and the person. True when it was activated."""

        def confirm() -> bool:
            with self.db.transaction() as conn:
                row = conn.execute(
                    LAYOUTS["confirm_layout"], {"id": layout_id, "org_id": org_id, "invoice_id": invoice_id}
                ).fetchone()
                if row is None or row[0] != "shadow":
                    return False
                conn.execute(
                    LAYOUTS["layout_event"],
                    {
                        "layout_id": layout_id,
                        "org_id": org_id,
                        "event": "activated",
                        "invoice_id": invoice_id,
                        "actor": actor,
                        "detail": f"{actor} approved invoice {invoice_id}, read with it in shadow as decided",
                    },
                )
                return True

        return self.db.retrying(confirm, "confirming a vendor layout")

    def undo_taught_by(self, org_id: str, invoice_id: UUID, actor: str, why: str) -> list[str]:
        """A rejected invoice teaches nothing: the enabled versions learnt from it are disabled,
        and the versions they had superseded are read again; each step is recorded. One
        transaction; returns what was done, one line each."""

        def undo() -> list[str]:
            done: list[str] = []
            with self.db.transaction() as conn:
                rows = conn.execute(
                    LAYOUTS["layouts_learnt_from"], {"org_id": org_id, "invoice_id": invoice_id}
                ).fetchall()
                for layout_id, vendor_key in rows:
                    conn.execute(LAYOUTS["lock_vendor"], {"org_id": org_id, "vendor_key": vendor_key})
                    reason = f"undone: invoice {invoice_id} it was learnt from was rejected by {actor}: {why}"
                    conn.execute(
                        LAYOUTS["undo_layout"], {"id": layout_id, "org_id": org_id, "reason": reason}
                    )
                    events = [(layout_id, "undone", reason)]
                    for (restored,) in conn.execute(
                        LAYOUTS["restore_superseded"], {"org_id": org_id, "id": layout_id}
                    ).fetchall():
                        events.append(
                            (
                                restored,
                                "restored",
                                f"read again: layout {layout_id} that superseded it was undone",
                            )
                        )
                    for event_layout, event, detail in events:
                        conn.execute(
                            LAYOUTS["layout_event"],
                            {
                                "layout_id": event_layout,
                                "org_id": org_id,
                                "event": event,
                                "invoice_id": invoice_id,
                                "actor": actor,
                                "detail": detail,
                            },
                        )
                        done.append(f"layout {event_layout} {event}")
            return done

        return self.db.retrying(undo, "undoing what a rejected invoice taught")

    def layout_events(self, org_id: str) -> list[LayoutEvent]:
        with self.db.pool.connection() as conn:
            return self.db.fetch_all(conn, LayoutEvent, LAYOUTS["layout_events"], {"org_id": org_id})

    def disable_layout(self, layout_id: int, reason: str, org_id: str | None = None) -> bool:
        """Disable one layout (it is kept, and shown, but no longer read with)."""
        with self.db.pool.connection() as conn:
            row = conn.execute(
                LAYOUTS["disable_layout"], {"id": layout_id, "reason": reason, "org_id": org_id}
            ).fetchone()
        return row is not None
