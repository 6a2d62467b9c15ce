"""One test per class of unusable input: the code is stable and the reason says what to do."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pypdf
import pytest
from fpdf import FPDF
from lxml import etree

from invoice_pipeline.documents import (
    DEFAULT_MAX_BYTES,
    BadDocument,
    ExtractedText,
    extract_fields,
    extract_text,
    ocr,
)
from invoice_pipeline.documents.pdf import text_layer
from invoice_pipeline.domain.validation import validate_fields
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline.samples.render import letter_pdf
from invoice_pipeline_tests.tools import needs_tool
from pipeline_support import hostile_corpus

UBL_HEAD = (
    '<Invoice xmlns="urn:oasis:names:specification:ubl:schema:xsd:Invoice-2" '
    'xmlns:cbc="urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2">'
)


def _bad(content: bytes, code: str) -> BadDocument:
    with pytest.raises(BadDocument) as info:
        extract_fields(extract_text(content, "upload.bin"))
    assert info.value.code == code, info.value.reason
    assert len(info.value.reason) > 20
    return info.value


def _pdf_with_text(lines: list[str]) -> bytes:
    return letter_pdf(lines)


def test_empty_file() -> None:
    _bad(b"", "empty_file")
    _bad(b"  \n\t ", "empty_file")


def test_too_large_is_checked_before_parsing() -> None:
    with pytest.raises(BadDocument) as info:
        extract_text(b"%PDF-1.7" + b"x" * 2000, max_bytes=1000)
    assert info.value.code == "too_large" and "1000" in info.value.reason


def test_truncated_pdf() -> None:
    whole = _pdf_with_text(["Invoice No: 1", "Amount due: 5.00 EUR"])
    reason = _bad(whole[: len(whole) // 2], "corrupt_pdf").reason
    assert "re-send" in reason


def test_garbage_after_pdf_header() -> None:
    _bad(b"%PDF-1.4\n" + bytes(range(256)) * 4 + b"\n%%EOF\n", "corrupt_pdf")


def test_encrypted_pdf() -> None:
    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(_pdf_with_text(["Invoice No: 1"]))))
    writer.encrypt(user_password="pw", owner_password="owner", algorithm="AES-128")
    buf = io.BytesIO()
    writer.write(buf)
    assert "unprotected" in _bad(buf.getvalue(), "encrypted_pdf").reason


def test_owner_password_only_pdf_is_readable() -> None:
    writer = pypdf.PdfWriter(
        clone_from=pypdf.PdfReader(io.BytesIO(_pdf_with_text(["Invoice No: INV-9", "Amount due: 10.00 EUR"])))
    )
    writer.encrypt(user_password="", owner_password="owner", algorithm="AES-128")
    buf = io.BytesIO()
    writer.write(buf)
    fields = extract_fields(extract_text(buf.getvalue()))
    assert fields.invoice_number == "INV-9"


def _blank_pdf() -> bytes:
    pdf = FPDF()
    pdf.add_page()
    pdf.rect(20, 20, 100, 50)
    return bytes(pdf.output())


@needs_tool("OCR engine (rapidocr-onnxruntime)", ocr.available())
def test_pdf_without_text_is_ocred_and_a_blank_one_says_so() -> None:
    # OCR is installed by the project (documents/ocr.py); test_ocr.py reads real scans.
    reason = _bad(_blank_pdf(), "no_text_layer").reason
    assert "blank scan" in reason


def test_pdf_that_is_not_an_invoice() -> None:
    _bad(
        _pdf_with_text(["Dear Sir or Madam,", "please find our brochure attached.", "Regards"]),
        "not_an_invoice",
    )


def test_not_an_invoice_from_stored_text() -> None:
    with pytest.raises(BadDocument) as info:
        extract_fields(ExtractedText("pdf", "Meeting notes\nnothing here", None, "pdf-text-layer", 1))
    assert info.value.code == "not_an_invoice"


def test_unsupported_xml() -> None:
    _bad(b'<?xml version="1.0"?><rss version="2.0"><channel/></rss>', "unsupported_xml")


def test_malformed_xml() -> None:
    _bad((UBL_HEAD + "<cbc:ID>1</cbc:ID>").encode(), "malformed_xml")


def test_invalid_utf8_xml() -> None:
    doc = f'<?xml version="1.0" encoding="UTF-8"?>{UBL_HEAD}<cbc:ID>Caf\xe9</cbc:ID></Invoice>'
    _bad(doc.encode("latin-1"), "bad_encoding")


def test_declared_latin1_xml_is_honoured() -> None:
    doc = (
        f'<?xml version="1.0" encoding="ISO-8859-1"?>{UBL_HEAD}<cbc:ID>Café-1</cbc:ID>'
        "<cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode></Invoice>"
    )
    extracted = extract_text(doc.encode("latin-1"))
    assert extract_fields(extracted).invoice_number == "Café-1"
    assert "Café-1" in extracted.text


def test_invalid_utf8_json() -> None:
    _bad(b'{"invoice_number": "\xff\xfe"}', "bad_encoding")


def test_json_schema_violation_names_the_path() -> None:
    reason = _bad(
        json.dumps({"invoice_number": "A1", "payable_total": "12,50"}).encode(), "json_schema"
    ).reason
    assert "payable_total" in reason


def test_json_array_is_rejected() -> None:
    _bad(b"[1, 2, 3]", "json_schema")


def test_json_syntax_error() -> None:
    _bad(b'{"invoice_number": ', "malformed_json")


def test_unknown_binary_format() -> None:
    _bad(b"\x7fELF\x02\x01\x01\x00\x00", "unsupported_format")


def test_a_truncated_image_is_unreadable() -> None:
    # A PNG signature makes it a scan to OCR (documents/ocr.py); nothing decodable follows.
    _bad(b"\x89PNG\r\n\x1a\n\x00\x00", "unreadable_document")


def test_format_is_detected_by_content_not_extension() -> None:
    doc = json.dumps(
        {"invoice_number": "X-1", "payable_total": "1.00", "currency": "EUR", "seller_name": "A"}
    )
    extracted = extract_text(doc.encode(), "invoice.pdf")
    assert extracted.format == "json"


@pytest.mark.parametrize(
    ("doc", "code"),
    [
        ({"invoice_number": "A1", "seller_name": "S", "currency": "EUR"}, "missing_total"),
        ({"seller_name": "S", "payable_total": "1.00", "currency": "EUR"}, "missing_invoice_number"),
        (
            {"invoice_number": "A1", "seller_name": "S", "payable_total": "5.00", "currency": "XYZ"},
            "unknown_currency",
        ),
        (
            {
                "invoice_number": "A1",
                "seller_name": "S",
                "payable_total": "5",
                "currency": "EUR",
                "issue_date": "2023-02-30",
            },
            "bad_date",
        ),
        (
            {
                "invoice_number": "A1",
                "seller_name": "S",
                "payable_total": "1000000000000.00",
                "currency": "EUR",
            },
            "amount_too_large",
        ),
    ],
)
def test_validation_failures_from_json(doc: dict[str, str], code: str) -> None:
    fields = extract_fields(extract_text(json.dumps(doc).encode()))
    problems = validate_fields(fields)
    assert [p.code for p in problems][:1] == [code]
    assert problems[0].reason


def test_nan_amount_is_bad_amount() -> None:
    content = b'{"invoice_number": "A1", "seller_name": "S", "currency": "EUR", "payable_total": NaN}'
    problems = validate_fields(extract_fields(extract_text(content)))
    assert [p.code for p in problems] == ["bad_amount"]


def test_unparseable_xml_amount_is_bad_amount() -> None:
    doc = (
        f"{UBL_HEAD}<cbc:ID>1</cbc:ID><cbc:DocumentCurrencyCode>EUR</cbc:DocumentCurrencyCode>"
        '<cac:LegalMonetaryTotal xmlns:cac="urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2">'
        "<cbc:PayableAmount>12,5O</cbc:PayableAmount></cac:LegalMonetaryTotal></Invoice>"
    )
    fields = extract_fields(extract_text(doc.encode()))
    assert fields.payable_total is None
    assert "bad_amount" in [p.code for p in validate_fields(fields)]


def test_bad_document_pickles(tmp_path: Path) -> None:
    import pickle

    exc = pickle.loads(pickle.dumps(BadDocument("corrupt_pdf", "re-send it")))
    assert (exc.code, exc.reason) == ("corrupt_pdf", "re-send it")


def test_entity_bomb_is_refused_before_any_parser_sees_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A billion laughs costs nothing because libxml2 never gets it: the byte screen refuses it, in
    UTF-8 and behind a UTF-16 byte-order mark. (How long the refusal takes is a benchmark's goal:
    benchmarks/timing_goals.py.)"""
    doc = next(item.content for item in CORPUS if item.name == "xml_billion_laughs")
    parsed: list[bytes] = []
    real_fromstring = etree.fromstring

    def counted(text: bytes, *args: Any, **kwargs: Any) -> Any:
        parsed.append(text)
        return real_fromstring(text, *args, **kwargs)

    monkeypatch.setattr(etree, "fromstring", counted)
    _bad(doc, "xml_entities_forbidden")
    _bad(doc.decode().encode("utf-16"), "xml_entities_forbidden")
    assert parsed == []
    # The count sees every parse: a plain invoice is parsed.
    extract_text(f'<?xml version="1.0"?>{UBL_HEAD}<cbc:ID>1</cbc:ID></Invoice>'.encode(), "upload.bin")
    assert parsed


# -- documents cannot exhaust a worker (issue 11) ------------------------------------------------

# Tight bounds, so each bomb costs seconds; the classes end too_complex under the defaults too.
TEST_LIMITS = {"parse_cpu_seconds": 2, "parse_memory_mb": 512, "parse_timeout_seconds": 60}
CORPUS = hostile_corpus.build(seed=11)


@pytest.fixture(scope="module")
def reader() -> DocumentReader:
    return DocumentReader(**TEST_LIMITS)  # type: ignore[arg-type]


def test_the_hostile_corpus_covers_at_least_40_classes() -> None:
    names = [item.name for item in CORPUS]
    assert len(names) == len(set(names)) >= 40
    again = hostile_corpus.build.__wrapped__(seed=11)  # past the cache: really generated again
    assert [i.content for i in again] == [i.content for i in CORPUS], "the same seed gives the same bytes"


@pytest.mark.parametrize("item", CORPUS, ids=[item.name for item in CORPUS])
@pytest.mark.slow
def test_every_hostile_class_is_refused_with_its_code_and_an_actionable_reason(
    reader: DocumentReader, item: hostile_corpus.HostileInput
) -> None:
    with pytest.raises(BadDocument) as info:
        reader.read_fields(reader.read_text(item.content, item.filename, DEFAULT_MAX_BYTES))
    assert info.value.code == item.code, info.value.reason
    assert item.says.lower() in info.value.reason.lower()
    assert 20 < len(info.value.reason) <= 2000


def test_text_placed_far_right_is_clamped_to_the_page() -> None:
    # The old layout padded every line to x0 / 3.5 columns: this 1 kB file gave 100 MB of spaces.
    content = hostile_corpus.one_page_pdf(
        hostile_corpus.text_ops([(350_000_000, 700, "Invoice No: FR-1"), (72, 680, "Amount due: 10.00 EUR")])
    )
    extracted = extract_text(content)
    assert len(extracted.text) < 1000
    assert "Invoice No: FR-1" in extracted.text
    assert extract_fields(extracted).invoice_number == "FR-1"


def test_text_over_the_character_cap_is_too_complex() -> None:
    lines = [(72, 800 - 12 * i, f"line {i} " + "x" * 80) for i in range(60)]
    content = hostile_corpus.one_page_pdf(hostile_corpus.text_ops(lines))
    assert len(text_layer(content, max_chars=100_000).text) <= 100_000
    with pytest.raises(BadDocument) as info:
        text_layer(content, max_chars=2_000)
    assert info.value.code == "too_complex" and "2,000 characters" in info.value.reason


def test_a_5000_digit_json_integer_is_bad_input_not_a_crash() -> None:
    # It raised ValueError, which the pipeline retried as transient until needs_attention.
    content = b'{"invoice_number": "A1", "payable_total": ' + b"9" * 5000 + b"}"
    with pytest.raises(BadDocument) as info:
        extract_text(content)
    assert info.value.code == "json_number_too_long"


def test_stored_pdf_text_holds_no_nul() -> None:
    item = hostile_corpus.by_name(seed=11)["pdf_nul_bytes_in_text"]
    raw = pdfplumber_text(item.content)
    assert "\x00" in raw, "the PDF really carries NULs"
    layer = text_layer(item.content)
    assert "\x00" not in layer.text and "\ud800" not in layer.text and "Sir" in layer.text
    assert "\x1b" in layer.text, "other control characters are kept verbatim (escaped on output)"


def test_a_reason_quoting_a_huge_value_is_shortened() -> None:
    assert len(BadDocument("json_schema", "x" * 50_000).reason) == 2000
    assert BadDocument("c", "a\x00b").reason == "a\ufffdb"


def pdfplumber_text(content: bytes) -> str:
    import pdfplumber

    with pdfplumber.open(io.BytesIO(content)) as pdf:
        return "".join(page.extract_text() or "" for page in pdf.pages)
