"""Valid invoices that a person must see: the review queue's samples (invented, like all samples).

EN 16931 allows them, so they are processed and held (`needs_review`), never quarantined:

* an invoice (type 380) whose total is negative: a refund or correction sent as an invoice;
* a French "avoir" (credit) sent as type 380 in the Factur-X BASIC-WL profile, which has no
  invoice lines, only document-level totals, all negative;
* an invoice whose due date is before its issue date.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from decimal import Decimal

from .render import Line, SampleInvoice, cii_xml, invoice_pdf

BASIC_WL = "urn:factur-x.eu:1p0:basicwl"
EN16931 = "urn:cen.eu:en16931:2017"


def refund_lines() -> tuple[Line, ...]:
    """A correction: one negative line, so net, tax and payable are all negative and add up."""
    return (
        Line(
            "Refund: overcharged freight, invoice of last month", Decimal(1), Decimal("-100.00"), Decimal(20)
        ),
    )


def negative_invoice(inv: SampleInvoice) -> SampleInvoice:
    return replace(inv, document_type="invoice", lines=refund_lines())


def due_before_issue(inv: SampleInvoice) -> SampleInvoice:
    return replace(inv, due_date=inv.issue_date - dt.timedelta(days=10))


def avoir_basic_wl_xml(inv: SampleInvoice) -> bytes:
    """The CII of an avoir sent as an invoice (type 380), BASIC-WL: header totals, no lines."""
    inv = negative_invoice(inv)
    xml = cii_xml(inv).decode("utf-8")
    start = xml.index("<ram:IncludedSupplyChainTradeLineItem>")
    end = xml.rindex("</ram:IncludedSupplyChainTradeLineItem>") + len(
        "</ram:IncludedSupplyChainTradeLineItem>"
    )
    xml = xml[:start] + xml[end:]
    xml = xml.replace(EN16931, BASIC_WL, 1)
    # BASIC-WL carries the header only; the note says what the seller meant.
    note = "<ram:IncludedNote><ram:Content>AVOIR - remboursement</ram:Content></ram:IncludedNote>"
    xml = xml.replace("</ram:IssueDateTime>", "</ram:IssueDateTime>" + note, 1)
    return xml.encode("utf-8")


def avoir_basic_wl_pdf(inv: SampleInvoice, lang: str = "fr") -> bytes:
    """The avoir as a Factur-X PDF: a visual page with the BASIC-WL CII embedded."""
    import facturx

    refund = negative_invoice(inv)
    return bytes(
        facturx.generate_from_binary(
            invoice_pdf(refund, lang),
            avoir_basic_wl_xml(inv),
            check_xsd=False,
            pdf_metadata={
                "author": inv.seller.name,
                "keywords": "Factur-X, Avoir",
                "title": f"{inv.seller.name}: Avoir {inv.invoice_number}",
                "subject": f"Avoir {inv.invoice_number}",
            },
        )
    )
