"""Who the page names: the seller (sender line, seller block, legal footer, a company name with
a legal form near the top), the buyer (address window or buyer block), the VAT id printed in
the seller's position, and the identifiers the vendor registry may recognise the sender by."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from rapidfuzz import fuzz

from ...domain.identity import Identifier, compact, identifiers_on_page
from .labels import (
    BUYER_CONTEXT,
    BUYER_ROLE,
    COLUMN_SLACK,
    NAME_SUBLABEL,
    SELLER_ROLE,
    SENDER_SEPARATORS,
    VAT_LABELS,
    Hit,
    Seg,
    TextDoc,
    has_letters,
    label_hits,
)
from .ocr_layout import OcrLayout
from .page_values import vat_id_value, vat_value
from .parties import LEGAL_FORM, LEGAL_MARKERS, WEB_ADDRESS, footer_lines, footer_seller, named_company

_I = re.IGNORECASE
_ANY_SUBLABEL = re.compile(r"^[\w .\-/]{2,30}:(?:\s|$)", _I)


def clean_name(text: str) -> str | None:
    text = re.sub(r"\s+", " ", text).strip(" ,;:")
    return text if has_letters(text) else None


def looks_like_label(text: str) -> bool:
    return bool(_ANY_SUBLABEL.match(text)) or bool(re.match(r"^(?:nummer|number|no\.?|nr\.?)\b", text, _I))


def _sender_line(doc: TextDoc, limit: int) -> Seg | None:
    """The one-line return address above a window envelope address ("Acme GmbH · Street 1 · 12345 City")."""
    for seg in doc.segs():
        if seg.line >= limit:
            break
        parts = [p for p in SENDER_SEPARATORS.split(seg.text) if p.strip()]
        if (
            len(parts) >= 3
            and has_letters(parts[0])
            and not WEB_ADDRESS.search(parts[0])  # a contact line ("info@… | +33 … | www…")
            and any(re.search(r"\d", p) for p in parts[1:])
            and not LEGAL_MARKERS.search(seg.text)
        ):
            return seg
    return None


def _role_block_name(doc: TextDoc, role: re.Pattern[str], limit: int) -> Hit[str] | None:
    for seg in doc.segs():
        if seg.line >= limit:
            break
        m = role.match(seg.text)
        if not m:
            continue
        rest = (m.group(1) or "").strip()
        if rest:
            sub = NAME_SUBLABEL.match(rest)
            name = clean_name(sub.group(1) if sub else rest)
            if name and not re.search(r"\d{3,}", name) and not looks_like_label(rest):
                return Hit(name, seg.line, m.group().strip(), 0.7)
            continue  # "Customer: 4711" is a customer number, not a block heading
        candidates = list(doc.below(seg, seg.col, seg.col + max(len(seg.text), 12), depth=6))
        for cand in candidates:
            sub = NAME_SUBLABEL.match(cand.text)
            if not sub:
                continue
            value = sub.group(1) or " ".join(s.text for s in doc.right_of(cand)[:1])
            if name := clean_name(value):
                return Hit(name, cand.line, seg.text, 0.75)
        for cand in candidates:
            if (
                abs(cand.col - seg.col) <= 6
                and not looks_like_label(cand.text)
                and (name := clean_name(cand.text))
            ):
                return Hit(name, cand.line, seg.text, 0.6)
    return None


def _name_below_sender(doc: TextDoc, sender: Seg) -> Hit[str] | None:
    for seg in doc.below(sender, sender.col, sender.col + 10, depth=3):
        if (
            abs(seg.col - sender.col) <= 8
            and not looks_like_label(seg.text)
            and (name := clean_name(seg.text))
        ):
            return Hit(name, seg.line, "address window", 0.7)
    return None


def folded_letters(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.casefold())
    return "".join(ch for ch in folded if ch.isalnum())


def fullest_spelling(doc: TextDoc, hit: Hit[str], layout: OcrLayout | None) -> Hit[str]:
    """The same name where it was read best (OCR only).

    The recogniser drops spaces and misreads letters in small print ("BrightmoorOffice Supplies
    td" in a 7-point return address), while the letterhead prints the same name large. Among the
    places that spell nearly the same letters (the name was already chosen; only its spelling is
    looked for), the line read with the highest confidence wins, then the one with more spaces
    (the recogniser drops spaces, it does not add them).
    """
    target = folded_letters(hit.value)

    def rank(line: int, name: str) -> tuple[float, int]:
        confidence = layout.locate([line])[1] if layout is not None else 0.0
        return (confidence, name.count(" "))

    best, best_rank = hit, rank(hit.line, hit.value)
    for seg in doc.segs():
        for part in SENDER_SEPARATORS.split(seg.text):
            name = clean_name(part)
            if not name or fuzz.ratio(folded_letters(name), target) < 85:
                continue
            if (candidate := rank(seg.line, name)) > best_rank:
                best, best_rank = (
                    Hit(name, seg.line, f"{hit.label}, spelt as on this line", hit.confidence),
                    candidate,
                )
    return best


def parties(doc: TextDoc, top_limit: int, n_lines: int) -> tuple[Hit[str] | None, Hit[str] | None, set[int]]:
    """Who issued the page and who it is addressed to, as the reader places them: the seller's
    name (sender line, seller block, legal footer, a company name with a legal form near the
    top), the buyer's (address window or buyer block), and the legal footer's lines."""
    sender = _sender_line(doc, top_limit)
    seller: Hit[str] | None = None
    if sender is not None:
        first = clean_name(SENDER_SEPARATORS.split(sender.text)[0])
        if first:
            seller = Hit(first, sender.line, "sender line", 0.8)
    seller = seller or _role_block_name(doc, SELLER_ROLE, n_lines)
    buyer = _name_below_sender(doc, sender) if sender is not None else None
    buyer = buyer or _role_block_name(doc, BUYER_ROLE, n_lines)
    footer = footer_lines(doc.lines, run_together=doc.run_together)
    if seller is None and (owner := footer_seller(doc.lines, footer)) is not None:
        seller = Hit(owner.name, owner.line, "legal footer", 0.7 if owner.repeated else 0.55)
    if seller is None:
        for seg in doc.segs():
            if seg.line >= top_limit:
                break
            if (
                # A legal form after a name: "308,500 KG" is a weight, not a company.
                named_company(seg.text)
                and (buyer is None or seg.text != buyer.value)
                and not looks_like_label(seg.text)
            ):
                if company := clean_name(seg.text):
                    seller = Hit(company, seg.line, "company name with legal form", 0.5)
                    break
    return seller, buyer, footer


CUSTOMER_REFERENCE = re.compile(
    r"^(?:kunden|customer|client|debitor|account)\s*-?\s*(?:nummer|nr|no|number|id|n[°º])|^(?:your|ihre|vos|votre)\b",
    _I,
)
_BLOCK_DEPTH = 8


def seller_vat(
    doc: TextDoc, seller: Hit[str] | None, buyer: Hit[str] | None, footer: set[int]
) -> Hit[str] | None:
    """The VAT id the seller owns when the page prints several (the buyer's is often there too).

    Ranked: in the legal footer, or in the seller's block, over one in the buyer's block or
    listed among the customer's references ("Kundennummer", "USt-IdNr." below it); then the
    label's strength; then page order.
    """
    candidates = _vat_candidates(doc, seller, buyer, footer)
    if not candidates:
        return None
    return max(candidates, key=lambda c: (c[0], c[1], -c[2].line))[2]


def identifiers_for_the_registry(text: str) -> list[Identifier]:
    """The VAT ids and IBANs the vendor registry may recognise a page's vendor by (issue 54):
    every valid one the page prints, wherever (`domain.identity.identifiers_on_page`), except a
    VAT id the page places on the buyer's side (in the buyer's block, or among the customer's
    references below "Kundennummer" or "Your reference"): there it names the customer, or a
    vendor the invoice merely refers to, never the sender."""
    found = identifiers_on_page(text)
    if not any(i.kind == "vat" for i in found):
        return found
    doc = TextDoc(text)
    n_lines = len(doc.lines)
    seller, buyer, footer = parties(doc, max(25, n_lines // 2), n_lines)

    def on_sellers_line(hit: Hit[str]) -> bool:
        # "Halvorsen Metaalwerk B.V. - VAT Reg. No.: GB585738843": the seller names itself, as the
        # reader found it or as a company (OCR reads "B.v." as often as "B.V."), even right under
        # the buyer's block, which the block rule would take it for.
        line = " ".join(s.text for s in doc.lines[hit.line])
        before = line[: max(0, line.find(hit.label))]
        return (seller is not None and seller.value in line) or (
            _COMPANY_ANY_CASE.search(before) is not None and (buyer is None or buyer.value not in before)
        )

    buyers = {
        compact(c[2].value)
        for c in _vat_candidates(doc, seller, buyer, footer)
        if c[0] < 0
        and c[2].line not in footer
        and (_among_customer_references(doc, c[2]) or not on_sellers_line(c[2]))
    }
    return [i for i in found if not (i.kind == "vat" and compact(i.value) in buyers)]


# A legal form in any case: what OCR makes of "B.V." or "GmbH" on a seller's own line.
_COMPANY_ANY_CASE = re.compile(LEGAL_FORM.pattern, re.IGNORECASE)


def _vat_candidates(
    doc: TextDoc, seller: Hit[str] | None, buyer: Hit[str] | None, footer: set[int]
) -> list[tuple[int, int, Hit[str]]]:
    """Every labelled VAT id with its place score (footer +2, seller block +1, buyer block or
    customer references -2) and its label's tier."""
    candidates: list[tuple[int, int, Hit[str]]] = []
    for tier, (pattern, value_of) in enumerate(((VAT_LABELS[0], vat_value), (VAT_LABELS[1], vat_id_value))):
        for hit in label_hits(
            doc, pattern, value_of, confidence=(0.85, 0.6)[tier], exclude_before=BUYER_CONTEXT
        ):
            score = 0
            if hit.line in footer:
                score += 2
            if seller is not None and _in_block(doc, seller, hit):
                score += 1
            if (buyer is not None and _in_block(doc, buyer, hit)) or _among_customer_references(doc, hit):
                score -= 2
            candidates.append((score, -tier, hit))
    return candidates


def _label_seg(doc: TextDoc, hit: Hit[Any]) -> Seg:
    return doc.lines[hit.line][hit.segs[0][1]] if hit.segs else doc.lines[hit.line][0]


def _in_block(doc: TextDoc, owner: Hit[str], hit: Hit[str]) -> bool:
    """`hit` sits a few lines under `owner`'s name, in the same column, in one run of lines."""
    if not owner.line <= hit.line <= owner.line + _BLOCK_DEPTH or not doc.lines[owner.line]:
        return False
    name_seg = next((s for s in doc.lines[owner.line] if owner.value in s.text), None)
    if name_seg is None:
        return False
    # The block runs down its column without a gap: a line with nothing there ends it.
    for line in range(owner.line + 1, hit.line):
        if not any(seg.overlaps(name_seg.col, name_seg.end, COLUMN_SLACK) for seg in doc.lines[line]):
            return False
    return _label_seg(doc, hit).overlaps(name_seg.col, name_seg.end, COLUMN_SLACK)


def _among_customer_references(doc: TextDoc, hit: Hit[str]) -> bool:
    label = _label_seg(doc, hit)
    return any(
        seg.overlaps(label.col, label.end, COLUMN_SLACK) and CUSTOMER_REFERENCE.search(seg.text)
        for i in range(max(0, hit.line - 2), hit.line)
        for seg in doc.lines[i]
    )
