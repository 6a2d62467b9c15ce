"""What an e-invoice's own rules and its own page say about it (issue 55). Pure: no database.

* `EinvoiceCheck`: the EN 16931 Schematron (or a Factur-X profile's) run on a structured
  invoice: the rule set's name and version and every failed assertion (`RuleFinding`). A fatal
  one holds the invoice `einvoice_invalid`; warnings are shown and hold nothing.
* `PageDisagreement`: a key field the visible page of a Factur-X/ZUGFeRD PDF prints differently
  from the XML it carries. The XML stays the source of the values; the page is a witness, and a
  field the page does not print is no disagreement.

Both travel inside `InvoiceFields` (so the approval stage, the posting and a person's approval
see the same reasons, as for every hold) and the findings are also recorded, one row each, in
`einvoice_findings` (sql/0023).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# A box on a page in PDF points, origin top-left (as fields.Box, which imports this module).
Box = tuple[float, float, float, float]
Flag = Literal["fatal", "warning"]


@dataclass(frozen=True)
class RuleFinding:
    """One failed assertion of the rule set: its id (BR-CO-10...), flag, text and location (XPath)."""

    rule_id: str
    flag: Flag
    text: str
    location: str

    def to_json(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "flag": self.flag, "text": self.text, "location": self.location}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RuleFinding:
        flag: Flag = "warning" if data.get("flag") == "warning" else "fatal"
        return cls(str(data["rule_id"]), flag, str(data.get("text") or ""), str(data.get("location") or ""))


@dataclass(frozen=True)
class EinvoiceCheck:
    """The outcome of one rule set on one structured invoice. `rule_set` empty: nothing ran, and
    `skipped` says why (no rule set ships for what the document declares)."""

    rule_set: str
    version: str
    profile: str
    findings: tuple[RuleFinding, ...] = ()
    skipped: str = ""

    @property
    def fatal(self) -> tuple[RuleFinding, ...]:
        return tuple(f for f in self.findings if f.flag == "fatal")

    @property
    def warnings(self) -> tuple[RuleFinding, ...]:
        return tuple(f for f in self.findings if f.flag == "warning")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule_set": self.rule_set, "version": self.version, "profile": self.profile}
        if self.findings:
            out["findings"] = [f.to_json() for f in self.findings]
        if self.skipped:
            out["skipped"] = self.skipped
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EinvoiceCheck:
        return cls(
            str(data.get("rule_set") or ""),
            str(data.get("version") or ""),
            str(data.get("profile") or ""),
            tuple(RuleFinding.from_json(f) for f in data.get("findings") or ()),
            str(data.get("skipped") or ""),
        )


@dataclass(frozen=True)
class PageDisagreement:
    """A key field whose value the page prints differently from the XML: both values, and where on
    the page the page's value was read (1-based page, box in PDF points, origin top-left)."""

    field: str
    xml_value: str
    page_value: str
    page_source: str
    page: int | None = None
    box: Box | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "field": self.field,
            "xml_value": self.xml_value,
            "page_value": self.page_value,
            "page_source": self.page_source,
        }
        if self.page is not None:
            out["page"] = self.page
        if self.box is not None:
            out["box"] = list(self.box)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PageDisagreement:
        box = data.get("box")
        return cls(
            str(data["field"]),
            str(data["xml_value"]),
            str(data["page_value"]),
            str(data.get("page_source") or ""),
            data.get("page"),
            (float(box[0]), float(box[1]), float(box[2]), float(box[3])) if box else None,
        )

    @property
    def where(self) -> str:
        if self.page is None:
            return self.page_source
        box = f", box ({', '.join(f'{v:g}' for v in self.box)})" if self.box else ""
        return f"page {self.page}{box}"
