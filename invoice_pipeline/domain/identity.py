"""Who is who on an invoice: the org's own identity, its vendors, and the identifiers that tie
an invoice to one of them. Pure: no database.

An accounts-payable team tells buyer from seller by knowing itself: its legal names, VAT ids,
tax numbers and IBANs are on every invoice it receives, in the buyer's block (and its IBAN on a
direct-debit notice). `OrgProfile` is that knowledge, and `without_own_identity` makes sure the
page reader never takes it for the seller's.

Who is paid is then *confirmed*, not guessed, by the payment decision (domain/payment.py): a
registered vendor of the org must own an identifier the invoice gives in the seller's position (a
VAT id or the IBAN to pay), and the IBAN to pay must be one the vendor is known to have. A name
proves nothing: anyone can print one. Identifiers are compared in the normal forms below
(check digits validated; a look-alike letter makes one invalid), names by their skeleton.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, replace
from functools import cache
from typing import Literal

from stdnum import iban as stdnum_iban
from stdnum import vatin
from stdnum.de import stnr
from stdnum.exceptions import InvalidComponent, InvalidFormat, ValidationError
from stdnum.fr import siren, siret

from .fields import FieldSource, InvoiceFields

IdentifierKind = Literal["name", "vat", "tax", "iban"]
IDENTIFIER_KINDS: tuple[IdentifierKind, ...] = ("name", "vat", "tax", "iban")

VENDOR_UNCONFIRMED = "vendor_unconfirmed"
BANK_DETAILS_CHANGED = "bank_details_changed"

_IBAN_ON_PAGE = re.compile(
    r"(?<![A-Z0-9])([A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,4})?)(?![A-Z0-9])"
)

# Legal-form words, as name_skeleton sees them (case-folded, dots of "G.m.b.H." joined): they
# say how a company is registered, not which one it is, and invoices print them or leave them
# out at will. Kept here, not imported from documents/reading/parties.py: the domain is pure.
LEGAL_FORM_WORDS = frozenset(
    {
        "gmbh", "ag", "kg", "kgaa", "ohg", "ug", "ek", "ev", "eg", "gbr", "mbh", "haftungsbeschrankt",
        "ltd", "limited", "llc", "llp", "lp", "inc", "incorporated", "corp", "corporation", "plc", "co",
        "company", "pty", "sa", "sas", "sasu", "sarl", "eurl", "sca", "snc", "scs", "spa", "srl", "sl",
        "slu", "sapa", "scarl", "bv", "nv", "vof", "cv", "bvba", "sprl", "as", "asa", "aps",
        "ab", "hb", "kb", "oy", "oyj", "ky", "sp", "z", "oo", "zoo", "spzoo", "sro", "kft", "zrt", "nyrt",
        "doo", "dd", "ad", "ood", "eood", "ou", "uab", "sia", "se", "cie", "und", "and", "et",
    }
)  # fmt: skip
# The few forms written before the name ("AB Volvo", "SIA Latvijas Gāze"): only these are
# dropped at the start, so "SA Power Networks" keeps its "SA".
LEADING_LEGAL_FORM_WORDS = frozenset({"ab", "as", "asa", "sia", "uab", "pt"})
# "G.m.b.H.", "e.K.", "S.p.A.": single letters each followed by a dot, read as one word.
_DOTTED_ABBREVIATION = re.compile(r"(?<!\w)(?:\w\.){2,}\w?(?!\w)")


def compact(value: str) -> str:
    """An identifier as letters and digits only, upper case: 'DE 123 456 789' -> 'DE123456789'.
    For display and keys only: it drops a look-alike letter silently, `normalise` refuses it."""
    return re.sub(r"[^0-9A-Z]", "", unicodedata.normalize("NFKC", value).upper())


def _ascii_compact(kind: str, value: str) -> str:
    """`compact`, but ValueError for any character that is neither ASCII nor a space or punctuation:
    a Cyrillic 'Е' in 'DЕ136695976' makes the id invalid instead of another id."""
    nfkc = unicodedata.normalize("NFKC", value)
    foreign = [ch for ch in nfkc if not ch.isascii() and unicodedata.category(ch)[0] not in "ZP"]
    if foreign:
        names = ", ".join(f"{unicodedata.name(ch, hex(ord(ch)))}" for ch in foreign[:3])
        raise ValueError(f"{value!r} is not a valid {kind}: it holds non-ASCII characters ({names})")
    return re.sub(r"[^0-9A-Z]", "", nfkc.upper())


def _vat_id(value: str) -> str:
    """The compact VAT id; ValueError for a look-alike letter or check digits that fail."""
    ascii_id = _ascii_compact("VAT id", value)
    if not ascii_id:
        raise ValueError("an empty VAT id is no identifier")
    try:
        return vatin.validate(ascii_id).upper()
    except (InvalidComponent, InvalidFormat) as exc:
        if not _stdnum_knows(ascii_id[:2]):
            return ascii_id  # a country stdnum has no rules for: the ASCII form, unchecked
        raise ValueError(f"{value!r} is not a valid VAT id ({exc})") from exc
    except ValidationError as exc:
        raise ValueError(f"{value!r} is not a valid VAT id ({exc})") from exc


def _stdnum_knows(prefix: str) -> bool:
    try:
        vatin.compact(prefix + "0")
    except (InvalidComponent, InvalidFormat):
        return False
    except ValidationError:
        return True
    return True


def vat_valid(value: str) -> bool:
    """Whether a VAT id is ASCII and passes its country's check digits (where stdnum knows them)."""
    try:
        _vat_id(value)
    except ValueError:
        return False
    return True


def iban_valid(value: str) -> bool:
    """ISO 13616 (mod 97) and the country's length and format, by python-stdnum."""
    try:
        _iban(value)
    except ValueError:
        return False
    return True


def _iban(value: str) -> str:
    ascii_iban = _ascii_compact("IBAN", value)
    try:
        return str(stdnum_iban.validate(ascii_iban))
    except ValidationError as exc:
        raise ValueError(f"{value!r} is not a valid IBAN ({exc})") from exc


def _tax_number(value: str) -> str:
    """Tax numbers have too many national formats to insist on one: ASCII and compact. A French
    SIREN/SIRET or German Steuernummer that stdnum recognises is kept in its compact form."""
    ascii_number = _ascii_compact("tax number", value)
    for module in (siren, siret, stnr):
        if module.is_valid(ascii_number):
            return str(module.compact(ascii_number)).upper()
    return ascii_number


def norm_name(value: str) -> str:
    """A name for display-level comparison: case, accents, punctuation and spacing do not matter.
    Identity is compared by `name_skeleton`, which also folds look-alike letters and legal forms."""
    folded = unicodedata.normalize("NFKD", value).casefold()
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return " ".join(re.sub(r"[^\w]+", " ", folded).split())


@cache
def _confusable_prototypes() -> dict[str, str]:
    """Each non-ASCII character Unicode TR39 (confusables.txt) calls a look-alike of one ASCII
    letter or digit, mapped to it: Cyrillic 'А' and Greek 'Α' to 'A', Cyrillic 'р' to 'p'.

    A capital look-alike of 'I' (Cyrillic 'І', Greek 'Ι') maps to 'I' rather than TR39's 'l':
    the skeleton is case-folded, and 'I' folds to the 'i' a Latin capital I becomes."""
    from confusable_homoglyphs.utils import load  # the data file: ~1 MB, read once, when needed

    table: dict[str, str] = {}
    for char, homoglyphs in load("confusables.json").items():
        if len(char) != 1 or char.isascii():
            continue
        targets = [h["c"] for h in homoglyphs if len(h["c"]) == 1 and h["c"].isascii() and h["c"].isalnum()]
        if not targets:
            continue
        target = sorted(targets, key=lambda t: (not t.isalpha(), t))[0]
        table[char] = "I" if target == "l" and char.isupper() else target
    return table


def _unconfuse(text: str) -> str:
    table = _confusable_prototypes()
    return "".join(table.get(ch, ch) for ch in text)


def _fold(text: str) -> str:
    """Look-alikes to ASCII, case folded, accents dropped."""
    folded = unicodedata.normalize("NFKD", _unconfuse(text).casefold())
    # Once more: a letter folded or stripped of its accent can itself be a look-alike ('Ё' -> 'е').
    return _unconfuse("".join(ch for ch in folded if not unicodedata.combining(ch))).casefold()


def name_skeleton(value: str) -> str:
    """A name as compared for identity: 'Acme GmbH', 'ACME', 'Αcme gmbh' (Greek Alpha) and
    'Acmé G.m.b.H.' are one name, 'Acme Logistics' another.

    Unicode TR39 look-alikes (Greek, Cyrillic, fullwidth via NFKC) become their Latin letters,
    then case, accents, punctuation and spacing are folded away, and legal-form words at the end
    are dropped ("Acme GmbH & Co. KG"), and the few written first ("AB Volvo"). A name of legal-form words only keeps
    them, so it does not become empty."""
    folded = _fold(unicodedata.normalize("NFKC", value))
    folded = _DOTTED_ABBREVIATION.sub(lambda m: m.group(0).replace(".", ""), folded)
    words = re.sub(r"[\W_]+", " ", folded).split()
    start, end = 0, len(words)
    while start < end and words[start] in LEADING_LEGAL_FORM_WORDS:
        start += 1
    while end > start and words[end - 1] in LEGAL_FORM_WORDS:
        end -= 1
    return "".join(words[start:end] or words)


def normalise(kind: IdentifierKind, value: str) -> str:
    """The form an identifier is stored and compared in; ValueError for one that cannot be right
    (a look-alike letter in a VAT id, tax number or IBAN; check digits that fail)."""
    if kind == "name":
        out = name_skeleton(value)
    elif kind == "vat":
        out = _vat_id(value)
    elif kind == "iban":
        out = _iban(value)
    elif kind == "tax":
        out = _tax_number(value)
    else:
        raise ValueError(f"{kind!r} is no identifier kind ({', '.join(IDENTIFIER_KINDS)})")
    if not out:
        raise ValueError(f"an empty {kind} is no identifier")
    return out


def ibans_on_page(text: str) -> list[str]:
    """Every valid IBAN the page prints, in page order, once each."""
    found: list[str] = []
    for match in _IBAN_ON_PAGE.finditer(text.upper()):
        iban = compact(match.group(1))
        if iban_valid(iban) and iban not in found:
            found.append(iban)
    return found


# A country prefix and what may follow it in a VAT id as printed ("DE 123 456 789", "FR 40
# 303265045", "ATU12345678", "NL123456789B01"): tried at each word end, longest first.
# A lookahead, so that one candidate never swallows the next ("TVA FR 40 303 265 045").
_VAT_ON_PAGE = re.compile(r"(?<![A-Za-z0-9])(?=([A-Z]{2}[ ]?[0-9A-Z](?:[ .]?[0-9A-Z]){6,13}))")


def vat_ids_on_page(text: str) -> list[str]:
    """Every VAT id the page prints, wherever (compact, in page order, once each), that passes its
    country's check digits: a country python-stdnum has no rules for is not taken from free text,
    where any two capitals and a number would pass."""
    found: list[str] = []
    for match in _VAT_ON_PAGE.finditer(text):
        raw = match.group(1)
        if not _stdnum_knows(raw[:2]):
            continue
        # Word ends inside the match, longest first: "DE123456789 IBAN" stops before "IBAN".
        ends = [i for i in range(len(raw), 7, -1) if i == len(raw) or raw[i] in " ."]
        for end in ends:
            if vat_valid(raw[:end]):
                vat = _vat_id(raw[:end])
                if vat not in found:
                    found.append(vat)
                break
    return found


def identifiers_on_page(text: str) -> list[Identifier]:
    """The valid VAT ids and IBANs a page prints anywhere: what the vendor registry can recognise
    its vendor by (`domain.payment.confirmed_vendor`), whoever the page reader takes for the seller."""
    return [Identifier("vat", v, v) for v in vat_ids_on_page(text)] + [
        Identifier("iban", i, i) for i in ibans_on_page(text)
    ]


@dataclass(frozen=True)
class Identifier:
    kind: IdentifierKind
    value: str  # normalised
    shown: str  # as given


class Identified:
    """Something known by identifiers (an org's own profile, a vendor): does it have this one?"""

    identifiers: tuple[Identifier, ...]

    def has(self, kind: IdentifierKind, value: str | None) -> bool:
        if not value:
            return False
        try:
            wanted = normalise(kind, value)
        except ValueError:
            return False
        return any(i.kind == kind and i.value == wanted for i in self.identifiers)

    def of_kind(self, kind: IdentifierKind) -> list[str]:
        return [i.shown for i in self.identifiers if i.kind == kind]


@dataclass(frozen=True)
class OrgProfile(Identified):
    """An organisation's own identity: it is the buyer on every invoice it receives."""

    org_id: str
    identifiers: tuple[Identifier, ...] = ()


def without_own_identity(fields: InvoiceFields, profile: OrgProfile, page_text: str | None) -> InvoiceFields:
    """Fields in which nothing of the org's own identity stands for the seller's.

    On a page, the org's VAT id or name read as the seller's is dropped (it is the buyer's), and
    the IBAN to pay is the page's first valid IBAN that is not the org's own (a direct-debit
    notice prints the org's account; the others printed are named in the evidence, and only the
    one paid into is checked against the vendor's known accounts). Structured invoices say who is
    who in their data: a seller identity equal to the org's own is kept there, so the payment
    decision sees it and holds the invoice (`own_identity_as_seller`, domain/payment.py) instead
    of paying, or registering as a vendor, whoever else the invoice names.
    """
    changes: dict[str, object] = {}
    sources = dict(fields.sources)

    def drop(name: str, why: str) -> None:
        changes[name] = None
        previous = sources.get(name)
        sources[name] = FieldSource(previous.source if previous else "org profile", 0.0, why)

    if not fields.read_from_page:
        return fields
    if profile.has("vat", fields.seller_vat_id):
        drop(
            "seller_vat_id",
            f"the VAT id read as the seller's ({fields.seller_vat_id}) is the org's own: it is the buyer's",
        )
    if fields.seller_name and profile.has("name", fields.seller_name):
        drop(
            "seller_name",
            f"the name read as the seller's ({fields.seller_name}) is the org's own: the buyer's",
        )
    if page_text is not None:
        read_by = "ocr" if any(s.source.startswith("ocr") for s in fields.sources.values()) else "pdf-text"
        theirs = [iban for iban in ibans_on_page(page_text) if not profile.has("iban", iban)]
        if theirs:
            changes["payee_iban"] = theirs[0]
            also = f"; the page also prints {', '.join(theirs[1:])}" if len(theirs) > 1 else ""
            sources["payee_iban"] = FieldSource(
                f"{read_by}: IBAN printed on the page",
                0.9,
                f"the first valid IBAN that is not the org's own{also}",
            )
        else:
            changes["payee_iban"] = None
            sources["payee_iban"] = FieldSource(
                read_by, 0.0, "no valid IBAN on the page other than the org's own"
            )
    elif profile.has("iban", fields.payee_iban):
        drop("payee_iban", f"the IBAN to pay ({fields.payee_iban}) is the org's own account")
    if not changes:
        return fields
    return replace(fields, **changes, sources=sources)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Vendor(Identified):
    """A vendor the org pays, with what identifies it and where that came from (store/vendors)."""

    vendor_id: int
    org_id: str
    name: str
    default_currency: str | None
    identifiers: tuple[Identifier, ...]
