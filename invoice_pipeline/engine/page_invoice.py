"""A Factur-X/ZUGFeRD PDF whose page is the invoice and whose XML is evidence (issue 55).

Under the German rules an org can receive under (`ReviewPolicy.einvoice_country`), a MINIMUM or
BASIC WL document carries no invoice lines and is no e-invoice: the invoice is what its page
prints (`domain.review.page_is_the_invoice`). Such a PDF is read by the page reader exactly as a
PDF without XML is (in the same sandbox, with all its fail-closed rules: amounts confirmed by the
page's own arithmetic, labels, the vendor's layouts, the payment decision), and its XML is kept as
evidence: its check (profile, findings) stays with the invoice, and a key field the XML states
differently from the page holds it `page_disagrees_with_xml` (`page_witness.compare_evidence`).

A page without a text layer is not OCRed here (the original is not at hand in this stage, and
the XML said what it is only after the text was extracted): its fields stay the XML's and it is
held `not_an_einvoice` for a person, as is one on which the page reader finds no invoice.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from invoice_pipeline.documents import BadDocument, ExtractedText
from invoice_pipeline.documents.page_witness import compare_evidence
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.review import ReviewPolicy, page_is_the_invoice

# How the page of a hybrid PDF is stored as a text PDF's (`documents.pdf.text_layer`).
TEXT_LAYER_METHOD = "pdf-text-layer"


class FieldReader(Protocol):
    def read_fields(self, extracted: ExtractedText) -> InvoiceFields: ...


def page_of(text: ExtractedText) -> ExtractedText | None:
    """A hybrid PDF's visible page as a PDF without XML is stored (its text layer and boxes);
    None: not a hybrid PDF, or its page has no text layer."""
    if text.format != "facturx-pdf" or not text.text.replace("\f", "").strip():
        return None
    return ExtractedText("pdf", text.text, text.page_boxes, TEXT_LAYER_METHOD, text.page_count)


def may_read_the_page(text: ExtractedText, policy: ReviewPolicy) -> bool:
    """Whether this document might be read from its page (before its profile is known): the
    chunk's vendor lookup includes its page then."""
    return policy.einvoice_country is not None and page_of(text) is not None


def read_invoice(
    reader: FieldReader, text: ExtractedText, policy: ReviewPolicy
) -> tuple[ExtractedText, InvoiceFields]:
    """The document's fields and the text they were read from: its page, when the page is the
    invoice and has a text layer the page reader finds one on; else as the document declares."""
    fields = reader.read_fields(text)
    page = page_of(text)
    if page is None or not page_is_the_invoice(fields, policy):
        return text, fields
    try:
        page_fields = reader.read_fields(page)
    except BadDocument:
        # No invoice on the page: the XML's fields, held not_an_einvoice for a person.
        return text, fields
    return page, replace(
        page_fields,
        einvoice_check=fields.einvoice_check,
        page_disagreements=compare_evidence(page_fields, fields, page.text),
    )
