"""Hostile XML never leaks local files or expands entities, in any container format."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pypdf
import pytest

from invoice_pipeline.documents import BadDocument, extract_fields, extract_text
from invoice_pipeline.documents.xmlsafe import parse_xml
from invoice_pipeline.samples.render import letter_pdf

SECRET = "TOP-SECRET-7f3a9c"
UBL = (
    '<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" '
    'xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">'
    "<cbc:ID>{body}</cbc:ID><cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode></Invoice>"
)


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret.txt"
    path.write_text(SECRET)
    return path


def _payloads(secret: Path) -> list[bytes]:
    uri = secret.as_uri()
    return [
        f'<?xml version="1.0"?><!DOCTYPE Invoice [<!ENTITY x SYSTEM "{uri}">]>{UBL.format(body="&x;")}'.encode(),
        f'<!DOCTYPE Invoice [<!ENTITY % p SYSTEM "{uri}"> %p;]>{UBL.format(body="1")}'.encode(),
        f'<!DOCTYPE Invoice SYSTEM "{uri}">{UBL.format(body="&x;")}'.encode(),
        f'<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE Invoice [<!ENTITY x SYSTEM "{uri}">]>{UBL.format(body="&x;")}'.encode(
            "utf-16"
        ),
    ]


def _everything_said(content: bytes) -> str:
    try:
        extracted = extract_text(content)
    except BadDocument as exc:
        return f"{exc.code} {exc.reason} {exc}"
    try:
        fields = extract_fields(extracted)
    except BadDocument as exc:
        return f"{extracted.to_json()} {exc.reason}"
    return json.dumps(extracted.to_json()) + json.dumps(fields.to_json(), default=str)


def test_xxe_never_discloses_a_local_file(secret_file: Path) -> None:
    for payload in _payloads(secret_file):
        said = _everything_said(payload)
        assert SECRET not in said
    with pytest.raises(BadDocument) as info:
        extract_text(_payloads(secret_file)[0])
    assert info.value.code == "xml_entities_forbidden"


def test_tree_check_catches_entities_the_byte_scan_cannot_see(secret_file: Path) -> None:
    # UTF-16 without BOM hides "<!ENTITY" from a byte search; the parsed DTD still shows it.
    doc = (
        f'<?xml version="1.0" encoding="UTF-16LE"?><!DOCTYPE Invoice [<!ENTITY x "y">]>{UBL.format(body="1")}'
    )
    with pytest.raises(BadDocument) as info:
        parse_xml(doc.encode("utf-16-le"))
    assert info.value.code in ("xml_entities_forbidden", "bad_encoding")


def test_xxe_inside_a_factur_x_attachment_is_rejected(secret_file: Path) -> None:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(letter_pdf(["Invoice No: 1"]))))
    writer.add_attachment("factur-x.xml", _payloads(secret_file)[0])
    buf = io.BytesIO()
    writer.write(buf)
    said = _everything_said(buf.getvalue())
    assert SECRET not in said
    assert said.startswith("xml_entities_forbidden")


def test_doctype_without_entities_is_allowed() -> None:
    root = parse_xml(f"<!DOCTYPE Invoice>{UBL.format(body='A-1')}".encode())
    assert root.tag.endswith("Invoice")
