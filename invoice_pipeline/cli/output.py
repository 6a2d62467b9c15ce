"""What the commands print beside their results: a progress bar on stderr, ages in days."""

from __future__ import annotations

import sys
from datetime import timedelta


def progress(done: int, total: int, label: str) -> None:
    """A one-line progress bar on stderr, redrawn in place."""
    width = 30
    filled = width * done // max(total, 1)
    end = "\n" if done >= total else ""
    print(
        f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}",
        end=end,
        file=sys.stderr,
        flush=True,
    )


def in_days(age: timedelta) -> str:
    return f"{age.total_seconds() / 86400:.1f}d"
