"""E-invoices checked as the law reads them (issue 55), through the real pipeline (the Dagster
batch job, in process, its documents read in the sandbox workers) on a real PostgreSQL:

* an e-invoice changed to break an EN 16931 rule is held `einvoice_invalid` naming the rule, the
  findings recorded with the invoice; the unchanged original is posted;
* a Factur-X PDF whose XML carries another invoice number or IBAN than its page prints is held
  `page_disagrees_with_xml` with both values; the unchanged one is posted;
* a warning holds nothing; a person decides a hold like any other.
"""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from dagster import ExecuteInProcessResult

from invoice_pipeline.domain.review import (
    DEFAULT_POLICY,
    EINVOICE_INVALID,
    NOT_AN_EINVOICE,
    PAGE_DISAGREES_WITH_XML,
)
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.store import InvoiceStore
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.orchestration.resources.document_reader import DocumentReader
from invoice_pipeline.samples.render import SampleInvoice, invoice_pdf
from invoice_pipeline_tests.engine.review.helpers import (
    INSTANCE,
    failure_messages,
    postings,
    process_documents,
    render,
    run_ok,
    sample,
    sql,
    status_and_reasons,
)
from invoice_pipeline_tests.factories import pipeline_resources
from pipeline_support.einvoice_mutations import (
    PAGE_DISAGREEMENTS,
    RULE_BREAKS,
    changed,
    with_payee_iban,
    with_xml,
)
from pipeline_support.einvoices import EInvoice, cii, ubl
from pipeline_support.factories import json_invoice

ALICE = Actor("os-user:alice", "review:alice@test:1")
IBAN = "DE89370400440532013000"


def _sample(number: str) -> SampleInvoice:
    return replace(sample(number), payee_iban=IBAN)


def _run(database_url: str, ids: list[UUID], reader: DocumentReader) -> None:
    _, job = make_jobs(pipeline_resources(database_url, reader=reader))
    result: ExecuteInProcessResult = job.execute_in_process(
        run_config={"ops": {"fan_out": {"config": {"invoice_ids": [str(i) for i in ids]}}}},
        raise_on_error=False,
        instance=INSTANCE,
    )
    assert result.success, failure_messages(result)


def _reasons(database_url: str, invoice_id: UUID) -> list[str]:
    return list(
        sql(database_url, "SELECT review_reasons FROM invoices WHERE id = %s", (invoice_id,))[0][0] or []
    )


def test_an_e_invoice_that_breaks_a_rule_is_held_naming_it(database_url: str, store: InvoiceStore) -> None:
    documents = [(render(_sample("INV-6100"), "ubl"), "original.xml")]
    for index, change in enumerate(RULE_BREAKS[:3]):
        documents.append(
            (changed(render(_sample(f"INV-610{index + 1}"), "ubl"), change), f"{change.expect}.xml")
        )
    original, *broken = process_documents(database_url, store, "acme", documents)

    assert status_and_reasons(database_url, original) == ("processed", [])
    assert postings(database_url, original) == 1
    checks = store.documents.einvoice_findings(original)
    assert len(checks) == 1, "one recorded check, no failed assertion"
    check = checks[0]
    assert (
        check["rule_set"] == "EN16931-UBL"
        and check["rule_id"] is None
        and "factur-x" in check["rule_set_version"]
    )

    for invoice_id, change in zip(broken, RULE_BREAKS, strict=False):
        status, codes = status_and_reasons(database_url, invoice_id)
        # A grand total that does not add up also makes the amount due disagree with it
        # (amount_due_mismatch, the pipeline's own check of BR-CO-16).
        assert status == "needs_review" and codes[0] == EINVOICE_INVALID, (change.expect, codes)
        reason = _reasons(database_url, invoice_id)[0]
        assert reason.startswith(f"{EINVOICE_INVALID}: ") and change.expect in reason
        assert postings(database_url, invoice_id) == 0
        rows = store.documents.einvoice_findings(invoice_id)
        fatal = [r for r in rows if r["flag"] == "fatal"]
        assert change.expect in {r["rule_id"] for r in fatal}
        assert all(
            r["text"] and r["location"].startswith("/") and r["rule_set"] == "EN16931-UBL" for r in fatal
        )

    # Correctable and decidable like any hold: a person who looked approves, and it is posted.
    first = broken[0]
    assert act(store, "approve", first, ALICE).done
    run_ok(database_url, [first])
    assert postings(database_url, first) == 1


def test_a_warning_is_recorded_and_holds_nothing(database_url: str, store: InvoiceStore) -> None:
    """The sample CII has an empty element (PEPPOL-EN16931-R008, a warning of the Factur-X
    EN16931 rules): shown and recorded, never a hold."""
    (invoice_id,) = process_documents(
        database_url, store, "acme", [(with_payee_iban(render(_sample("INV-6200"), "cii"), IBAN), "w.xml")]
    )
    assert status_and_reasons(database_url, invoice_id) == ("processed", [])
    rows = store.documents.einvoice_findings(invoice_id)
    assert [r["flag"] for r in rows] == ["warning"] and rows[0]["rule_id"] == "PEPPOL-EN16931-R008"


def test_a_factur_x_page_that_disagrees_with_its_xml_is_held(database_url: str, store: InvoiceStore) -> None:
    documents = []
    for index, change in enumerate((None, *PAGE_DISAGREEMENTS)):
        inv = _sample(f"INV-630{index}")
        xml = with_payee_iban(render(inv, "cii"), IBAN)
        documents.append(
            (with_xml(invoice_pdf(inv), changed(xml, change) if change else xml), f"{index}.pdf")
        )
    unchanged, *changed_ids = process_documents(database_url, store, "acme", documents)

    assert status_and_reasons(database_url, unchanged) == ("processed", [])
    for invoice_id, change in zip(changed_ids, PAGE_DISAGREEMENTS, strict=True):
        assert status_and_reasons(database_url, invoice_id) == ("needs_review", [PAGE_DISAGREES_WITH_XML])
        reasons = _reasons(database_url, invoice_id)
        assert len(reasons) == 1, reasons
        reason = reasons[0]
        fields = store.documents.load_fields(invoice_id)
        assert fields is not None
        assert len(fields.page_disagreements) == 1, fields.page_disagreements
        disagreement = fields.page_disagreements[0]
        assert disagreement.field == change.expect
        # Both values, side by side: the XML's (what the ledger would record) and the page's.
        assert (
            f"the XML says {disagreement.xml_value!r}, the page prints {disagreement.page_value!r}" in reason
        )
        assert postings(database_url, invoice_id) == 0


def test_with_the_checks_off_the_same_documents_are_posted(database_url: str, store: InvoiceStore) -> None:
    """What the two checks stop: without them, the broken e-invoice and the PDF whose XML names
    another invoice than its page are posted on the XML's word (the issue's report)."""
    inv = _sample("INV-6400")
    broken = changed(render(_sample("INV-6401"), "ubl"), RULE_BREAKS[0])
    renumbered = with_xml(
        invoice_pdf(inv), changed(with_payee_iban(render(inv, "cii"), IBAN), PAGE_DISAGREEMENTS[0])
    )
    ids = [
        # Two orgs: each is its vendor's first e-invoice there (the registry has nothing to say).
        store.documents.store_document(c, org, n).invoice_id
        for c, org, n in ((broken, "acme", "b.xml"), (renumbered, "beta", "n.pdf"))
    ]
    _run(database_url, ids, DocumentReader(validate_einvoices=False, compare_page_with_xml=False))
    for invoice_id in ids:
        assert status_and_reasons(database_url, invoice_id) == ("processed", []), _reasons(
            database_url, invoice_id
        )
        assert postings(database_url, invoice_id) == 1


def test_an_e_invoice_whose_currency_iso_4217_lacks_is_held_naming_br_cl_04(
    database_url: str, store: InvoiceStore
) -> None:
    """BR-CL-04 (the invoice currency is an ISO 4217 code): on CII no rule set of a plain file names
    it (the code list is a Factur-X rule there), so the pipeline's own check does. A structured
    e-invoice in 'XQQ' is held `einvoice_invalid` naming BR-CL-04, never posted: approval waits for
    a correction, a correction must name a real currency, and then a person approves it."""
    ubl_doc = ubl(EInvoice(number="INV-6500", currency="XQQ"))
    cii_doc = cii(EInvoice(number="INV-6501", currency="XQQ"))
    json_doc = json_invoice("INV-6502", currency="XQQ")
    in_ubl, in_cii, in_json = process_documents(
        database_url, store, "acme", [(ubl_doc, "u.xml"), (cii_doc, "c.xml"), (json_doc, "j.json")]
    )
    for invoice_id in (in_ubl, in_cii):
        status, codes = status_and_reasons(database_url, invoice_id)
        assert status == "needs_review" and set(codes) == {EINVOICE_INVALID}, (status, codes)
        reason = _reasons(database_url, invoice_id)[0]
        assert "BR-CL-04" in reason and "XQQ" in reason, reason
        assert postings(database_url, invoice_id) == 0
        document = store.documents.load_document(invoice_id)
        assert document is not None and document.content in (ubl_doc, cii_doc), "the file is kept"
    # A JSON file is no e-invoice: its own data is wrong, quarantined as before (naming the rule).
    state = store.documents.invoice_state(in_json)
    assert state is not None and state.status == "quarantined"

    refused = act(store, "approve", in_cii, ALICE)
    assert not refused.done, "approval waits for the currency to be corrected"
    assert not correct_invoice(store, in_cii, {"currency": "XQR"}, ALICE).done
    corrected = correct_invoice(store, in_cii, {"currency": "EUR"}, ALICE)
    assert corrected.done, corrected.message
    assert act(store, "approve", in_cii, ALICE).done
    run_ok(database_url, [in_cii])
    assert postings(database_url, in_cii) == 1
    assert sql(database_url, "SELECT currency FROM ledger_postings WHERE invoice_id = %s", (in_cii,)) == [
        ("EUR",)
    ]


MINIMUM = "urn:factur-x.eu:1p0:minimum"
BASIC_WL = "urn:zugferd.de:2p0:basicwl"


def test_a_lineless_profile_is_no_e_invoice_for_an_org_under_german_rules(
    database_url: str, store: InvoiceStore
) -> None:
    """An org that receives under the German rules (`review policy --einvoice-country DE`): a German
    seller's MINIMUM or BASIC WL document (no invoice lines) is held `not_an_einvoice`, never posted
    until a person who read its page approves; an EN 16931 document and a French seller's MINIMUM are
    not held for it, and an org under no country's rules holds none of them for it."""
    store.review.set_review_policy("de-org", replace(DEFAULT_POLICY, einvoice_country="DE"), "test")
    documents = [
        (cii(EInvoice(number="INV-6600", guideline=MINIMUM)), "minimum.xml"),
        (cii(EInvoice(number="INV-6601", guideline=BASIC_WL)), "basic-wl.xml"),
        (cii(EInvoice(number="INV-6602")), "en16931.xml"),
        (
            cii(
                EInvoice(
                    number="INV-6603",
                    guideline=MINIMUM,
                    seller="Atelier Lumière SARL",
                    seller_vat="FR40303265045",
                    seller_country="FR",
                    iban="FR1420041010050500013M02606",
                )
            ),
            "french.xml",
        ),
    ]
    minimum, basic_wl, en16931, french = process_documents(database_url, store, "de-org", documents)
    for invoice_id, profile in ((minimum, "MINIMUM"), (basic_wl, "BASIC WL")):
        status, codes = status_and_reasons(database_url, invoice_id)
        assert status == "needs_review" and codes == [NOT_AN_EINVOICE], (status, codes)
        assert f"ZUGFeRD {profile} document carries no invoice lines" in _reasons(database_url, invoice_id)[0]
        assert postings(database_url, invoice_id) == 0
    for invoice_id in (en16931, french):
        assert NOT_AN_EINVOICE not in status_and_reasons(database_url, invoice_id)[1]

    (elsewhere,) = process_documents(
        database_url, store, "acme", [(cii(EInvoice(number="INV-6604", guideline=MINIMUM)), "m.xml")]
    )
    assert status_and_reasons(database_url, elsewhere) == ("processed", [])

    # A person who read the page and found it agrees approves: posted.
    assert act(store, "approve", minimum, ALICE).done
    run_ok(database_url, [minimum])
    assert postings(database_url, minimum) == 1
