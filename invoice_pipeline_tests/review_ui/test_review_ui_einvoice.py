"""The review page and `show` with an e-invoice's own rules and its page (issue 55): a page that
disagrees with its XML is shown side by side with the box where the page's value was read, and a
rule set's warnings are shown (they hold nothing)."""

from __future__ import annotations

import html
from dataclasses import replace

from invoice_pipeline.cli.status import field_lines
from invoice_pipeline.samples.render import invoice_pdf
from invoice_pipeline_tests.engine.review.helpers import process_documents, render, sample
from invoice_pipeline_tests.review_ui.conftest import Client, ReviewServer
from pipeline_support.einvoice_mutations import PAGE_DISAGREEMENTS, changed, with_payee_iban, with_xml

IBAN = "DE89370400440532013000"


def test_the_page_and_its_xml_side_by_side_and_the_warnings(review_server: ReviewServer) -> None:
    inv = replace(sample("INV-7100"), payee_iban=IBAN)
    xml = with_payee_iban(render(inv, "cii"), IBAN)
    (held,) = process_documents(
        review_server.database_url,
        review_server.store,
        "acme",
        [(with_xml(invoice_pdf(inv), changed(xml, PAGE_DISAGREEMENTS[0])), "renumbered.pdf")],
    )
    status, page = Client(review_server.base_url).get(f"/invoice/{held}")
    assert status == 200
    text = html.unescape(page)
    # The table: the field, the XML's value, the page's, and where on the page it was read.
    assert "<td>invoice_number</td><td>INV-71007</td><td>INV-7100</td><td>page 1, box (" in text
    # The box drawn on the page image, labelled as the page's reading.
    assert "the page prints invoice_number INV-7100; the XML says INV-71007" in text
    # The CII sample has an empty element: PEPPOL-EN16931-R008, shown as a warning.
    assert "E-invoice rule warnings" in text and "PEPPOL-EN16931-R008" in text

    fields = review_server.store.documents.load_fields(held)
    assert fields is not None
    lines = field_lines(fields.to_json())
    assert any(
        line.startswith("e-invoice rules: Factur-X EN16931 ") and "0 fatal, 1 warning(s)" in line
        for line in lines
    )
    assert "page disagrees: invoice_number: XML 'INV-71007', page 'INV-7100' (page 1, box (" in "\n".join(
        lines
    )
