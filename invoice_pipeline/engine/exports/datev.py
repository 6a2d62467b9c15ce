"""DATEV "Buchungsstapel" in the EXTF CSV format: one file per batch (docs/exports.md).

The file is a pure function of the batch: its rows (in seq order), the batch's creation time
(the header's "Erzeugt am") and the target's settings. It is written to a temporary name in the
target folder, fsynced, renamed to `EXTF_Buchungsstapel_<batch id>.csv` and the folder fsynced:
a repeated delivery of the same batch (after a crash between the rename and the commit, or a
requeue) writes the same name with the same bytes, and a reader never sees half a file.

What is written: the 31-field header line (format EXTF, version 700, data category 21,
"Buchungsstapel", format version 12), the column line, and per posting the first 14 columns
of the booking record (amount, debit/credit flag, currency, account, contra account, document
date, document number, posting text); the remaining columns are left out.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from invoice_pipeline.engine.export_records import Batch, BatchItem

FORMAT_VERSION = 12
COLUMNS = (
    "Umsatz (ohne Soll/Haben-Kz)",
    "Soll/Haben-Kennzeichen",
    "WKZ Umsatz",
    "Kurs",
    "Basis-Umsatz",
    "WKZ Basis-Umsatz",
    "Konto",
    "Gegenkonto (ohne BU-Schlüssel)",
    "BU-Schlüssel",
    "Belegdatum",
    "Belegfeld 1",
    "Belegfeld 2",
    "Skonto",
    "Buchungstext",
)
# DATEV reads Windows-1252 ("ANSI"); a character it cannot hold is written as '?', never dropped silently.
ENCODING = "cp1252"


@dataclass(frozen=True)
class DatevSettings:
    """A DATEV target's settings (export target add ... datev)."""

    directory: Path
    consultant: int  # Beraternummer
    client: int  # Mandantennummer
    fiscal_year_start: str  # MMDD
    account_length: int  # Sachkontenlänge
    expense_account: int  # Gegenkonto: where the cost goes (SKR03 3400: Wareneingang 19 %)
    creditor_account: int  # Konto: the vendor's creditor account is this plus the vendor's id

    @classmethod
    def of(cls, settings: dict[str, Any]) -> DatevSettings:
        return cls(
            Path(settings["dir"]),
            int(settings.get("consultant", 1001)),
            int(settings.get("client", 1)),
            str(settings.get("fiscal_year_start", "0101")),
            int(settings.get("account_length", 4)),
            int(settings.get("expense_account", 3400)),
            int(settings.get("creditor_account", 70000)),
        )


def file_name(batch: Batch) -> str:
    return f"EXTF_Buchungsstapel_{batch.batch_id}.csv"


def _text(value: str, limit: int) -> str:
    # A quote inside a text field is doubled; line breaks and ';' cannot appear in a record.
    cleaned = re.sub(r"[\r\n;]+", " ", value)[:limit]
    return '"' + cleaned.replace('"', '""') + '"'


def _amount(value: Decimal) -> str:
    return f"{abs(value):.2f}".replace(".", ",")


def _header(batch: Batch, s: DatevSettings) -> str:
    dates = [i.issue_date or i.posted_at.date() for i in batch.items]
    first, last = min(dates), max(dates)
    fiscal_start = date(first.year, int(s.fiscal_year_start[:2]), int(s.fiscal_year_start[2:]))
    if fiscal_start > first:
        fiscal_start = fiscal_start.replace(year=first.year - 1)
    created: datetime = batch.created_at
    fields = [
        '"EXTF"',
        "700",
        "21",
        '"Buchungsstapel"',
        str(FORMAT_VERSION),
        created.strftime("%Y%m%d%H%M%S") + f"{created.microsecond // 1000:03d}",
        "",
        '"RE"',
        '"invoice-pipeline"',
        '""',
        str(s.consultant),
        str(s.client),
        fiscal_start.strftime("%Y%m%d"),
        str(s.account_length),
        first.strftime("%Y%m%d"),
        last.strftime("%Y%m%d"),
        _text(f"Batch {str(batch.batch_id)[:8]}", 30),
        '""',
        "1",
        "0",
        "0",
        '"EUR"',
        "",
        '""',
        "",
        "",
        '""',
        "",
        "",
        '""',
        '""',
    ]
    return ";".join(fields)


def _record(item: BatchItem, s: DatevSettings) -> str:
    # A supplier invoice credits the vendor's creditor account (H) against the expense account;
    # a credit note or a negative correction debits it (S).
    creditor = s.creditor_account + (item.vendor_id or 0)
    booked = item.issue_date or item.posted_at.date()
    fields = [
        _amount(item.amount),
        '"H"' if item.amount >= 0 else '"S"',
        _text(item.currency, 3),
        "",
        "",
        '""',
        str(creditor),
        str(s.expense_account).rjust(s.account_length, "0"),
        '""',
        booked.strftime("%d%m"),
        _text(item.invoice_number or "", 36),
        _text(str(item.invoice_id)[:12], 12),
        "",
        _text(item.vendor_name, 60),
    ]
    return ";".join(fields)


def render(batch: Batch) -> bytes:
    """The batch's file, bytes for bytes: every row of the batch, in seq order."""
    s = DatevSettings.of(batch.target.settings)
    lines = [_header(batch, s), ";".join(_text(c, 60) for c in COLUMNS)]
    lines.extend(_record(item, s) for item in batch.items)
    return ("\r\n".join(lines) + "\r\n").encode(ENCODING, errors="replace")


def write_batch(batch: Batch, after_rename: Any = None) -> Path:
    """The batch's file in the target folder: temporary name, fsync, rename, folder fsync.
    `after_rename` (a test's crash point) runs after the rename, before the caller commits."""
    s = DatevSettings.of(batch.target.settings)
    s.directory.mkdir(parents=True, exist_ok=True)
    final = s.directory / file_name(batch)
    # A deliverer killed mid-write left its temporary behind; the batch's file replaces it.
    for stale in s.directory.glob(f".{final.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    temporary = s.directory / f".{final.name}.{os.getpid()}.tmp"
    content = render(batch)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, final)
    folder = os.open(s.directory, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
    if after_rename is not None:
        after_rename()
    return final
