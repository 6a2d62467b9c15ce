"""Choose a field's value among its candidates with a logistic regression (issue 40).

At run time this is a dot product over a small JSON weights file shipped in the package
(`ranker_weights.json`); scikit-learn is only used to train it (`benchmarks/train_ranker.py`).
Per field the file holds the feature weights, the intercept, the confidence below which the field
is left empty (held for a person: `field_unread`), and whether the product uses the ranker for
that field and how: `hand` (not at all), `fill` (only where the hand reader read nothing) or
`ranker` (always), whichever read most of the field right leave-one-layout-out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

from ...domain.fields import FieldSource, InvoiceFields
from .candidates import Candidate, page_candidates
from .ocr_layout import MIN_FIELD_CONFIDENCE, OcrLayout
from .words import PageGeometry, TextBoxes

WEIGHTS_FILE = "ranker_weights.json"


@dataclass(frozen=True)
class FieldModel:
    field: str
    weights: Mapping[str, float]
    intercept: float
    # Below this share of the page's odds the best value is not offered as the field's value.
    min_confidence: float
    # How the product reads this field: "hand", "fill" (the ranker where the hand reader read
    # nothing) or "ranker".
    use: str = "hand"

    def score(self, features: Mapping[str, float]) -> float:
        """The log-odds that a candidate with these features is the field's value."""
        return self.intercept + sum(w * features.get(name, 0.0) for name, w in self.weights.items())


@dataclass(frozen=True)
class Choice:
    """The ranker's pick for a field: a candidate and its probability, or no value and why."""

    field: str
    candidate: Candidate | None
    confidence: float
    reason: str = ""


@dataclass(frozen=True)
class Ranker:
    models: Mapping[str, FieldModel]
    trained_on: str = ""

    def choose(self, field: str, candidates: Sequence[Candidate]) -> Choice:
        """The value with the largest share of the page's candidates' odds (the same value printed
        in several places adds up), at its most likely place; that share is its confidence."""
        model = self.models[field]
        if not candidates:
            return Choice(field, None, 0.0, f"no {field.replace('_', ' ')} of the right shape on the page")
        scores = [model.score(c.features) for c in candidates]
        top = max(scores)
        odds = [math.exp(s - top) for s in scores]
        total = sum(odds)
        mass: dict[Any, float] = {}
        best_at: dict[Any, int] = {}
        for i, c in enumerate(candidates):
            mass[c.value] = mass.get(c.value, 0.0) + odds[i] / total
            if c.value not in best_at or scores[i] > scores[best_at[c.value]]:
                best_at[c.value] = i
        # Ties go to the value printed first: the candidates are in page order, so it is stable.
        value = max(mass, key=lambda v: (mass[v], -best_at[v]))
        share = mass[value]
        if share < model.min_confidence:
            return Choice(
                field,
                None,
                share,
                f"ranker confidence {share:.2f} for {value!r} is below {model.min_confidence:.2f}; "
                "not guessed: read it from the page",
            )
        return Choice(field, candidates[best_at[value]], share)

    def to_json(self) -> dict[str, Any]:
        return {
            "trained_on": self.trained_on,
            "fields": {
                name: {
                    "weights": dict(sorted(m.weights.items())),
                    "intercept": m.intercept,
                    "min_confidence": m.min_confidence,
                    "use": m.use,
                }
                for name, m in self.models.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Ranker:
        return cls(
            {
                name: FieldModel(
                    name,
                    {k: float(v) for k, v in spec["weights"].items()},
                    float(spec["intercept"]),
                    float(spec["min_confidence"]),
                    str(spec["use"]),
                )
                for name, spec in data["fields"].items()
            },
            str(data.get("trained_on", "")),
        )


@cache
def shipped_ranker() -> Ranker:
    """The weights shipped with the package (trained on the synthetic pages and the whole
    development set)."""
    text = resources.files(__package__).joinpath(WEIGHTS_FILE).read_text(encoding="utf-8")
    return Ranker.from_json(json.loads(text))


def ranked_fields(
    fields: InvoiceFields,
    text: str,
    boxes: TextBoxes | None,
    ranker: Ranker,
    ocr_layout: OcrLayout | None = None,
) -> InvoiceFields:
    """`fields` with each field the ranker is used for (see `FieldModel.use`) replaced by its
    choice: the chosen value with its page, box and probability, or no value with the reason (the
    pipeline then holds the invoice for a person: `field_unread`).

    On a scan (`ocr_layout`) the choice is no surer than OCR was of its line: the confidence is
    the smaller of the two, and a line read below `MIN_FIELD_CONFIDENCE` offers no value, as with
    the hand reader."""
    used = [
        name
        for name, model in ranker.models.items()
        if model.use == "ranker" or (model.use == "fill" and getattr(fields, name) is None)
    ]
    if not used:
        return fields
    kind = "ocr" if ocr_layout is not None else "pdf-text"
    candidates = page_candidates(text, boxes, fields, used)
    geometry = PageGeometry(text, boxes)
    values: dict[str, Any] = {}
    sources = dict(fields.sources)
    for name in used:
        choice = ranker.choose(name, candidates[name])
        confidence = round(choice.confidence, 3)
        if choice.candidate is None:
            values[name] = None
            sources[name] = FieldSource(f"{kind}:ranker", confidence, choice.reason)
            continue
        cand = choice.candidate
        page, reason = geometry.page(cand.line), None
        if ocr_layout is not None:
            page, read = ocr_layout.locate([cand.line])
            confidence = round(min(confidence, read), 3)
            if read < MIN_FIELD_CONFIDENCE:
                reason = (
                    f"OCR confidence {read:.2f} of {cand.value!r} is below {MIN_FIELD_CONFIDENCE:.2f}; "
                    "not guessed: read it from the scan"
                )
        values[name] = None if reason else cand.value
        sources[name] = FieldSource(
            f"{kind}:page {page}:line {cand.line + 1}:ranker",
            confidence,
            reason,
            page,
            geometry.box(cand.line, cand.index),
        )
    return replace(fields, **values, sources=sources)
