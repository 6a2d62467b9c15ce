"""Generated invoices in every format: extracted fields equal what the generator wrote."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from invoice_pipeline.documents import BadDocument, ExtractedText, extract_fields, extract_text
from invoice_pipeline.domain.fields import FIELD_NAMES, InvoiceFields
from invoice_pipeline.domain.review import amount_due_unformed_reasons
from invoice_pipeline.domain.validation import validate_fields
from invoice_pipeline.samples import SampleSet, generate_samples


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> SampleSet:
    return generate_samples(tmp_path_factory.mktemp("samples"), count=15, seed=7)


def _diff(want: InvoiceFields, got: InvoiceFields) -> dict[str, tuple[object, object]]:
    out = {}
    for name in FIELD_NAMES:
        a, b = getattr(want, name), getattr(got, name)
        if isinstance(a, Decimal) and isinstance(b, Decimal):
            same = a == b
        else:
            same = a == b
        if not same:
            out[name] = (a, b)
    return out


@pytest.mark.parametrize("fmt", ["ubl", "cii", "json", "pdf", "facturx-pdf"])
def test_roundtrip_per_format(samples: SampleSet, fmt: str) -> None:
    files = [
        f
        for f in samples.files
        if f.format == fmt and f.expected is not None and f.quarantine_code is None and f.fails_at is None
    ]
    assert files, f"generator produced no clean {fmt} sample"
    for f in files:
        extracted = extract_text(f.path.read_bytes(), f.name)
        assert extracted.format == fmt
        assert ExtractedText.from_json(extracted.to_json()) == extracted
        fields = extract_fields(extracted)
        assert f.expected is not None
        assert _diff(f.expected, fields) == {}, f.name
        assert validate_fields(fields) == [], f.name


def test_structured_sources_are_paths_with_full_confidence(samples: SampleSet) -> None:
    f = next(f for f in samples.files if f.format == "ubl" and f.quarantine_code is None)
    fields = extract_fields(extract_text(f.path.read_bytes()))
    src = fields.sources["payable_total"]
    assert src.source.endswith("cac:LegalMonetaryTotal/cbc:PayableAmount") and src.confidence == 1.0


def test_pdf_fields_have_confidence_below_one(samples: SampleSet) -> None:
    f = next(f for f in samples.files if f.format == "pdf" and f.quarantine_code is None)
    fields = extract_fields(extract_text(f.path.read_bytes()))
    for name in ("invoice_number", "payable_total", "seller_name"):
        assert 0 < fields.sources[name].confidence < 1.0


def test_every_sample_meets_its_expected_outcome(samples: SampleSet) -> None:
    for f in samples.files:
        try:
            fields = extract_fields(extract_text(f.path.read_bytes(), f.name))
        except BadDocument as exc:
            assert (f.fails_at, f.quarantine_code) == ("extract", exc.code), f.name
            assert exc.reason
            continue
        problems = validate_fields(fields)
        if f.fails_at == "validate" and f.review is not None:
            # Invalid, but what is missing a person can type: held with its reason, not quarantined.
            assert amount_due_unformed_reasons(fields, problems), (f.name, problems)
            continue
        got = problems[0].code if problems else None
        assert got == f.quarantine_code, (f.name, problems)


def test_hostile_vendor_name_is_kept_verbatim(samples: SampleSet) -> None:
    f = next(f for f in samples.files if "hostile" in f.name)
    fields = extract_fields(extract_text(f.path.read_bytes()))
    assert fields.seller_name == "Robert'); DROP TABLE invoices; --\x07\x1b Supplies"
    assert validate_fields(fields) == []


def test_extracted_text_survives_missing_optional_pdf_fields(tmp_path: Path) -> None:
    text = "ACME Tools GmbH · Street 1 · 12345 Town\nInvoice No: A-77\nAmount due: 12,50 EUR\n"
    fields = extract_fields(ExtractedText("pdf", text, None, "pdf-text-layer", 1))
    assert fields.invoice_number == "A-77" and fields.payable_total == Decimal("12.50")
    assert fields.due_date is None and fields.sources["due_date"].reason
