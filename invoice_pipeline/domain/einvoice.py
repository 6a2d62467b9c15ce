"""What an e-invoice's own rules and its own page say about it (issue 55). Pure: no database.

* `EinvoiceCheck`: the EN 16931 Schematron (or a Factur-X profile's) run on a structured
  invoice: the rule set's name and version and every failed assertion (`RuleFinding`). A fatal
  one holds the invoice `einvoice_invalid`; warnings are shown and hold nothing.
A key field the visible page of a Factur-X/ZUGFeRD PDF prints differently from its XML is a
`fields.PageDisagreement` (beside `AmountCandidate`: a value with the page source it was read from).

Both travel inside `InvoiceFields` (so the approval stage, the posting and a person's approval
see the same reasons, as for every hold) and the findings are also recorded, one row each, in
`einvoice_findings` (sql/0023).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

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
