"""The labelled pages the page-reading benchmarks score and the ranker is trained on: the
development set (`../shared/corpus/pdf-layouts/`, read in place, never copied) and the synthetic
renders (training only), each with its truth, layout and language; and when a value read is the
page's (`same`). Shared by `page_reading_lolo` (the scores), `train_ranker` (the training) and
`real_scans`, so that neither of the first two imports the other back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from benchmarks.harness import ROOT
from benchmarks.page_reading import KEY_FIELDS, strip_to_page
from invoice_pipeline.documents import BadDocument
from invoice_pipeline.documents.pdf import text_layer
from invoice_pipeline.documents.reading.words import TextBoxes
from invoice_pipeline.documents.text_fields import looks_like_invoice
from invoice_pipeline.samples.page_layouts import TRAINING_VARIANTS, page_cases, page_pdf

CORPUS = ROOT.parent / "shared" / "corpus"
# The corpus README says these pages print no seller VAT id, though their `not_printed` does not
# list it (their expected value comes from the embedded XML): not scored, like `not_printed`.
NOT_PRINTED_PER_README = {
    "pdf-layouts/facturx-engine/invoice_raw.pdf": frozenset({"seller_vat_id"}),
    "pdf-layouts/facturx-cas-limites/facture.pdf": frozenset({"seller_vat_id"}),
}
SYNTHETIC = "synthetic:"  # the layout name of a rendered page starts with this


@dataclass(frozen=True)
class LabelledPage:
    """One page's text layer with its truth, layout and language."""

    name: str
    layout: str
    language: str
    text: str
    boxes: TextBoxes | None
    truth: dict[str, Any]  # the six key fields as the reader returns them (date, Decimal, str)
    not_printed: frozenset[str] = field(default_factory=frozenset)
    error: str | None = None  # the text layer could not be read or is not an invoice

    @property
    def scored_fields(self) -> tuple[str, ...]:
        return tuple(f for f in KEY_FIELDS if f not in self.not_printed)


def corpus_truth(want: dict[str, Any]) -> dict[str, Any]:
    return {
        "invoice_number": want["invoice_number"],
        "issue_date": date.fromisoformat(want["issue_date"]) if want.get("issue_date") else None,
        "payable_total": Decimal(str(want["total_payable"])) if want.get("total_payable") else None,
        "currency": want["currency"],
        "seller_name": want["seller_name"],
        "seller_vat_id": want["seller_vat_id"],
    }


def read_page(
    content: bytes, name: str, layout: str, language: str, truth: dict[str, Any], **kw: Any
) -> LabelledPage:
    try:
        layer = text_layer(content, ocr=False)
    except BadDocument as exc:
        return LabelledPage(name, layout, language, "", None, truth, error=exc.code, **kw)
    error = None if looks_like_invoice(layer.text) else "not_an_invoice"
    boxes = TextBoxes.from_structured(layer.structured)
    return LabelledPage(name, layout, language, layer.text, boxes, truth, error=error, **kw)


def corpus_pages(corpus: Path = CORPUS) -> list[LabelledPage]:
    """The labelled development set, read in place."""
    expected = json.loads((corpus / "expected.json").read_text(encoding="utf-8"))["files"]
    out = []
    for path, want in sorted(expected.items()):
        if not path.endswith(".pdf") or not want.get("layout"):
            continue
        content = strip_to_page((corpus / path).read_bytes())
        out.append(
            read_page(
                content,
                path,
                want["layout"],
                want["language"],
                corpus_truth(want),
                not_printed=frozenset(want.get("not_printed") or ())
                | NOT_PRINTED_PER_README.get(path, frozenset()),
            )
        )
    return out


def synthetic_pages(seed: int, count: int) -> list[LabelledPage]:
    """Rendered pages (six languages, several layouts, the training-only ones too) with their
    truth: training data only."""
    out = []
    for case in page_cases(seed, count, TRAINING_VARIANTS):
        truth = {
            "invoice_number": case.invoice_number,
            "issue_date": case.issue_date,
            "payable_total": case.amount_due,
            "currency": case.currency,
            "seller_name": case.seller_name,
            "seller_vat_id": case.seller_vat_id,
        }
        out.append(read_page(page_pdf(case), case.name, f"{SYNTHETIC}{case.layout}", case.lang, truth))
    return out


def same(name: str, got: Any, want: Any) -> bool:
    if got is None or want is None:
        return got is None and want is None and name == "seller_vat_id"
    if name == "payable_total":
        return Decimal(str(got)) == Decimal(str(want))
    return bool(got == want)
