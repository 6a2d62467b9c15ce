"""E-invoices changed to break one named EN 16931 rule, and Factur-X PDFs whose XML says another
thing than their page (issue 55): what the tests and `benchmarks/einvoice_validation.py` feed the
pipeline to see each one held with the rule id or the disagreeing field.

Every change is made on the parsed XML (UBL or CII, found by its root), so it applies to the
project's own samples and to any public e-invoice alike; nothing here names a file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lxml import etree

from invoice_pipeline.documents.detect import CII_NS

_UBL = {
    "cac": "urn:oasis:names:specification:ubl:schema:xsd:CommonAggregateComponents-2",
    "cbc": "urn:oasis:names:specification:ubl:schema:xsd:CommonBasicComponents-2",
}
_CII = {
    "rsm": CII_NS,
    "ram": "urn:un:unece:uncefact:data:standard:ReusableAggregateBusinessInformationEntity:100",
}
_CII_SUM = (
    "rsm:SupplyChainTradeTransaction/ram:ApplicableHeaderTradeSettlement/"
    "ram:SpecifiedTradeSettlementHeaderMonetarySummation"
)
_CII_SETTLEMENT = "rsm:SupplyChainTradeTransaction/ram:ApplicableHeaderTradeSettlement"

# A valid IBAN (check digits pass) that no sample or public file uses: the "changed account".
OTHER_IBAN = "GB33BUKB20201555555555"


class NotApplicable(ValueError):
    """The document has nothing this change could alter (no lines, no IBAN, ...)."""


@dataclass(frozen=True)
class Change:
    """A named change: what it breaks (a rule id, or a field the page must disagree on)."""

    name: str
    expect: str
    apply: Callable[[etree._Element], None]


def _is_cii(root: etree._Element) -> bool:
    return etree.QName(root).namespace == CII_NS


def _first(root: etree._Element, ubl: str, cii: str) -> etree._Element:
    found = root.xpath(cii, namespaces=_CII) if _is_cii(root) else root.xpath(ubl, namespaces=_UBL)
    if not found:
        raise NotApplicable(f"no element at {cii if _is_cii(root) else ubl}")
    element: etree._Element = found[0]
    return element


def _add(element: etree._Element, amount: str) -> None:
    element.text = f"{Decimal((element.text or '0').strip()) + Decimal(amount):.2f}"


def _line_net(root: etree._Element) -> None:
    """BR-CO-10: the sum of the lines no longer equals the invoice's line total."""
    _add(
        _first(
            root,
            "(cac:InvoiceLine|cac:CreditNoteLine)[1]/cbc:LineExtensionAmount",
            "rsm:SupplyChainTradeTransaction/ram:IncludedSupplyChainTradeLineItem[1]/"
            "ram:SpecifiedLineTradeSettlement/ram:SpecifiedTradeSettlementLineMonetarySummation/ram:LineTotalAmount",
        ),
        "1.00",
    )


def _tax_total(root: etree._Element) -> None:
    """BR-CO-14: the invoice's VAT total no longer adds up from its VAT breakdown."""
    _add(
        _first(root, "cac:TaxTotal[cac:TaxSubtotal]/cbc:TaxAmount", f"{_CII_SUM}/ram:TaxTotalAmount[1]"),
        "1.00",
    )


def _grand_total(root: etree._Element) -> None:
    """BR-CO-15: the total with VAT is no longer the total without VAT plus the VAT."""
    _add(
        _first(root, "cac:LegalMonetaryTotal/cbc:TaxInclusiveAmount", f"{_CII_SUM}/ram:GrandTotalAmount"),
        "1.00",
    )


def _currency(root: etree._Element) -> None:
    """BR-CL-04: an invoice currency code that does not exist in ISO 4217."""
    _first(root, "cbc:DocumentCurrencyCode", f"{_CII_SETTLEMENT}/ram:InvoiceCurrencyCode").text = "XQQ"


def _number(root: etree._Element) -> None:
    """The XML carries another invoice number than the page prints."""
    element = _first(root, "cbc:ID", "rsm:ExchangedDocument/ram:ID")
    element.text = f"{(element.text or '').strip()}7"


def _iban(root: etree._Element) -> None:
    """The XML asks to be paid into another account than the page prints."""
    _first(
        root,
        "cac:PaymentMeans/cac:PayeeFinancialAccount/cbc:ID",
        f"{_CII_SETTLEMENT}/ram:SpecifiedTradeSettlementPaymentMeans/ram:PayeePartyCreditorFinancialAccount/ram:IBANID",
    ).text = OTHER_IBAN


RULE_BREAKS: tuple[Change, ...] = (
    Change("line net sum", "BR-CO-10", _line_net),
    Change("VAT total", "BR-CO-14", _tax_total),
    Change("grand total", "BR-CO-15", _grand_total),
    Change("currency code", "BR-CL-04", _currency),
)
PAGE_DISAGREEMENTS: tuple[Change, ...] = (
    Change("invoice number in the XML", "invoice_number", _number),
    Change("IBAN in the XML", "payee_iban", _iban),
)


def changed(xml: bytes, change: Change) -> bytes:
    """The document with one change applied (NotApplicable when it has nothing to change)."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True, remove_blank_text=False)
    root = etree.fromstring(xml, parser)
    change.apply(root)
    return bytes(etree.tostring(root, xml_declaration=True, encoding="UTF-8"))


def with_payee_iban(cii: bytes, iban: str) -> bytes:
    """A CII invoice that asks to be paid into `iban` by SEPA transfer (BG-16), placed where CII
    puts the payment means: after the currency, before the VAT breakdown."""
    root = etree.fromstring(cii, etree.XMLParser(resolve_entities=False, no_network=True))
    currency = _first(root, "cbc:DocumentCurrencyCode", f"{_CII_SETTLEMENT}/ram:InvoiceCurrencyCode")
    ram = _CII["ram"]
    means = etree.Element(f"{{{ram}}}SpecifiedTradeSettlementPaymentMeans")
    etree.SubElement(means, f"{{{ram}}}TypeCode").text = "58"
    account = etree.SubElement(means, f"{{{ram}}}PayeePartyCreditorFinancialAccount")
    etree.SubElement(account, f"{{{ram}}}IBANID").text = iban
    currency.addnext(means)
    return bytes(etree.tostring(root, xml_declaration=True, encoding="UTF-8"))


def with_xml(pdf: bytes, xml: bytes) -> bytes:
    """The PDF with its embedded invoice XML replaced by `xml`, everything else as it was: the page
    unchanged, the attachment's stream rewritten in place (every XML attachment: a hybrid carries
    one). A PDF without one gets `xml` attached as factur-x.xml by the factur-x library."""
    import io

    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(pdf)))
    replaced = 0
    for spec in _file_specs(writer):
        name = str(spec.get("/UF") or spec.get("/F") or "")
        if name.lower().endswith(".xml") and "/EF" in spec:
            stream = spec["/EF"]["/F"].get_object()
            stream.set_data(xml)
            replaced += 1
    if not replaced:
        import facturx

        return bytes(facturx.generate_from_binary(pdf, xml, check_xsd=False))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _file_specs(writer: object) -> list[Any]:
    """Every file specification of the document's EmbeddedFiles name tree (its kids included)."""
    root = writer._root_object  # type: ignore[attr-defined]
    tree = root.get("/Names", {}).get_object().get("/EmbeddedFiles") if "/Names" in root else None
    found: list[Any] = []
    stack = [tree.get_object()] if tree is not None else []
    while stack:
        node = stack.pop()
        names = node.get("/Names")
        if names is not None:
            names = names.get_object()
            found += [names[i + 1].get_object() for i in range(0, len(names) - 1, 2)]
        stack += [kid.get_object() for kid in node.get("/Kids", [])]
    return found
