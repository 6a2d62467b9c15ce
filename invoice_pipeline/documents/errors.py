"""The one exception the document layer raises, with a stable code for quarantine."""

from __future__ import annotations


class BadDocument(Exception):
    """A document the pipeline cannot use.

    `code` is stable and machine-readable (it ends up in the quarantine table and in metrics);
    `reason` is written for the person who has to fix the input, so it says what to do.
    """

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason

    def __reduce__(self) -> tuple[type[BadDocument], tuple[str, str]]:
        # Exceptions cross process boundaries (Dagster subprocess executors); the default
        # pickling would call __init__ with the formatted message only.
        return (type(self), (self.code, self.reason))
