"""Our own JSON invoice format, checked against invoice.schema.json."""

from __future__ import annotations

import json
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..domain.fields import InvoiceFields
from .collect import FieldCollector
from .errors import BadDocument
from .values import iso_date, strict_decimal, unparseable

if TYPE_CHECKING:
    import jsonschema

JSON_SCHEMA_PATH = Path(__file__).with_name("invoice.schema.json")
MAX_DEPTH_REASON = "JSON is nested too deeply to be an invoice"


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object whose keys are unique; a repeated key is refused.

    Parsers disagree on `{"payable_total": "10", "payable_total": "10000"}` (Python keeps the
    last, others the first), so one document could say two things to two systems.
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    # Imported on the first JSON document: jsonschema costs 0.1 s to import, which every command
    # and every document sandbox paid, though most never read a JSON invoice.
    import jsonschema

    schema = json.loads(JSON_SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def decode_json_text(content: bytes) -> str:
    try:
        # RFC 8259: JSON exchanged between systems is UTF-8; a BOM is tolerated, nothing else.
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadDocument(
            "bad_encoding",
            f"JSON is not valid UTF-8 (byte {exc.start}); re-export it as UTF-8",
        ) from None


def load_invoice_json(text: str) -> dict[str, Any]:
    try:
        # Decimal keeps amounts exact; NaN/Infinity literals become Decimal too so that
        # validation can reject them with "bad_amount" like any other format.
        data = json.loads(text, parse_float=Decimal, parse_constant=Decimal, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise BadDocument(
            "malformed_json", f"JSON syntax error at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except _DuplicateKey as exc:
        raise BadDocument(
            "json_duplicate_key",
            f"JSON object has the key {exc.key[:60]!r} more than once; systems disagree on which value "
            "counts, so the document is ambiguous: ask the sender to re-export it",
        ) from None
    except RecursionError:
        raise BadDocument("malformed_json", MAX_DEPTH_REASON) from None
    except ValueError:
        # The one other ValueError json.loads raises: Python refuses to convert integers over
        # 4,300 digits (quadratic time, CVE-2020-10735). It is the input, and retrying will not help.
        raise BadDocument(
            "json_number_too_long",
            "JSON has an integer with more than 4,300 digits, which cannot be read; no invoice amount "
            "has that many: check the file or ask the sender to re-export it",
        ) from None
    if not isinstance(data, dict):
        raise BadDocument(
            "json_schema", f"JSON top level must be an object with invoice fields, got {type(data).__name__}"
        )
    from jsonschema.exceptions import best_match

    error = best_match(_validator().iter_errors(data))
    if error is not None:
        where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        # The message quotes the offending value, which may be megabytes long.
        message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
        raise BadDocument("json_schema", f"JSON does not match invoice.schema.json at {where}: {message}")
    return data


def fields_from_json(text: str) -> InvoiceFields:
    data = load_invoice_json(text)
    c = FieldCollector(default_reason="not present in the JSON document")
    for name in (
        "invoice_number",
        "currency",
        "seller_name",
        "seller_vat_id",
        "buyer_name",
        "po_number",
        "buyer_vat_id",
        "payee_iban",
    ):
        value = data.get(name)
        c.set(name, value if value else None, f"$.{name}")
    c.set("document_type", data.get("document_type") or "invoice", "$.document_type")
    for name in ("issue_date", "due_date"):
        raw = data.get(name)
        if raw is None:
            continue
        parsed = iso_date(raw)
        if parsed is None:
            c.miss(name, unparseable(f"$.{name}", raw, "date"))
        c.set(name, parsed, f"$.{name}")
    for name in ("net_total", "tax_total", "payable_total"):
        raw = data.get(name)
        if raw is None:
            continue
        amount = raw if isinstance(raw, Decimal) else strict_decimal(str(raw))
        if amount is None:
            c.miss(name, unparseable(f"$.{name}", str(raw), "amount"))
        c.set(name, amount, f"$.{name}")
    return c.build()
