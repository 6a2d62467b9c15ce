"""Our own JSON invoice format, checked against invoice.schema.json."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..domain.doctypes import is_credit_note_code
from ..domain.fields import FIELD_NAMES, InvoiceFields
from .collect import FieldCollector
from .errors import BadDocument
from .json_schema import DuplicateKey, first_error, json_path, unique_keys
from .values import iso_date, strict_decimal, unparseable

JSON_SCHEMA_PATH = Path(__file__).with_name("invoice.schema.json")
MAX_DEPTH_REASON = "JSON is nested too deeply to be an invoice"


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
        data = json.loads(text, parse_float=Decimal, parse_constant=Decimal, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise BadDocument(
            "malformed_json", f"JSON syntax error at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except DuplicateKey as exc:
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
    error = first_error(data, JSON_SCHEMA_PATH)
    if error is not None:
        where = json_path(error.absolute_path)
        # The message quotes the offending value, which may be megabytes long.
        message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
        raise BadDocument("json_schema", f"JSON does not match invoice.schema.json at {where}: {message}")
    return data


DATE_FIELDS = ("issue_date", "due_date")
AMOUNT_FIELDS = ("net_total", "tax_total", "payable_total")
# Every other field is text (the schema's `text`), a new one included.
TEXT_FIELDS = tuple(n for n in FIELD_NAMES if n not in (*DATE_FIELDS, *AMOUNT_FIELDS, "document_type"))
OPTIONAL_TEXT_FIELDS = ("type_code", "preceding_invoice", "payment_means_code", "mandate_reference")


def fields_from_json(text: str) -> InvoiceFields:
    data = load_invoice_json(text)
    c = FieldCollector(default_reason="not present in the JSON document")
    for name in TEXT_FIELDS:
        value = data.get(name)
        c.set(name, value if value else None, f"$.{name}")
    # Without a document_type, a credit-note type code says it (a stated conflict is held in review).
    implied = "credit_note" if is_credit_note_code(data.get("type_code")) else "invoice"
    c.set("document_type", data.get("document_type") or implied, "$.document_type")
    for name in DATE_FIELDS:
        raw = data.get(name)
        if raw is None:
            continue
        parsed = iso_date(raw)
        if parsed is None:
            c.miss(name, unparseable(f"$.{name}", raw, "date"))
        c.set(name, parsed, f"$.{name}")
    # Optional: the UNTDID 1001 code, the corrected invoice and the payment means, as in the XML.
    for name in OPTIONAL_TEXT_FIELDS:
        c.set(name, data.get(name) or None, f"$.{name}")
    for name in AMOUNT_FIELDS:
        raw = data.get(name)
        if raw is None:
            continue
        amount = raw if isinstance(raw, Decimal) else strict_decimal(str(raw))
        if amount is None:
            c.miss(name, unparseable(f"$.{name}", str(raw), "amount"))
        c.set(name, amount, f"$.{name}")
    return c.build()
