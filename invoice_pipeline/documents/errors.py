"""The one exception the document layer raises, with a stable code for quarantine."""

from __future__ import annotations

import re

# What PostgreSQL text (NUL) and UTF-8 (unpaired surrogates) cannot hold. A reason quoting the
# document must not turn a quarantine into a failing write, and so into a retry loop.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

TOO_COMPLEX = "too_complex"
# A reason is read by a person and stored with the invoice; one quoting a hostile document at
# length (a 19 MB string in a schema error) must stay a reason, not a copy of the document.
MAX_REASON_CHARS = 2000


class BadDocument(Exception):
    """A document the pipeline cannot use.

    `code` is stable and machine-readable (it ends up in the quarantine table and in metrics);
    `reason` is written for the person who has to fix the input, so it says what to do.
    """

    def __init__(self, code: str, reason: str) -> None:
        reason = UNSTORABLE.sub("\ufffd", reason)
        if len(reason) > MAX_REASON_CHARS:
            reason = reason[: MAX_REASON_CHARS - 16] + " ... (shortened)"
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason

    def __reduce__(self) -> tuple[type[BadDocument], tuple[str, str]]:
        # Exceptions cross process boundaries (Dagster subprocess executors); the default
        # pickling would call __init__ with the formatted message only.
        return (type(self), (self.code, self.reason))


def too_complex(what: str, advice: str) -> BadDocument:
    """A document over one of the per-document bounds: says which bound, and what to do."""
    return BadDocument(TOO_COMPLEX, f"{what}; {advice}")


def resource_error(exc: BaseException) -> BaseException | None:
    """The MemoryError or RecursionError behind `exc`, if any.

    Libraries wrap what they catch (pdfplumber turns every pdfminer error into
    PdfminerException), and a broad `except Exception` that maps errors to "corrupt" must not
    report exhaustion as damage.
    """
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (MemoryError, RecursionError)):
            return current
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        todo.extend(a for a in current.args if isinstance(a, BaseException))
    return None
