"""Train the page-reading ranker (issue 40): one logistic regression per key field.

Training pairs are made of the candidates (`reading.candidates`) of the synthetic renders
(`samples.page_layouts`: six languages, left/right totals, letterhead/footer/buyer-VAT variants,
four number formats) and of the development set (`../shared/corpus/pdf-layouts`, read in
place): on each page, a candidate whose value is the page's true value against each one whose
value is not. scikit-learn is used here only (a dev dependency); the product reads the weights
with a dot product (`reading.ranker`).

`python -m benchmarks.train_ranker --write [--use FIELD=MODE ...]` rewrites the shipped weights
(`invoice_pipeline/documents/reading/ranker_weights.json`), trained on everything. How the
product reads each field (`hand`, `fill`, `ranker`) is decided by the leave-one-layout-out
comparison in `benchmarks.page_reading_lolo` (its `use`: more right without more wrong values
than the hand reader). `make bench` runs `ranker_training`, which retrains and checks that the
shipped file is reproduced.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT, BenchContext, BenchResult, register
from benchmarks.labelled_pages import CORPUS, LabelledPage, corpus_pages, same, synthetic_pages
from invoice_pipeline.documents.reading.candidates import KEY_FIELDS, Candidate, page_candidates
from invoice_pipeline.documents.reading.ranker import WEIGHTS_FILE, FieldModel, Ranker
from invoice_pipeline.documents.text_fields import hand_fields_from_text

WEIGHTS = ROOT / "invoice_pipeline" / "documents" / "reading" / WEIGHTS_FILE
SYNTHETIC_SEED = 4040
SYNTHETIC_COUNT = 216  # 6 languages x 6 variants (`page_layouts.TRAINING_VARIANTS`) x 6
# Below this share of the page's odds a field is left empty for a person: the chosen value must be
# likelier than all the others together. Fixed by that argument, not tuned on the development set.
MIN_CONFIDENCE = 0.5
# L2 regularisation strength (scikit-learn's C): the default, not tuned.
REGULARISATION = 1.0


@dataclass(frozen=True)
class PageCandidates:
    page: LabelledPage
    candidates: Mapping[str, Sequence[Candidate]]
    hand: Mapping[str, Any]  # the hand reader's six key fields


def with_candidates(page: LabelledPage) -> PageCandidates:
    if page.error:
        return PageCandidates(page, {f: () for f in KEY_FIELDS}, dict.fromkeys(KEY_FIELDS))
    hand = hand_fields_from_text(page.text, boxes=page.boxes)
    return PageCandidates(
        page, page_candidates(page.text, page.boxes, hand), {f: getattr(hand, f) for f in KEY_FIELDS}
    )


@cache
def training_pages() -> tuple[tuple[PageCandidates, ...], tuple[PageCandidates, ...]]:
    """(synthetic, development set) pages with their candidates, computed once."""
    synthetic = tuple(with_candidates(p) for p in synthetic_pages(SYNTHETIC_SEED, SYNTHETIC_COUNT))
    corpus = tuple(with_candidates(p) for p in corpus_pages()) if CORPUS.is_dir() else ()
    return synthetic, corpus


def fit_field(field: str, pages: Iterable[PageCandidates]) -> FieldModel:
    """A pairwise logistic regression: on each page, the true value's candidate against each other
    candidate (the difference of their features, both ways round). Its weights then score
    candidates so that the page's softmax over them is the chance each one is the value, which is
    how `Ranker.choose` reads them; the intercept is not needed (it cancels in differences)."""
    from sklearn.linear_model import LogisticRegression  # training only: never imported by the product

    rows: list[list[float]] = []
    labels: list[int] = []
    pages = [pc for pc in pages if field not in pc.page.not_printed]
    names = sorted({k for pc in pages for c in pc.candidates[field] for k in c.features})
    for pc in pages:
        vectors = [
            ([c.features.get(n, 0.0) for n in names], same(field, c.value, pc.page.truth[field]))
            for c in pc.candidates[field]
        ]
        for right, ok in vectors:
            if not ok:
                continue
            for other, other_ok in vectors:
                if other_ok:
                    continue
                diff = [a - b for a, b in zip(right, other, strict=True)]
                rows += [diff, [-d for d in diff]]
                labels += [1, 0]
    if len(set(labels)) < 2:
        return FieldModel(field, dict.fromkeys(names, 0.0), 0.0, MIN_CONFIDENCE)
    model = LogisticRegression(C=REGULARISATION, max_iter=5000, fit_intercept=False)
    model.fit(rows, labels)
    weights = {n: round(float(w), 6) for n, w in zip(names, model.coef_[0], strict=True)}
    return FieldModel(field, weights, 0.0, MIN_CONFIDENCE)


def train(
    pages: Sequence[PageCandidates], use: Mapping[str, str] | None = None, trained_on: str = ""
) -> Ranker:
    models = {}
    for field in KEY_FIELDS:
        m = fit_field(field, pages)
        models[field] = FieldModel(
            field, m.weights, m.intercept, m.min_confidence, (use or {}).get(field, "hand")
        )
    return Ranker(models, trained_on)


def ranker_reading(ranker: Ranker, pc: PageCandidates) -> dict[str, Any]:
    """The six fields as the ranker alone chooses them."""
    out: dict[str, Any] = {}
    for field in KEY_FIELDS:
        choice = ranker.choose(field, pc.candidates[field])
        out[field] = choice.candidate.value if choice.candidate is not None else None
    return out


def shipped_use() -> dict[str, str]:
    data = json.loads(WEIGHTS.read_text(encoding="utf-8")) if WEIGHTS.exists() else {"fields": {}}
    return {f: str(spec.get("use", "hand")) for f, spec in data["fields"].items()}


def train_everything(use: Mapping[str, str]) -> Ranker:
    synthetic, corpus = training_pages()
    return train(
        (*synthetic, *corpus),
        use,
        f"{len(synthetic)} synthetic pages (seed {SYNTHETIC_SEED}) + {len(corpus)} development-set pages",
    )


@register("ranker_training", "trains the page-reading ranker on everything; checks the shipped weights")
def run(ctx: BenchContext) -> BenchResult:
    result = BenchResult(
        "ranker_training", "the shipped ranker weights are reproduced by the training script"
    )
    if not CORPUS.is_dir():
        result.notes.append("no shared corpus: the shipped weights cannot be reproduced here; skipped")
        return result
    ranker = train_everything(shipped_use())
    shipped = Ranker.from_json(json.loads(WEIGHTS.read_text(encoding="utf-8")))
    worst = max(
        abs(ranker.models[f].weights.get(k, 0.0) - w)
        for f, m in shipped.models.items()
        for k, w in (*m.weights.items(), ("__intercept__", m.intercept))
        if k != "__intercept__"
    )
    result.figure("largest weight difference from the shipped file", "", better="lower").add(worst)
    result.check("shipped weights reproduced (to 1e-3)", worst < 1e-3, f"{worst:.2e}", fatal=False)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {WEIGHTS}")
    parser.add_argument(
        "--use",
        nargs="*",
        default=None,
        metavar="FIELD=MODE",
        help="how the product reads a field: hand, fill, ranker",
    )
    args = parser.parse_args(argv)
    use = shipped_use() if args.use is None else dict(arg.split("=", 1) for arg in args.use)
    ranker = train_everything(use)
    text = json.dumps(ranker.to_json(), indent=1) + "\n"
    if args.write:
        Path(WEIGHTS).write_text(text, encoding="utf-8")
        print(f"wrote {WEIGHTS}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
