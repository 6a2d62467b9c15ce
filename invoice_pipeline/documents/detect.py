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

# Longest first: the UTF-32LE mark begins with the UTF-16LE one.
_BOMS = (b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


def bomless_wide_encoding(content: bytes) -> str | None:
    """UTF-16/UTF-32 without a byte-order mark, told by where the first character's NULs are.

    The detection RFC 4627 section 3 and XML 1.0 Appendix F describe; None for anything else.
    """
    if any(content.startswith(bom) for bom in _BOMS) or len(content) < 4:
        return None
    b = content[:4]
    if b[0] == b[1] == b[2] == 0 and b[3]:
        return "UTF-32BE"
    if b[0] and b[1] == b[2] == b[3] == 0:
        return "UTF-32LE"
    if b[0] == 0 and b[1] and b[2] == 0:
        return "UTF-16BE"
    if b[0] and b[1] == 0 and b[3] == 0:
        return "UTF-16LE"
    return None


# Scans and photos of invoices, by their magic numbers (PNG, JPEG, TIFF little/big-endian).
_IMAGE_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"II*\x00", b"MM\x00*")


def sniff(content: bytes) -> str:
    """'pdf', 'xml', 'json' or 'image' by content; raises BadDocument for anything else."""
    if content.startswith(_IMAGE_MAGIC):
        return "image"
    wide = bomless_wide_encoding(content)
    if wide is not None:
        first = content[:64].decode(wide.lower(), errors="replace").lstrip(" \t\r\n")
        if first.startswith("<"):
            return "xml"  # XML may declare its encoding; xmlsafe names the problem if it cannot be read
        if first.startswith(("{", "[")):
            raise BadDocument(
                "bad_encoding",
                f"JSON is encoded as {wide} without a byte-order mark; JSON exchanged between systems "
                "must be UTF-8 (RFC 8259): re-export it as UTF-8",
            )
    head = content[:64]
    for bom in _BOMS:
        if head.startswith(bom):
            head = head[len(bom) :]
            break
    if head.startswith(b"<\x00") or head.startswith(b"\x00<") or head.startswith(b"\x00\x00"):
        return "xml"  # UTF-16/32 behind a byte-order mark
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
        "file is neither PDF, XML (UBL/CII), JSON nor a PNG/JPEG/TIFF scan; send the invoice as PDF or as an "
        "e-invoice XML",
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
