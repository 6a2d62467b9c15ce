"""JSON documents from outside, read strictly: a key given twice is refused, and a JSON Schema
kept in the repo says where a document first breaks it. One implementation for the JSON invoice
format (`json_format`) and the vendor layouts export (`reading.layout_export`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import jsonschema


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are unique (json.loads' object_pairs_hook); a repeated key is refused.

    Parsers disagree on `{"payable_total": "10", "payable_total": "10000"}` (Python keeps the
    last, others the first), so one document could say two things to two systems.
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


@lru_cache(maxsize=4)
def validator(schema_path: Path) -> jsonschema.Draft202012Validator:
    # Imported on first use: jsonschema costs 0.1 s to import, which every command and every
    # document sandbox would pay, though most never read a JSON document.
    import jsonschema

    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def json_path(parts: Iterable[Any]) -> str:
    """`$.layouts[0].currency`: where in the document a value stands."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)


def first_error(data: Any, schema_path: Path) -> jsonschema.ValidationError | None:
    """The most relevant way `data` breaks the schema (jsonschema's best_match), or None."""
    from jsonschema.exceptions import best_match

    return best_match(validator(schema_path).iter_errors(data))
