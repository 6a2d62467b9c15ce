"""Deciding what a file is from its bytes; file names lie (or are missing)."""

from __future__ import annotations

from lxml import etree

from .errors import BadDocument
from .xpath import local_name, namespace

UBL_INVOICE_NS = "urn:oasis:names:specification:ubl:schema:xsd:Invoice-2"
UBL_CREDIT_NOTE_NS = "urn:oasis:names:specification:ubl:schema:xsd:CreditNote-2"
CII_NS = "urn:un:unece:uncefact:data:standard:CrossIndustryInvoice:100"
# ZUGFeRD 1.0 predates CII D16B but carries the same information under older names.
ZUGFERD1_NS = "urn:ferd:CrossIndustryDocument:invoice:1p0"

_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


def sniff(content: bytes) -> str:
    """'pdf', 'xml' or 'json' by content; raises BadDocument for anything else."""
    head = content[:64]
    for bom in _BOMS:
        if head.startswith(bom):
            head = head[len(bom) :]
            break
    if head.startswith(b"<\x00") or head.startswith(b"\x00<"):
        return "xml"  # UTF-16 without BOM
    stripped = head.lstrip(b" \t\r\n")
    if stripped.startswith(b"<"):
        return "xml"
    if stripped.startswith(b"{") or stripped.startswith(b"["):
        return "json"
    # PDF readers accept a header anywhere in the first KiB (some mailers prepend junk); checked
    # after XML/JSON so a document merely mentioning "%PDF-" is not taken for a PDF.
    if b"%PDF-" in content[:1024]:
        return "pdf"
    if stripped[:4] in (b"PK\x03\x04",):
        raise BadDocument(
            "unsupported_format", "file is a ZIP archive; unpack it and submit the invoice files individually"
        )
    raise BadDocument(
        "unsupported_format",
        "file is neither PDF, XML (UBL/CII) nor JSON; send the invoice as PDF or as an e-invoice XML",
    )


def classify_xml(root: etree._Element) -> str:
    """'ubl' or 'cii' from the root element; 'unsupported_xml' otherwise."""
    ns, name = namespace(root), local_name(root)
    if (ns, name) in ((UBL_INVOICE_NS, "Invoice"), (UBL_CREDIT_NOTE_NS, "CreditNote")):
        return "ubl"
    if (ns, name) in ((CII_NS, "CrossIndustryInvoice"), (ZUGFERD1_NS, "CrossIndustryDocument")):
        return "cii"
    shown = f"{{{ns}}}{name}" if ns else name
    raise BadDocument(
        "unsupported_xml",
        f"XML root element {shown} is not a UBL 2.1 Invoice/CreditNote or a UN/CEFACT CII invoice; "
        "check that the right file was sent",
    )
