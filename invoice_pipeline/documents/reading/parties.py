"""Who issued the page: the legal footer names the issuer, and its VAT id is the seller's.

Invoices must print the issuer's legal identity (registration, share capital, court, VAT id),
almost always as a footer at the foot of the page. The buyer's address block can carry a
company name with a legal form and even the buyer's VAT id, so a name or an id read from the
footer outranks one read from an address block near the top.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .page_values import first_date, first_money
from .words import Segment

_I = re.IGNORECASE

# Registration and legal-identity words a legal footer prints (EN, DE, FR, NL, IT, ES).
_LEGAL_MARKER_WORDS = (
    r"capital|SIRET|SIREN|R\.?\s?C\.?\s?S|APE|NAF|HRB|HRA|Amtsgericht|Registergericht|Handelsregister"
    r"|Gesch[äa]ftsf[üu]hr\w*|Sitz\s*der\s*Gesellschaft|registered\s*(?:office|in|number)|company\s*(?:no|number|reg\w*)"
    r"|KvK|Kamer\s*van\s*Koophandel|REA|capitale\s*sociale|Registro\s*Mercantil|CIF|N\.?I\.?F"
)
LEGAL_MARKERS = re.compile(rf"(?<!\w)(?:{_LEGAL_MARKER_WORDS})(?!\w)", _I)
# OCR drops the space after a marker ("SIRET12345682400016", "APE5510Z", "R.C.SParis"): on a scan
# a capital or a digit right after it still ends it, a small letter does not ("Capitaine").
_LEGAL_MARKERS_RUN_TOGETHER = re.compile(rf"(?<!\w)(?i:{_LEGAL_MARKER_WORDS})(?![a-z])")
# A company's legal form: what marks a name as a company's.
LEGAL_FORMS = (
    r"GmbH|AG|KG|OHG|UG|e\.\s?K\.|Ltd\.?|Limited|LLC|L\.L\.C\.|Inc\.?|Corp\.?|Corporation|PLC|plc|LLP"
    r"|SAS|SARL|S\.à\s?r\.l\.|S\.A\.S?\.?|SA|S\.p\.A\.|SpA|S\.r\.l\.|Srl|B\.V\.|BV|N\.V\.|NV|Oy|Oyj|AB|A/S|ApS|AS|ASA"
    r"|S\.L\.|Sp\.\s?z\s?o\.o\.|Pty"
)
LEGAL_FORM = re.compile(rf"(?<!\w)({LEGAL_FORMS})(?!\w)")
# A legal form is a word of its own: OCR that runs it into the name ("MusterGmbH", "AcmeLtd")
# dropped the space before it.
_LEGAL_FORM_RUN_IN = re.compile(rf"(?<=[^\W\d_])(?<![A-Z])({LEGAL_FORMS})$")


def legal_form_apart(name: str) -> str:
    """`name` with a legal form that OCR ran into the word before it set apart again."""
    return _LEGAL_FORM_RUN_IN.sub(r" \1", name)


# Parts of a footer line: "Acme GmbH · Street 1 · 12345 City" or "Name – Street – Tel".
# An e-mail or web address: how to reach a party, never its name.
WEB_ADDRESS = re.compile(r"@|www\.|https?:", re.IGNORECASE)
_PARTS = re.compile(r"\s+[●•·|∙▪]\s+|\s+[-–—]\s+|\s*\|\s*")
# How many lines above or below a legal line its footer block reaches.
_FOOTER_REACH = 3
# Only the foot of a page holds its footer.
_FOOT_SHARE = 0.3


@dataclass(frozen=True)
class FooterName:
    name: str
    line: int
    # The same name printed elsewhere on the page too (the letterhead): the issuer for sure.
    repeated: bool


def name_like(text: str) -> str | None:
    """A company or person name: letters, and no digit but after a legal form (else a street, a
    postcode, a registration)."""
    if ":" in text:  # a label ("COMPTE :") or a labelled value, never a bare name
        return None
    text = re.sub(r"\s+", " ", text).strip(" ,;")
    digit = re.search(r"\d", text)
    # A digit ends a name only after its legal form ("Halden Tools Ltd 15"); before one, the
    # digits are a street or a postcode ("1234 AB Stad" names no company).
    if digit and not named_company(text[: digit.start()]):
        return None
    if (
        sum(ch.isalpha() for ch in text) < 3
        or WEB_ADDRESS.search(text)
        or LEGAL_MARKERS.search(text)
        or len(text) > 60
        or len(text.split()) > 7
    ):
        return None
    return text


def named_company(text: str) -> bool:
    """Words, then a legal form: "Halden Tools Ltd"."""
    form = LEGAL_FORM.search(text)
    return form is not None and sum(ch.isalpha() for ch in text[: form.start()]) >= 3


def footer_lines(lines: Sequence[Sequence[Segment]], *, run_together: bool = False) -> set[int]:
    """The foot-of-page lines that print the issuer's legal identity, with their block.

    The block is the run of printed lines around a legal line (up to `_FOOTER_REACH` either
    way) that no empty line interrupts: the footer is set apart from the body above it.
    `run_together` (OCR output): a marker run into what follows it still counts.
    """
    markers = _LEGAL_MARKERS_RUN_TOGETHER if run_together else LEGAL_MARKERS
    page_starts = [0] + [i + 1 for i, line in enumerate(lines) if any("\f" in s.text for s in line)]
    out: set[int] = set()
    for start, end in zip(page_starts, [*page_starts[1:], len(lines)], strict=True):
        printed = [i for i in range(start, end) if lines[i] and not any("\f" in s.text for s in lines[i])]
        for i in printed[-max(4, int(len(printed) * _FOOT_SHARE)) :]:
            if not any(markers.search(s.text) for s in lines[i]):
                continue
            out.add(i)
            for step in (-1, 1):
                j = i + step
                while start <= j < end and lines[j] and abs(j - i) <= _FOOTER_REACH:
                    out.add(j)
                    j += step
    return out


def footer_seller(lines: Sequence[Sequence[Segment]], footer: set[int]) -> FooterName | None:
    """The name heading the legal footer: the first name-like part of its lines.

    Street lines ("2, rue de la Paix – 75000 Paris") and registration parts are not names. A
    name the page also prints elsewhere (its letterhead) comes first and is marked `repeated`.
    `footer` is `footer_lines(lines)`, which the caller also needs.
    """
    if not footer:
        return None
    elsewhere = {
        _fold(part)
        for i, line in enumerate(lines)
        if i not in footer
        for s in line
        for part in _PARTS.split(s.text)
    }
    names = [
        FooterName(name, i, _fold(name) in elsewhere)
        for i in sorted(footer)
        for k, seg in enumerate(lines[i])
        if not _labels_next(lines[i], k) and (name := name_like(_PARTS.split(seg.text)[0])) is not None
    ]
    return next((n for n in names if n.repeated), names[0] if names else None)


def _labels_next(line: Sequence[Segment], k: int) -> bool:
    """Whether segment `k` is a label whose value stands apart after it: after a colon
    ("Date d'échéance      : 05-08-2022"), or a date or an amount alone, where OCR lost the
    colon ("Date decheance      05-08-2022"). A name is followed by an address, not by a date
    or a sum."""
    if k + 1 >= len(line):
        return False
    value = line[k + 1].text
    if value.startswith(":"):
        return True
    alone = value.strip(" :")
    return len(alone.split()) <= 3 and (first_date(alone) is not None or first_money(alone) is not None)


def _fold(text: str) -> str:
    return re.sub(r"\W+", "", text.casefold())
