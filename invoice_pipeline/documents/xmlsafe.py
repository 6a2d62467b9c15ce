"""Parsing untrusted XML without ever expanding an entity.

Invoices arrive from outside; an XML parser with default settings is an attack surface (XXE file
disclosure, SSRF via external DTDs, billion-laughs memory exhaustion). EN 16931 invoices never need
a DOCTYPE, so any entity declaration is refused outright instead of being expanded "safely".
"""

from __future__ import annotations

import re

from lxml import etree

from .errors import BadDocument

# Screened before parsing: declarations are rejected before libxml2 ever sees them, whatever
# the parser settings. The tree check below catches encodings this byte scan cannot see.
_ENTITY_DECL = re.compile(rb"<!\s*ENTITY", re.IGNORECASE)
_ENTITY_DECL_TEXT = re.compile(r"<!\s*ENTITY", re.IGNORECASE)

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
        msg = str(exc)
        lowered = msg.lower()
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
