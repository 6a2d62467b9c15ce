"""Normalisation that decides which documents share a business key.

Both functions are idempotent (normalising an output again returns it unchanged), so keys
computed at different times, or from already-normalised values, always agree.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from .doctypes import duplicate_class
from .fields import InvoiceFields
from .keys import BlockingKey, BusinessKey

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
# Legal forms spelt out, folded as `_name` folds them; replaced by their abbreviation first.
_LEGAL_LONG_FORMS: tuple[tuple[str, str], ...] = (
    ("gesellschaft mit beschrankter haftung", "gmbh"),
    ("aktiengesellschaft", "ag"),
    ("kommanditgesellschaft", "kg"),
    ("limited liability company", "llc"),
    ("public limited company", "plc"),
    ("private limited company", "ltd"),
    ("societe anonyme", "sa"),
    ("societe a responsabilite limitee", "sarl"),
    ("besloten vennootschap", "bv"),
    ("naamloze vennootschap", "nv"),
    ("sociedad anonima", "sa"),
    ("sociedad limitada", "sl"),
    ("societa per azioni", "spa"),
    ("societa a responsabilita limitata", "srl"),
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


# Letters that OCR and hand-typing confuse with digits.
OCR_CONFUSABLES: dict[str, str] = {"O": "0", "Q": "0", "I": "1", "L": "1", "B": "8", "S": "5", "Z": "2"}


_DIGITS_OCR_MAKES_OF_LETTERS = frozenset(OCR_CONFUSABLES.values())
# A word a scan began with a digit: "1NV" for "INV" (a confusable digit, then two or more
# letters of which at least two no confusion explains).
_DIGIT_STARTED_WORD = re.compile(r"^[0-9][A-Z]{2,}")


def _strip_word(token: str) -> tuple[str, bool]:
    """(the token without a leading word a scan began with a digit, whether one was removed)."""
    m = _DIGIT_STARTED_WORD.match(token)
    if m and token[0] in _DIGITS_OCR_MAKES_OF_LETTERS:
        if sum(ch not in OCR_CONFUSABLES for ch in m.group()[1:]) >= 2:
            return token[m.end() :], True
    return token, False


def _lead_as_digits(lead: str, preceded: bool) -> str:
    """Digits hidden in the letters before a token's first digit: "" when they are a prefix.

    Up to two confusable letters right before the digits are digits when something precedes
    them ("INV-B7019", "INVB7019"); a token that starts the number keeps its leading letter as
    a series ("B7019"), unless it starts like a zero ("OS7224" for "057224").
    """
    tail = ""
    for ch in reversed(lead):
        if ch not in OCR_CONFUSABLES or len(tail) == 2:
            break
        tail = ch + tail
    if not tail:
        return ""
    if preceded or len(tail) < len(lead) or OCR_CONFUSABLES[tail[0]] == "0":
        return "".join(OCR_CONFUSABLES[ch] for ch in tail)
    return ""


def number_skeleton(raw: str) -> str:
    """The digits an invoice number is made of, read the way a person would read a bad scan.

    "INV-1O01", "1001", "inv 01001", "1NV-1001", "INV1001" and "RE/1001" all give "1001";
    "2020-1" gives "2020-1". Words (tokens without digits, or a word a scan began with a
    digit: "1NV") are prefixes and dropped. Inside a token, a run made only of confusable
    letters (O/Q->0, I/L->1, B->8, S->5, Z->2) becomes digits, and so do up to two confusable
    letters right before its first digit (see `_lead_as_digits`); other letters separate digit
    groups. Groups lose leading zeros and are joined with "-". "" when there is no digit.
    """
    groups: list[str] = []
    preceded = False
    for token in re.findall(r"[^\W_]+", _fold(raw).upper()):
        body, had_word = _strip_word(token)
        first_digit = next((i for i, ch in enumerate(body) if ch.isdigit()), None)
        if first_digit is None:
            preceded = True
            continue
        current = _lead_as_digits(body[:first_digit], preceded or had_word)
        for run in re.findall(r"\d+|\D+", body[first_digit:]):
            if run.isdigit():
                current += run
            elif all(ch in OCR_CONFUSABLES for ch in run):
                current += "".join(OCR_CONFUSABLES[ch] for ch in run)
            else:
                groups.append(current)
                current = ""
        groups.append(current)
        preceded = True
    return "-".join(g.lstrip("0") or "0" for g in groups if g)


# VAT ids are written with or without their country prefix ("DE123456789", "123 456 789"), and
# Norway's and Switzerland's with a trailing tax word. Identity is the national part alone: two
# sellers whose national numbers agree and whose prefixes differ are taken to be one seller.
# (Greece's prefix is EL; GR is the ISO code people also write. EU is the non-Union OSS scheme.)
VAT_COUNTRY_PREFIXES: frozenset[str] = frozenset(
    """
    AT BE BG CY CZ DE DK EE EL GR ES FI FR GB HR HU IE IT LT LU LV MT NL PL PT RO SE SI SK XI
    CH CHE NO EU
    """.split()
)
_VAT_SUFFIXES = ("MWST", "TVA", "IVA", "MVA")


def _vat(vat_id: str) -> str:
    """Upper-case letters and digits only, one country prefix and trailing tax word removed."""
    compact = re.sub(r"[^0-9A-Z]", "", _fold(vat_id).upper())
    # Switzerland's UID is written "CHE-123.456.789"; everyone else's prefix has two letters.
    prefix = 3 if compact.startswith("CHE") else 2
    if compact[:prefix] in VAT_COUNTRY_PREFIXES and any(ch.isdigit() for ch in compact[prefix:]):
        compact = compact[prefix:]
    for suffix in _VAT_SUFFIXES:
        if compact.endswith(suffix) and any(ch.isdigit() for ch in compact[: -len(suffix)]):
            compact = compact[: -len(suffix)]
            break
    return compact


def normalize_vat_id(vat_id: str | None) -> str | None:
    """ "DE 123.456.789", "de123456789", "123456789" -> "123456789"; None when nothing is left."""
    if not vat_id:
        return None
    m = _PREFIX.match(vat_id)
    return _settle(_vat, _vat(m.group(2) if m else vat_id)) or None


def _name(name: str) -> str:
    folded = _fold(name).replace("&", " and ")
    # Dotted abbreviations collapse into one token ("B.V." -> "bv", "S.p.A." -> "spa").
    folded = re.sub(r"[.'’`´]", "", folded)
    tokens = re.findall(r"[^\W_]+", folded)
    text = " ".join(tokens)
    for long_form, short in _LEGAL_LONG_FORMS:
        text = re.sub(rf"\b{long_form}\b", short, text)
    tokens = text.split()
    while len(tokens) > 1 and tokens[-1] in LEGAL_SUFFIXES:
        tokens.pop()
    # "Acme Gmbh & Co KG" leaves a dangling "and" once the suffixes are gone.
    while len(tokens) > 1 and tokens[-1] == "and":
        tokens.pop()
        while len(tokens) > 1 and tokens[-1] in LEGAL_SUFFIXES:
            tokens.pop()
    return " ".join(tokens)


def _settle(fn: Callable[[str], str], value: str) -> str:
    for _ in range(3):
        again = fn(value)
        if again == value:
            break
        value = again
    return value


def vendor_key_or_none(name: str | None, vat_id: str | None = None) -> str | None:
    """`normalize_vendor`, or None when neither the name nor the VAT id is usable."""
    try:
        return normalize_vendor(name, vat_id)
    except ValueError:
        return None


def seller_vendor_keys(fields: InvoiceFields) -> list[str]:
    """The vendor keys an original of this seller may be stored under: by its VAT id (or name when
    it has none) and by its name alone (an original whose VAT id was not read)."""
    keys = {
        vendor_key_or_none(fields.seller_name, fields.seller_vat_id),
        vendor_key_or_none(fields.seller_name, None),
    }
    return sorted(k for k in keys if k)


def normalize_vendor(name: str | None, vat_id: str | None = None) -> str:
    """ "vat:DE123456789" when a VAT id is known, else "name:acme"; ValueError when neither is usable."""
    vat = normalize_vat_id(vat_id)
    if vat:
        return f"vat:{vat}"
    if name:
        m = _PREFIX.match(name)
        if m and m.group(1) == "vat":
            vat = normalize_vat_id(m.group(2))
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
        org_id=org_id, vendor=vendor, invoice_number=number, document_type=duplicate_class(fields)
    )


def normalize_currency(currency: str | None) -> str:
    return (currency or "").strip().upper()


def blocking_key(org_id: str, fields: InvoiceFields) -> BlockingKey | None:
    """The coarse key of `domain/keys.py`; None when the gate could pair this invoice with nothing.

    No total is needed: one seller's number is compared whatever the amounts say, and a copy
    that lost its total is held beside its original, never waved through as new.
    """
    skeleton = number_skeleton(fields.invoice_number or "")
    if not skeleton:
        return None
    return BlockingKey(
        org_id=org_id,
        document_type=duplicate_class(fields),
        currency=normalize_currency(fields.currency),
        number_skeleton=skeleton,
    )
