"""Text from documents, uploads and the database, made safe to print on a terminal.

A vendor name, a file name or a quarantine reason is data someone else wrote. Printed raw, an
ESC sequence in it can clear the screen, retitle the window or write the clipboard (OSC 52),
a C1 control does the same on terminals that honour 8-bit controls, and a bidi override makes
"INV-1" display as something else. Every human-readable line the CLI prints passes its values
through `printable`; the stored value stays as the sender wrote it, and JSON output stays JSON
(`json.dumps` escapes everything outside ASCII; `printable_json` keeps other scripts readable
and escapes only what a terminal would act on).
"""

from __future__ import annotations

import json
import re
from typing import Any

# C0 controls (ESC, BEL, backspace, CR, newline, tab too: a value is printed on one line and must
# not forge another), DEL, C1 controls (8-bit CSI/OSC), the bidi embeddings, overrides, isolates
# and marks, and the zero-width characters that hide in identifiers.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060-\u2069\ufeff"
    "\ufff9-\ufffb\ud800-\udfff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object) -> str:
    """`str(value)` with every control and invisible formatting character shown as an escape.

    Visible text, accents and non-Latin scripts pass unchanged; only what a terminal would act
    on or a reader could not see becomes `\\x1b`, `\\u202e`, `\\n` and so on.
    """
    return _UNSAFE.sub(_escape, "" if value is None else str(value))


def printable_json(value: Any) -> str:
    """`value` as indented JSON, UTF-8 kept readable, with every character `printable` would
    escape written as a JSON escape (`\\u0085`, `\\u202e`): the same document, safe on a terminal.
    (Outside strings there is only the indentation's newlines, kept; inside them json.dumps has
    escaped C0 already, and an escape means the same as the character.)"""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    return _UNSAFE.sub(lambda m: m.group() if m.group() == "\n" else f"\\u{ord(m.group()):04x}", text)
