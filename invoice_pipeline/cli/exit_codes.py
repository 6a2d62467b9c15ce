"""How a command ends: the exit codes every command shares (docs/cli.md lists them)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_INVOICES_FAILED = 1  # `process`: some invoices it ran were quarantined, failed or need attention
EXIT_USAGE = 2  # bad arguments or settings, refused before any SQL runs
EXIT_DATABASE = 3  # the database server cannot be reached, or the database does not exist
# (`db status` also exits 3: the embedded server is not running.)
