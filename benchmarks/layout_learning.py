"""Vendor layouts learnt from one correction (issue 23): before/after on later invoices.

Groups of invoices that share a page layout and a vendor: (a) the shared corpus's pdf-layouts
with several files per layout (the XML stripped: `page_reading.strip_to_page`) and (b) generated
vendor series (`samples.vendor_series`; lines move between invoices; some vendors print their own
wording). Per group, through the real pipeline (`chunk_loop.process_chunk`) and the real review
functions (`engine.corrections.correct_invoice`, `engine.review.act` approve, and
`engine.layouts.teach_layout`, which is `review layouts learn`):

1. the first invoice is processed in the group's organisation. If it is held, a person corrects
   the fields that are wrong (the number of fields typed is "corrections needed") and approves
   it; if the pipeline posted it, the person checks it and vouches for it (`review layouts
   learn`). The approval (or the vouching) teaches the vendor's layout, which starts in shadow
   (issue 37): its values are not used until a person approves an invoice it reads as approved;
2. the later invoices are processed twice: in a control organisation with no layouts ("before")
   and in the group's organisation ("after", all in one batch, so the layout is still in shadow
   for all of them): key fields right, held, posted with a wrong amount;
3. "as a person works": in a third organisation taught the same way, the later invoices arrive
   one by one and the person corrects and approves each one that is held as it comes (the first
   one read with the layout in shadow activates it; a row the vendor prints for the first time,
   a prepayment say, is taught once): fields right as first read,
   held, and fields typed;
4. a different vendor's similar-looking page (the same layout and wording, another seller) is
   processed in the group's organisation: every field read with a layout there is a leak.

Read time: template-free reading alone against template-free + the org's layouts, per page.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import statistics
import time
import unittest.mock
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from benchmarks.harness import BenchContext, BenchResult, register
from benchmarks.page_reading import CORPUS, KEY_FIELDS, strip_to_page
from invoice_pipeline.config import DEFAULT_MAX_DOCUMENT_BYTES
from invoice_pipeline.documents import ExtractedText, extract_fields, extract_text, text_fields
from invoice_pipeline.documents.reading.layouts import VendorLayout, apply_layouts, norm_text
from invoice_pipeline.documents.reading.seller_buyer import identifiers_for_the_registry
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.identity import Identifier, OrgProfile, Vendor, normalise, vat_valid
from invoice_pipeline.domain.payment import confirmed_vendor
from invoice_pipeline.domain.review import reason_code
from invoice_pipeline.engine.chunk_loop import claim_chunk, process_chunk
from invoice_pipeline.engine.corrections import correct_invoice
from invoice_pipeline.engine.layouts import teach_layout
from invoice_pipeline.engine.review import Actor, act
from invoice_pipeline.engine.stages import StageEnv
from invoice_pipeline.engine.store import InvoiceStore, VendorImportRow
from invoice_pipeline.orchestration.resources import DocumentReader
from invoice_pipeline.samples.vat_ids import valid_vat_id
from invoice_pipeline.samples.vendor_series import SeriesInvoice, due_date_of, vendor_series

SEED = 2031
REVIEWER = Actor("bench:reviewer", "review:bench@layout-learning:0")


@dataclass(frozen=True)
class Doc:
    name: str
    content: bytes
    truth: dict[str, Any]  # the key fields (+ net_total when known)


@dataclass
class Group:
    kind: str  # "corpus" / "generated" / "generated-house"
    name: str
    docs: list[Doc]
    other_vendor: Doc | None = None


def _series_truth(inv: SeriesInvoice) -> dict[str, Any]:
    c = inv.case
    return {
        "invoice_number": c.invoice_number,
        "issue_date": c.issue_date,
        "due_date": due_date_of(c),
        "payable_total": c.amount_due,
        "currency": c.currency,
        "seller_name": c.seller_name,
        "seller_vat_id": c.seller_vat_id,
        "net_total": c.net,
        "tax_total": c.tax,
    }


def generated_groups(vendors: int, per_vendor: int) -> list[Group]:
    out = []
    for n, v in enumerate(vendor_series(SEED, vendors, per_vendor)):
        docs = [Doc(inv.case.name, inv.pdf(), _series_truth(inv)) for inv in v.invoices]
        second = v.invoices[1]
        twin_case = dataclasses.replace(
            second.case,
            seller_name=f"Twin Trading {n} Ltd",
            seller_vat_id=twin_vat_id(second.case.seller_vat_id, n),
        )
        twin = dataclasses.replace(second, case=twin_case)
        group = Group("generated-house" if v.house_labels else "generated", v.key, docs)
        group.other_vendor = Doc(f"{twin_case.name}-twin", twin.pdf(), _series_truth(twin))
        out.append(group)
    return out


def twin_vat_id(vat_id: str, n: int) -> str:
    """Another valid VAT id of the same country and shape (the twin is a real, registrable vendor)."""
    prefix, national = vat_id[:2], vat_id[2:]
    digits = re.match(r"\d+", national)
    if digits is None:
        return f"{prefix}{700_000_000 + n}"
    body = digits.group()
    shifted = f"{(int(body) + 7919 * (n + 1)) % 10 ** len(body):0{len(body)}d}"
    try:
        return valid_vat_id(prefix, shifted, suffix=national[len(body) :])
    except ValueError:
        return f"{prefix}{700_000_000 + n}"


def corpus_groups() -> list[Group]:
    if not CORPUS.is_dir():
        return []
    expected = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))["files"]
    by_layout: dict[str, list[Doc]] = {}
    for path, want in sorted(expected.items()):
        if not path.startswith("pdf-layouts/") or not path.endswith(".pdf"):
            continue
        truth = {
            "invoice_number": want["invoice_number"],
            "issue_date": date.fromisoformat(want["issue_date"]),
            "payable_total": Decimal(want["total_payable"]),
            "currency": want["currency"],
            "seller_name": want["seller_name"],
            "seller_vat_id": want["seller_vat_id"],
        }
        content = strip_to_page((CORPUS / path).read_bytes())
        by_layout.setdefault(want["layout"], []).append(Doc(path, content, truth))
    groups = [Group("corpus", layout, docs) for layout, docs in by_layout.items() if len(docs) >= 2]
    # A different vendor's page for each: the first page of the next layout.
    singles = [docs[0] for docs in by_layout.values()]
    for g in groups:
        g.other_vendor = next(d for d in singles if d not in g.docs)
    return groups


def _value(truth: dict[str, Any], name: str) -> str:
    value = truth[name]
    return value.isoformat() if isinstance(value, date) else str(value)


def right(fields: InvoiceFields | None, truth: dict[str, Any]) -> dict[str, bool]:
    if fields is None:
        return dict.fromkeys(KEY_FIELDS, False)
    return {k: getattr(fields, k) == truth[k] for k in KEY_FIELDS}


class Pipeline:
    def __init__(self, store: InvoiceStore) -> None:
        self.store = store
        self.env = StageEnv(
            store, DocumentReader(isolate=False), DEFAULT_MAX_DOCUMENT_BYTES, 120, 3, timedelta(minutes=1)
        )

    def run(self, org: str, docs: Sequence[Doc]) -> list[UUID]:
        ids = [
            self.store.documents.store_document(d.content, org, d.name.replace("/", "_")).invoice_id
            for d in docs
        ]
        self.process(ids)
        return ids

    def process(self, ids: Sequence[UUID]) -> None:
        """Every stage over these invoices, as one chunk (what the sensor's next run does)."""
        chunk = claim_chunk(self.store, [(i, None) for i in ids], "bench-layouts")
        process_chunk(self.env, chunk)

    def outcome(self, invoice_id: UUID, truth: dict[str, Any]) -> tuple[dict[str, bool], bool, bool, int]:
        """(fields right, held, posted with a wrong amount, fields read with a layout)."""
        fields = self.store.documents.load_fields(invoice_id)
        state = self.store.documents.invoice_state(invoice_id)
        status = state.status if state else "missing"
        posting = self.store.documents.load_ledger_posting(invoice_id)
        wrong = posting is not None and abs(posting.amount) != abs(truth["payable_total"])
        layout = sum(1 for s in (fields.sources.values() if fields else ()) if s.source.startswith("layout:"))
        return right(fields, truth), status in ("needs_review", "quarantined"), wrong, layout

    def paid_wrong(self, org: str, invoice_id: UUID, truth: dict[str, Any]) -> bool:
        """Posted to another vendor than the page's true seller, or into an account that vendor is
        not known to have (issue 37): the figure that must stay 0."""
        posting = self.store.documents.load_ledger_posting(invoice_id)
        if posting is None:
            return False
        vendor = next(
            (v for v in self.store.vendors.list_vendors(org) if v.vendor_id == posting.vendor_id), None
        )
        if vendor is None:
            return True
        vat = truth.get("seller_vat_id")
        seller_right = vendor.has("vat", vat) if vat else vendor.has("name", truth["seller_name"])
        iban_right = posting.iban is None or vendor.has("iban", posting.iban)
        return not (seller_right and iban_right)

    def held_for(self, invoice_id: UUID) -> list[str]:
        """The status when not held or posted, else the review reason codes."""
        state = self.store.documents.invoice_state(invoice_id)
        if state is not None and state.status == "quarantined":
            return [f"quarantined:{state.quarantine_code}"]
        return sorted({reason_code(r) for r in self.store.documents.review_reasons(invoice_id) or []})


def teach(p: Pipeline, org: str, first: Doc) -> tuple[str, int]:
    """Process the first invoice; a person corrects (and approves) it when it is held, or vouches
    for it when it was posted."""
    [invoice_id] = p.run(org, [first])
    state = p.store.documents.invoice_state(invoice_id)
    status = state.status if state else "missing"
    if status == "processed":
        learnt = teach_layout(p.store, invoice_id, REVIEWER.name)
        return f"posted; vouched for: {learnt.outcome} ({learnt.detail})", 0
    if status != "needs_review":
        return f"first invoice {status}: nothing to learn from", 0
    typed = review_held(p, invoice_id, first.truth)
    return f"held; {typed}", len(typed.changes)


@dataclass(frozen=True)
class Review:
    changes: dict[str, str]
    refused: str | None = None

    def __str__(self) -> str:
        if self.refused:
            return f"correction refused: {self.refused}"
        return ("corrected " + ", ".join(sorted(self.changes))) if self.changes else "approved unchanged"


def review_held(p: Pipeline, invoice_id: UUID, truth: dict[str, Any]) -> Review:
    """A person types the fields that are wrong (if any) and approves: the real review functions."""
    fields = p.store.documents.load_fields(invoice_id)
    assert fields is not None
    changes = {name: _value(truth, name) for name in truth if getattr(fields, name) != truth[name]}
    if changes:
        outcome = correct_invoice(p.store, invoice_id, changes, REVIEWER)
        if not outcome.done:
            return Review(changes, outcome.message)
    act(p.store, "approve", invoice_id, REVIEWER)
    # The pipeline's next run posts it: the posting registers the vendor the person approved.
    p.process([invoice_id])
    return Review(changes)


def as_a_person_works(p: Pipeline, org: str, later: Sequence[Doc], c: Counter[str]) -> None:
    """The later invoices one by one; each held one is corrected before the next arrives."""
    for d in later:
        [invoice_id] = p.run(org, [d])
        ok, held, wrong, _ = p.outcome(invoice_id, d.truth)
        c["paid_wrong_working"] += p.paid_wrong(org, invoice_id, d.truth)
        for code in p.held_for(invoice_id):
            c[f"reason_working:{code}"] += 1
        c["right_working"] += sum(ok.values())
        c["held_working"] += held
        c["wrong_working"] += wrong
        if held and p.store.documents.invoice_state(invoice_id).status == "needs_review":  # type: ignore[union-attr]
            c["typed_working"] += len(review_held(p, invoice_id, d.truth).changes)


def _time(fn: Callable[[], object], rounds: int = 5) -> float:
    best = []
    for _ in range(rounds):
        # Cold: the layout reader's cache of normalised words starts empty every round.
        norm_text.cache_clear()
        began = time.perf_counter()
        fn()
        best.append(time.perf_counter() - began)
    return min(best)


def read_time_ratio(
    text: ExtractedText,
    layouts: list[VendorLayout],
    org: str,
    registry: Sequence[Vendor],
    profile: OrgProfile,
) -> float:
    """(template-free + finding the page's vendor among the org's registry, read beforehand as the
    stage does once per chunk + its layouts) / template-free, for one page (best of a few rounds,
    each with a cold cache)."""

    def with_layouts() -> InvoiceFields:
        vendor = confirmed_vendor(identifiers_for_the_registry(text.text), registry, profile)
        return apply_layouts(text, extract_fields(text), layouts, org, vendor)

    bare = _time(lambda: extract_fields(text))
    return _time(with_layouts) / bare


@register("layout_learning", "vendor layouts learnt from one correction: later invoices before/after, leaks")
def run(ctx: BenchContext) -> BenchResult:
    result = BenchResult("layout_learning", "one correction per vendor layout, then its later invoices")
    vendors, per_vendor = ctx.pick((6, 4), (18, 6))
    result.params = {
        "seed": SEED,
        "generated_vendors": vendors,
        "invoices_per_vendor": per_vendor,
        "corpus": str(CORPUS),
    }
    groups = corpus_groups() + generated_groups(vendors, per_vendor)
    store = InvoiceStore(ctx.database("layout_learning"), max_size=4)
    try:
        p = Pipeline(store)
        per_kind: dict[str, Counter[str]] = {}
        field_counts: dict[str, Counter[str]] = {}
        ratios: list[float] = []
        lines = []
        for n, g in enumerate(groups):
            org, control, working = f"org-{n:02d}", f"control-{n:02d}", f"working-{n:02d}"
            c = per_kind.setdefault(g.kind, Counter())
            f = field_counts.setdefault(g.kind, Counter())
            taught, typed = teach(p, org, g.docs[0])
            c["groups"] += 1
            c["corrections"] += typed
            c["learnt"] += int(bool(store.layouts.list_layouts(org)))
            later = g.docs[1:]
            before_ids, after_ids = p.run(control, later), p.run(org, later)
            for d, b, a in zip(later, before_ids, after_ids, strict=True):
                ok_b, held_b, wrong_b, _ = p.outcome(b, d.truth)
                ok_a, held_a, wrong_a, used = p.outcome(a, d.truth)
                c["paid_wrong_before"] += p.paid_wrong(control, b, d.truth)
                c["paid_wrong_after"] += p.paid_wrong(org, a, d.truth)
                for code in p.held_for(a):
                    c[f"reason_after:{code}"] += 1
                c["later"] += 1
                c["right_before"] += sum(ok_b.values())
                c["right_after"] += sum(ok_a.values())
                c["held_before"] += held_b
                c["held_after"] += held_a
                c["wrong_before"] += wrong_b
                c["wrong_after"] += wrong_a
                c["read_with_layout"] += int(used > 0)
                for k in KEY_FIELDS:
                    f[f"{k}:before"] += ok_b[k]
                    f[f"{k}:after"] += ok_a[k]
            teach(p, working, g.docs[0])
            as_a_person_works(p, working, later, c)
            if g.other_vendor is not None:
                [other] = p.run(org, [g.other_vendor])
                c["leaks"] += p.outcome(other, g.other_vendor.truth)[3]
                c["other_vendor_pages"] += 1
            layouts = store.layouts.enabled_layouts([org])[org]
            if layouts:
                registry, profile = store.vendors.list_vendors(org), store.vendors.org_profiles([org])[org]
                ratios.append(
                    read_time_ratio(extract_text(later[0].content), layouts, org, registry, profile)
                )
            lines.append(f"{g.kind} {g.name}: {taught}")
        for kind, c in per_kind.items():
            total = c["later"] * len(KEY_FIELDS)
            prefix = kind
            result.figure(f"{prefix}: key fields right before", "%", better="higher").add(
                100 * c["right_before"] / max(total, 1)
            )
            result.figure(f"{prefix}: key fields right after", "%", better="higher").add(
                100 * c["right_after"] / max(total, 1)
            )
            result.figure(f"{prefix}: held before", "invoices").add(c["held_before"])
            result.figure(f"{prefix}: held after", "invoices").add(c["held_after"])
            result.figure(f"{prefix}: corrections needed (fields typed)", "fields").add(c["corrections"])
            result.figure(f"{prefix}: key fields right as a person works", "%", better="higher").add(
                100 * c["right_working"] / max(total, 1)
            )
            result.figure(f"{prefix}: held as a person works", "invoices").add(c["held_working"])
            result.figure(f"{prefix}: fields typed as a person works", "fields").add(c["typed_working"])
            result.figure(f"{prefix}: layout applications to another vendor", "fields").add(c["leaks"])
            f = field_counts[kind]
            per_field = {k: f"{f[k + ':before']}->{f[k + ':after']}/{c['later']}" for k in KEY_FIELDS}
            result.notes.append(
                f"{kind}: {c['groups']} groups, layouts learnt {c['learnt']}, later invoices {c['later']} "
                f"(read with a layout {c['read_with_layout']}); key fields {c['right_before']}->{c['right_after']}/{total}; "
                f"per field before->after {per_field}; held {c['held_before']}->{c['held_after']}; posted with a wrong "
                f"amount {c['wrong_before']}->{c['wrong_after']}; corrections typed {c['corrections']}; other vendor's "
                f"pages {c['other_vendor_pages']}, fields read there with a layout {c['leaks']}; as a person works: "
                f"key fields {c['right_working']}/{total}, held {c['held_working']}, fields typed {c['typed_working']}, "
                f"posted with a wrong amount {c['wrong_working']}"
            )
            result.check(
                f"{kind}: no layout applied to another vendor's page", c["leaks"] == 0, str(c["leaks"])
            )
            result.figure(f"{prefix}: posted with a wrong seller or IBAN", "invoices").add(
                c["paid_wrong_before"] + c["paid_wrong_after"] + c["paid_wrong_working"]
            )
            reasons = {
                when: ", ".join(
                    f"{k.split(':', 1)[1]} {n}"
                    for k, n in sorted(c.items())
                    if k.startswith(f"reason_{when}:")
                )
                or "none"
                for when in ("after", "working")
            }
            result.notes.append(
                f"{kind}: held after, by reason: {reasons['after']}; as a person works: {reasons['working']}; "
                f"posted with a wrong seller or IBAN: before {c['paid_wrong_before']}, after "
                f"{c['paid_wrong_after']}, as a person works {c['paid_wrong_working']}"
            )
            result.check(
                f"{kind}: nothing posted with a wrong seller or IBAN",
                c["paid_wrong_before"] + c["paid_wrong_after"] + c["paid_wrong_working"] == 0,
                f"{c['paid_wrong_before']} before, {c['paid_wrong_after']} after, {c['paid_wrong_working']} working",
            )
            result.check(
                f"{kind}: nothing posted with a wrong amount after",
                c["wrong_after"] + c["wrong_working"] == 0,
                f"{c['wrong_after']} after one correction, {c['wrong_working']} as a person works",
            )
        if ratios:
            fig = result.figure("read time with a layout / template-free", "x")
            fig.add(statistics.median(ratios))
            result.check(
                "reading with a layout costs at most 2x",
                statistics.median(ratios) <= 2.0,
                f"{statistics.median(ratios):.2f}x",
                fatal=False,
            )
        result.notes.extend(lines)
    finally:
        store.close()
    return result


# -- "as a person works" (issue 54) ---------------------------------------------------------------

POSITIONS = ("1st", "2nd", "later")


def position(n: int) -> str:
    return POSITIONS[min(n, 2)]


@contextlib.contextmanager
def ranker_trained_without(group: Group) -> Iterator[str]:
    """For a development-set group: the page reader's trained features (the ranker's weights)
    trained without that group's layout, as `page_reading_lolo` does, for the length of the
    group's run; generated groups keep the shipped weights (no generated vendor is in them)."""
    if group.kind != "corpus":
        yield "shipped ranker weights"
        return
    from benchmarks.train_ranker import shipped_use, train, training_pages

    synthetic, corpus = training_pages()
    kept = [pc for pc in corpus if pc.page.layout != group.name]
    ranker = train((*synthetic, *kept), shipped_use(), f"without layout {group.name}")
    with unittest.mock.patch.object(text_fields, "shipped_ranker", lambda: ranker):
        yield f"ranker trained without layout {group.name} ({len(corpus) - len(kept)} pages left out)"


def play(p: Pipeline, org: str, docs: Sequence[Doc], c: Counter[str]) -> list[str]:
    """A vendor's invoices one at a time, from its first: each is read, a person corrects what is
    wrong in a held one and approves it, then the next arrives. Counted per position (1st, 2nd,
    later): key fields right as read, fields typed, held, posted wrong."""
    notes = []
    for n, d in enumerate(docs):
        at = position(n)
        [invoice_id] = p.run(org, [d])
        ok, held, wrong, used = p.outcome(invoice_id, d.truth)
        c[f"{at}:invoices"] += 1
        c[f"{at}:right"] += sum(ok.values())
        c[f"{at}:held"] += held
        c[f"{at}:wrong_amount"] += wrong
        c[f"{at}:paid_wrong"] += p.paid_wrong(org, invoice_id, d.truth)
        c[f"{at}:read_with_layout"] += int(used > 0)
        reasons = p.held_for(invoice_id)
        for code in reasons:
            c[f"{at}:reason:{code}"] += 1
        typed: Review | None = None
        state = p.store.documents.invoice_state(invoice_id)
        if held and state is not None and state.status == "needs_review":
            typed = review_held(p, invoice_id, d.truth)
            c[f"{at}:typed"] += len(typed.changes)
        wrong_fields = sorted(k for k, good in ok.items() if not good)
        notes.append(
            f"{n + 1}:{'held' if held else 'posted'} {sum(ok.values())}/{len(ok)} right"
            + (f" (wrong as read: {', '.join(wrong_fields)})" if wrong_fields else "")
            + (f" typed {sorted(typed.changes)}" if typed and typed.changes else "")
            + (f" held for {', '.join(reasons)}" if held else "")
        )
    return notes


@register(
    "layout_learning_as_a_person_works",
    "issue 54: each vendor's invoices played one at a time (read, corrected, approved, next), per position",
)
def run_as_a_person_works(ctx: BenchContext) -> BenchResult:
    result = BenchResult(
        "layout_learning_as_a_person_works",
        "each vendor's invoices one at a time from its first; per group kind and position (1st, 2nd, later)",
    )
    vendors, per_vendor = ctx.pick((6, 4), (18, 6))
    result.params = {"seed": SEED, "generated_vendors": vendors, "invoices_per_vendor": per_vendor}
    groups = corpus_groups() + generated_groups(vendors, per_vendor)
    store = InvoiceStore(ctx.database("layout_learning_as_a_person_works"), max_size=4)
    try:
        p = Pipeline(store)
        per_kind: dict[str, Counter[str]] = {}
        for n, g in enumerate(groups):
            c = per_kind.setdefault(g.kind, Counter())
            org = f"person-{n:02d}"
            with ranker_trained_without(g) as reader:
                notes = play(p, org, g.docs, c)
                if g.other_vendor is not None:
                    # Another vendor of the org with the same template, registered too: none of
                    # the first vendor's layouts may read its page.
                    register_vendor(store, org, g.other_vendor)
                    [other] = p.run(org, [g.other_vendor])
                    c["leaks"] += p.outcome(other, g.other_vendor.truth)[3]
                    c["other_vendor_pages"] += 1
            c["groups"] += 1
            result.notes.append(f"{g.kind} {g.name} ({reader}): {', '.join(notes)}")
        for kind, c in per_kind.items():
            for at in POSITIONS:
                if not c[f"{at}:invoices"]:
                    continue
                fields = c[f"{at}:invoices"] * len(KEY_FIELDS)
                result.figure(f"{kind} {at}: key fields right as read", "%", better="higher").add(
                    100 * c[f"{at}:right"] / fields
                )
                result.figure(f"{kind} {at}: fields typed", "fields").add(c[f"{at}:typed"])
                result.figure(f"{kind} {at}: held", "invoices").add(c[f"{at}:held"])
                reasons = ", ".join(
                    f"{k.split(':', 2)[2]} {v}" for k, v in sorted(c.items()) if k.startswith(f"{at}:reason:")
                )
                result.notes.append(
                    f"{kind} {at}: {c[f'{at}:invoices']} invoices, key fields right {c[f'{at}:right']}/{fields}, "
                    f"typed {c[f'{at}:typed']}, held {c[f'{at}:held']} ({reasons or 'none'}), read with a "
                    f"layout {c[f'{at}:read_with_layout']}, posted with a wrong amount {c[f'{at}:wrong_amount']}, "
                    f"posted to a wrong seller or IBAN {c[f'{at}:paid_wrong']}"
                )
            wrong = sum(c[f"{at}:wrong_amount"] + c[f"{at}:paid_wrong"] for at in POSITIONS)
            result.check(
                f"{kind}: nothing posted with a wrong amount, seller or IBAN", wrong == 0, str(wrong)
            )
            result.check(
                f"{kind}: no layout applied to another vendor's page",
                c["leaks"] == 0,
                f"{c['leaks']} fields on {c['other_vendor_pages']} pages",
            )
    finally:
        store.close()
    return result


def register_vendor(store: InvoiceStore, org: str, doc: Doc) -> None:
    """`doc`'s seller in the org's vendor master, by its VAT id (when it has a valid one)."""
    vat = doc.truth.get("seller_vat_id")
    if vat and vat_valid(vat):
        store.vendors.import_vendors(
            org,
            [VendorImportRow(doc.truth["seller_name"], (Identifier("vat", normalise("vat", vat), vat),))],
            "bench: vendor master",
        )
