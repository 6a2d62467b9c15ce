"""The pool a command opens the store with (`engine.store.open_store`, the one way to open it
from settings: the configured database, migrated, with the settings' lease TTL)."""

from __future__ import annotations

# A command runs its queries one after another, in one thread: one connection would do. The
# size is the one commands have always had; a spare connection costs nothing until it is used.
COMMAND_POOL = 4
