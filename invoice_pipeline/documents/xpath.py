"""Namespace-tolerant element lookup for the structured invoice syntaxes.

Paths are written with the conventional prefixes (cbc:, cac:, ram:, ...) for readability and
for FieldSource.source, but matched by local name: CII D16B, D22B and ZUGFeRD 1 share element
names under different namespace URIs, and the root namespace has already been checked.
"""

from __future__ import annotations

from functools import lru_cache

from lxml import etree


@lru_cache(maxsize=256)
def _compiled(path: str) -> etree.XPath:
    steps = []
    for step in path.split("/"):
        if step in (".", ""):
            steps.append(step)
            continue
        local = step.split(":", 1)[-1]
        steps.append(f"*[local-name()='{local}']")
    return etree.XPath("/".join(steps))


def find_all(node: etree._Element, path: str) -> list[etree._Element]:
    result = _compiled(path)(node)
    assert isinstance(result, list)
    return [e for e in result if isinstance(e, etree._Element)]


def find(node: etree._Element, path: str) -> etree._Element | None:
    found = find_all(node, path)
    return found[0] if found else None


def text_of(node: etree._Element | None) -> str | None:
    if node is None:
        return None
    text = "".join(node.itertext()).strip()
    return text or None


def local_name(node: etree._Element) -> str:
    return etree.QName(node).localname


def namespace(node: etree._Element) -> str:
    return etree.QName(node).namespace or ""
