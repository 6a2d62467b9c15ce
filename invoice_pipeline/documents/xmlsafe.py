"""Parsing untrusted XML without ever expanding an entity.

Invoices arrive from outside; an XML parser with default settings is an attack surface (XXE file
disclosure, SSRF via external DTDs, billion-laughs memory exhaustion). EN 16931 invoices never need
a DOCTYPE, so any entity declaration is refused outright instead of being expanded "safely".
"""

from __future__ import annotations

import re

from lxml import etree

from .detect import bomless_wide_encoding
from .errors import BadDocument, too_complex

# Screened before parsing: declarations are rejected before libxml2 ever sees them, whatever
# the parser settings. The tree check below catches encodings this byte scan cannot see.
_ENTITY_DECL = re.compile(rb"<!\s*ENTITY", re.IGNORECASE)
_ENTITY_DECL_TEXT = re.compile(r"<!\s*ENTITY", re.IGNORECASE)

# libxml2's own bounds without XML_PARSE_HUGE (huge_tree stays off on purpose): a text node or
# attribute over 10 MB, nesting deeper than 256 levels, a name over 50,000 characters.
_LIBXML_LIMITS = ("resource limit exceeded", "excessive depth", "xml_parse_huge", "huge input lookup")

# A UBL invoice line is 20-40 elements: this is ~30,000 lines. Millions of empty elements fit in
# the size limit and cost ~150 bytes of libxml2 memory each, and are never an invoice.
MAX_XML_ELEMENTS = 1_000_000

ENTITY_REASON = (
    "XML declares entities in a DOCTYPE (possible XXE or entity-expansion attack); "
    "e-invoices never need one, ask the sender for a plain UBL/CII export"
)


def _parser() -> etree.XMLParser:
    # A fresh parser per call: lxml parsers keep per-parse state and are not thread-safe.
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=False,
        remove_comments=False,
    )


def _screen_raw(content: bytes) -> None:
    if _ENTITY_DECL.search(content):
        raise BadDocument("xml_entities_forbidden", ENTITY_REASON)
    for bom, codec in ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        if content.startswith(bom):
            head = content.decode(codec, errors="ignore")
            if _ENTITY_DECL_TEXT.search(head):
                raise BadDocument("xml_entities_forbidden", ENTITY_REASON)


def _has_entities(tree: etree._ElementTree) -> bool:
    dtd = tree.docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        return True
    return any(isinstance(node, etree._Entity) for node in tree.iter())


def parse_xml(content: bytes) -> etree._Element:
    """Parse bytes honouring the declared encoding; raise BadDocument on anything unsafe or broken."""
    _screen_raw(content)
    try:
        root = etree.fromstring(content, parser=_parser())
    except etree.XMLSyntaxError as exc:
        if any(entry.type_name == "ERR_NO_MEMORY" for entry in exc.error_log):
            # libxml2 could not allocate: the sandbox's memory bound, not a malformed file.
            raise MemoryError("libxml2: out of memory") from None
        msg = " ".join(str(exc).split())  # libxml2 messages carry line breaks
        lowered = msg.lower()
        if any(limit in lowered for limit in _LIBXML_LIMITS):
            raise too_complex(
                f"XML exceeds a parser safety limit ({msg})",
                "e-invoices never need a text over 10 MB or nesting deeper than 256 levels; "
                "ask the sender for a plain UBL/CII export",
            ) from None
        wide = bomless_wide_encoding(content)
        if wide is not None:
            raise BadDocument(
                "bad_encoding",
                f"XML is encoded as {wide} without a byte-order mark and cannot be read ({msg}); "
                "re-export it as UTF-8",
            ) from None
        if "encoding" in lowered or "utf-8" in lowered or "utf-16" in lowered or "char 0x" in lowered:
            raise BadDocument(
                "bad_encoding",
                f"XML bytes do not match the declared character encoding ({msg}); "
                "re-export the file as UTF-8 with a matching <?xml encoding?> declaration",
            ) from None
        if "entity" in lowered:
            raise BadDocument("xml_entities_forbidden", ENTITY_REASON) from None
        raise BadDocument(
            "malformed_xml", f"XML is not well-formed ({msg}); the file is probably truncated or hand-edited"
        ) from None
    except ValueError as exc:
        raise BadDocument("bad_encoding", f"XML could not be decoded ({exc}); re-export as UTF-8") from None
    tree = root.getroottree()
    if _has_entities(tree):
        raise BadDocument("xml_entities_forbidden", ENTITY_REASON)
    for count, _ in enumerate(root.iter(), 1):
        if count > MAX_XML_ELEMENTS:
            raise too_complex(
                f"XML has more than {MAX_XML_ELEMENTS:,} elements, the per-document limit",
                "an e-invoice has a few thousand; ask the sender for the invoice alone",
            )
    return root


def decoded_text(content: bytes, root: etree._Element) -> str:
    """The document as text in its declared encoding (for people and full-text search)."""
    encoding = root.getroottree().docinfo.encoding or "utf-8"
    try:
        return content.decode(encoding)
    except (LookupError, UnicodeDecodeError):
        return etree.tostring(root, encoding="unicode")


def serialize(root: etree._Element) -> str:
    """Canonical-enough XML text without a declaration, so it can be re-parsed from a str."""
    return etree.tostring(root, encoding="unicode")


def reparse(structured: str) -> etree._Element:
    return parse_xml(structured.encode("utf-8"))
