"""Normalisation that decides which documents share a business key.

Both functions are idempotent (normalising an output again returns it unchanged), so keys
computed at different times, or from already-normalised values, always agree.
"""

from __future__ import annotations

import re
import unicodedata

from .fields import InvoiceFields
from .keys import BusinessKey

# Company-form tokens (after dots are removed and text is casefolded) dropped from the END of
# a vendor name: "Acme GmbH" and "ACME" are the same vendor for duplicate detection.
LEGAL_SUFFIXES: frozenset[str] = frozenset(
    """
    inc incorporated llc lc ltd limited co company corp corporation plc llp lp pc pty
    gmbh mbh ag kg kgaa ohg ug gbr ek ev eg se
    bv nv vof cv sa sas sasu sarl eurl sca snc spa srl srls sapa
    sl slu sae ltda eireli
    oy oyj ab as asa aps is hf
    sro as zoo spzoo kft zrt bt doo dd ad ood eood
    """.split()
)
_PREFIX = re.compile(r"^(name|vat):(.*)$", re.DOTALL)


def _fold(text: str) -> str:
    """NFKD, accents removed, casefolded; decimal digits of any script mapped to ASCII."""
    out = []
    for ch in unicodedata.normalize("NFKD", text):
        if unicodedata.combining(ch):
            continue
        digit = unicodedata.decimal(ch, None)
        out.append(str(digit) if digit is not None else ch)
    return unicodedata.normalize("NFKC", "".join(out)).casefold()


def _number_once(raw: str) -> str:
    folded = _fold(raw)
    tokens = re.findall(r"[^\W_]+", folded)
    out = ""
    prev_digit = False
    for token in tokens:
        for run in re.findall(r"\d+|\D+", token):
            is_digit = run.isdigit()
            if is_digit:
                run = run.lstrip("0") or "0"
                # Separators between two digit groups are kept (as "-"): "2020-1" and "20201"
                # are different numbers, while "INV-7" and "INV7" are the same.
                if prev_digit:
                    out += "-"
            out += run
            prev_digit = is_digit
        # Only runs in different tokens need the separator; inside a token runs alternate.
    return out.upper()


def normalize_invoice_number(raw: str) -> str:
    """ "INV-00123", "inv 123", "INV123", "Inv.#123" -> "INV123".

    Case, accents, whitespace and punctuation are dropped and leading zeros of digit runs are
    stripped; "" when nothing alphanumeric is left.
    """
    out = _number_once(raw)
    # Unicode case mappings are not always stable in one pass (e.g. some ligatures), so settle
    # on a fixed point to keep the function idempotent.
    for _ in range(3):
        again = _number_once(out)
        if again == out:
            break
        out = again
    return out


def _vat(vat_id: str) -> str:
    return re.sub(r"[^0-9A-Z]", "", _fold(vat_id).upper())


def _name(name: str) -> str:
    folded = _fold(name).replace("&", " and ")
    # Dotted abbreviations collapse into one token ("B.V." -> "bv", "S.p.A." -> "spa").
    folded = re.sub(r"[.'’`´]", "", folded)
    tokens = re.findall(r"[^\W_]+", folded)
    while len(tokens) > 1 and tokens[-1] in LEGAL_SUFFIXES:
        tokens.pop()
    # "Acme Gmbh & Co KG" leaves a dangling "and" once the suffixes are gone.
    while len(tokens) > 1 and tokens[-1] == "and":
        tokens.pop()
        while len(tokens) > 1 and tokens[-1] in LEGAL_SUFFIXES:
            tokens.pop()
    return " ".join(tokens)


def _settle(fn: object, value: str) -> str:
    assert callable(fn)
    for _ in range(3):
        again = fn(value)
        if again == value:
            break
        value = again
    return value


def normalize_vendor(name: str | None, vat_id: str | None = None) -> str:
    """ "vat:DE123456789" when a VAT id is known, else "name:acme"; ValueError when neither is usable."""
    if vat_id:
        m = _PREFIX.match(vat_id)
        vat = _settle(_vat, _vat(m.group(2) if m else vat_id))
        if vat:
            return f"vat:{vat}"
    if name:
        m = _PREFIX.match(name)
        if m and m.group(1) == "vat":
            vat = _settle(_vat, _vat(m.group(2)))
            if vat:
                return f"vat:{vat}"
        base = m.group(2) if m else name
        norm = _settle(_name, _name(base))
        if norm:
            return f"name:{norm}"
    raise ValueError("vendor needs a name or a VAT id with at least one letter or digit")


def business_key(org_id: str, fields: InvoiceFields) -> BusinessKey:
    if not fields.invoice_number:
        raise ValueError("business key needs an invoice number")
    number = normalize_invoice_number(fields.invoice_number)
    if not number:
        raise ValueError(f"invoice number {fields.invoice_number!r} has no letters or digits")
    vendor = normalize_vendor(fields.seller_name, fields.seller_vat_id)
    return BusinessKey(
        org_id=org_id, vendor=vendor, invoice_number=number, document_type=fields.document_type
    )
