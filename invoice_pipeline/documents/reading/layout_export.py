"""A vendor layouts export as a document from outside: read and checked before anything is stored.

An import (`review layouts import`, the review page's `/layouts/import`) reads a file a person
brings from elsewhere. Before one layout of it is stored, the whole document is parsed with
guards (no NaN, Infinity or number too large to be finite, no repeated key) and checked against
`vendor_layouts.schema.json`: types, sizes, the fields and relations a rule may name, a currency
of three capitals, identifiers as strings, `enabled` a boolean. A refusal names the JSON path and
the reason; nothing is imported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..json_schema import DuplicateKey, first_error, json_path, unique_keys
from .layouts import FORMAT_VERSION

SCHEMA_PATH = Path(__file__).with_name("vendor_layouts.schema.json")
EXPORT_FORMAT = "invoice-pipeline/vendor-layouts"
# What a refusal quotes of the offending value at most (a value may be megabytes long).
MAX_MESSAGE_CHARS = 300


class ExportRefused(ValueError):
    """The document is no importable layouts export; the message says where and why."""


def _constant(name: str) -> float:
    # NaN and Infinity are no JSON; Python reads them. Kept as floats so the refusal can say
    # where they stand (_first_non_finite).
    return float(name)


def _first_non_finite(value: Any, path: str = "$") -> str | None:
    """The JSON path of the first NaN, Infinity or number too large to be finite (1e999 parses
    as infinity): no column or offset of a page is one."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, Mapping):
        items: Any = ((f"{path}.{key}", v) for key, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, inner in items:
        found = _first_non_finite(inner, where)
        if found is not None:
            return found
    return None


def parse_export_text(text: str) -> dict[str, Any]:
    """The export's JSON, parsed with the guards above; ExportRefused saying why it is not one."""
    if not text.strip():
        raise ExportRefused("no export was given")
    try:
        data = json.loads(text, parse_constant=_constant, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise ExportRefused(f"the export is not JSON ({exc})") from None
    except RecursionError:
        raise ExportRefused("the export's JSON is nested too deeply") from None
    except DuplicateKey as exc:
        # Parsers disagree on which of two values counts: the document says two things.
        raise ExportRefused(f"an object has the key {exc.key[:60]!r} more than once") from None
    except ValueError:
        # json refuses integers of more than 4,300 digits (CVE-2020-10735).
        raise ExportRefused("the export has an integer too long to read") from None
    if not isinstance(data, dict):
        raise ExportRefused("not a vendor layout export (the JSON is not an object)")
    odd = _first_non_finite(data)
    if odd is not None:
        raise ExportRefused(f"refused at {odd}: not a finite number (NaN, Infinity and 1e999 are refused)")
    return data


def check_export(data: Mapping[str, Any]) -> None:
    """ExportRefused naming the first JSON path (and why) where `data` is no format_version 1
    export; the format and its version are said first, in words a person recognises."""
    if not isinstance(data, Mapping):
        raise ExportRefused("not a vendor layout export (the JSON is not an object)")
    if data.get("format") != EXPORT_FORMAT:
        raise ExportRefused(f"not a vendor layout export (format must be {EXPORT_FORMAT!r})")
    if data.get("format_version") != FORMAT_VERSION:
        raise ExportRefused(
            f"unsupported format_version {data.get('format_version')!r} (this version reads {FORMAT_VERSION})"
        )
    error = first_error(data, SCHEMA_PATH)
    if error is not None:
        message = error.message
        if len(message) > MAX_MESSAGE_CHARS:
            # The message quotes the value first, which may be megabytes: say the rule it breaks.
            rule = f"{error.validator} {json.dumps(error.validator_value)}"[:MAX_MESSAGE_CHARS]
            message = f"the value breaks the schema's {rule}"
        raise ExportRefused(f"refused at {json_path(error.absolute_path)}: {message} ({SCHEMA_PATH.name})")
    for i, item in enumerate(data["layouts"]):
        for j, (_, col) in enumerate(item["fingerprint"]):
            # The schema says integer; a float such as 4.0 passes it and is no column.
            if isinstance(col, float):
                raise ExportRefused(f"refused at $.layouts[{i}].fingerprint[{j}][1]: {col} is not an integer")
