from __future__ import annotations

import json
from pathlib import Path

from invoice_pipeline.documents import BadDocument, extract_fields, extract_text
from invoice_pipeline.domain.identity import OrgProfile, Vendor
from invoice_pipeline.domain.matching import MatchCandidate, find_match
from invoice_pipeline.domain.payment import PaymentFacts, payment_reasons
from invoice_pipeline.domain.review import SUSPECTED_DUPLICATE, ReviewPolicy
from invoice_pipeline.domain.validation import validate_fields
from invoice_pipeline.engine.vendors import read_vendor_csv
from invoice_pipeline.samples import MANIFEST_NAME, generate_samples


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    a = generate_samples(tmp_path / "a", count=6, seed=3, bad=False)
    b = generate_samples(tmp_path / "b", count=6, seed=3, bad=False)
    assert a.to_json() == b.to_json()
    for fa, fb in zip(a.files, b.files, strict=True):
        if fa.format != "facturx-pdf":  # factur-x stamps the current time into its XMP metadata
            assert fa.path.read_bytes() == fb.path.read_bytes(), fa.name
    c = generate_samples(tmp_path / "c", count=6, seed=4, bad=False)
    assert a.to_json() != c.to_json()


def test_manifest_written(tmp_path: Path) -> None:
    s = generate_samples(tmp_path, count=5, seed=0)
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert [f["name"] for f in manifest["files"]] == [f.name for f in s.files]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != MANIFEST_NAME) == [f.name for f in s.files]


def test_duplicates_found_exactly_as_declared(tmp_path: Path) -> None:
    """Run the whole pure pipeline in arrival order; every duplicate decision must match the manifest."""
    s = generate_samples(tmp_path, count=12, seed=5)
    # The org's vendor master, as the samples list it (what `make demo` imports): who is paid is
    # decided against it, as the approve stage does.
    registry = [
        Vendor(n, "org-demo", row.name, row.default_currency, row.identifiers)
        for n, row in enumerate(read_vendor_csv(s.vendor_master_csv()), start=1)
    ]
    accepted: list[MatchCandidate] = []
    for f in s.files:
        try:
            fields = extract_fields(extract_text(f.path.read_bytes(), f.name))
        except BadDocument:
            assert f.fails_at == "extract", f.name
            continue
        if validate_fields(fields):
            assert f.fails_at == "validate", f.name
            continue
        # Business exceptions are valid documents: held for a person, never quarantined.
        facts = PaymentFacts(
            "org-demo", fields, tuple(registry), OrgProfile("org-demo"), ReviewPolicy(), "original"
        )
        held = [r.code for r in payment_reasons(facts)]
        # A suspected duplicate is held by the duplicate decision below, not by these reasons.
        assert held == ([f.review] if f.review and f.review != SUSPECTED_DUPLICATE else []), (f.name, held)
        candidate = MatchCandidate.from_fields(f.name, "org-demo", fields)
        match = find_match(candidate, accepted)
        assert (match.original_id if match else None) == f.duplicate_of, (f.name, match)
        if f.review == SUSPECTED_DUPLICATE:
            assert match is not None and not match.exact, (f.name, match)
        if match is None:
            accepted.append(candidate)
    assert any(f.duplicate_of for f in s.files)
    assert {f.quarantine_code for f in s.files} >= {
        "empty_file",
        "corrupt_pdf",
        "xml_entities_forbidden",
        "unsupported_xml",
        "json_schema",
        "unknown_currency",
        "bad_date",
        "bad_encoding",
        "encrypted_pdf",
        "not_an_invoice",
    }
