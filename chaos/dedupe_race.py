"""Scenario 8, dedupe race storm: two copies of one invoice decided at the same instant.

Every pair is one invoice sent twice, the two documents differing the way real re-sends differ.
Four kinds, each run as its own phase:

* `number_format`: the number re-formatted ("INV-10042", "10042", "INV 10042", "inv-00010042");
* `vat_id`: the seller's VAT id spelt differently (with or without its country prefix, with
  spaces or dots, lower case), and in some pairs missing on one side;
* `seller_name`: a seller without a VAT id, named differently ("Acme Supplies GmbH",
  "ACME SUPPLIES G.m.b.H.", "Acme Supplies");
* `cross_format`: the same invoice rendered as two different formats among UBL, CII, Factur-X
  PDF, plain PDF and JSON.

Kinds 1-3 render both sides in one format, drawn per pair from the five, so every variation also
goes through every parser. Every pair has its own number and total, so pairs never match each
other. Documents are rendered by the project's sample renderers and stored with
`store_document`, as an ingested file would be.

How a pair is raced: per lane, two long-lived worker processes (forked from the chaos fork
server) each run the real `process_invoice` Dagster job, in process, on one side of the pair.
The one instrumentation is at the moment of decision: in each worker `Dedupe.
decide_duplicates` (store.dedupe) first waits on a barrier the two share, so both enter the advisory-locked
transaction together. The barrier has a timeout: a partner that never arrives breaks it instead
of hanging the run, and that pair is reported as not raced (a violation). Everything else
(claim, extraction, validation, the decision, approval, the hold for review, posting) is the
product's code.

Checked per pair: never two originals; exactly one ledger posting, on the original; the copy
names the pair's original; an exact copy is rejected and a suspected one ends `needs_review`
with no approval and no posting; the verdict (exact or suspected) is the pure matcher's on the
fields as extracted. Then the common invariants.
"""

from __future__ import annotations

import datetime as dt
import queue
import random
import statistics
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from decimal import Decimal
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Barrier
from typing import Any

import psycopg
from dagster import DagsterInstance

from chaos.common import (
    ChaosContext,
    ScenarioResult,
    check_common_invariants,
    timed,
    worker_context,
)
from chaos.worker import resources, single_run_config
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.identity import VENDOR_UNCONFIRMED, Identifier, normalise
from invoice_pipeline.domain.matching import MatchCandidate, find_match
from invoice_pipeline.domain.payment import POSSIBLE_IMPERSONATION
from invoice_pipeline.domain.review import EINVOICE_INVALID, reason_code
from invoice_pipeline.engine.records import ChunkWrite, DuplicateDecision, Lease
from invoice_pipeline.engine.store import Dedupe, InvoiceStore, MatchFunction, VendorImportRow
from invoice_pipeline.orchestration.jobs import make_jobs
from invoice_pipeline.samples.drawing import BUYERS, CURRENCY_BY_COUNTRY, ITEMS, LANG_BY_COUNTRY
from invoice_pipeline.samples.generator import BASE_FORMATS as FORMATS
from invoice_pipeline.samples.render import (
    Line,
    Party,
    SampleInvoice,
    render_invoice,
)

ORG = "race"
KINDS = ("number_format", "vat_id", "seller_name", "cross_format")
EXTENSIONS = {"ubl": "xml", "cii": "xml", "json": "json", "pdf": "pdf", "facturx-pdf": "pdf"}
# A partner that has not reached the decision within this long is lost (its run failed
# earlier): the barrier breaks instead of hanging the run. Generous, for a loaded 2-core box.
BARRIER_TIMEOUT_S = 60.0
# A pair whose two runs have not both reported by then has a hung worker: the scenario stops.
PAIR_TIMEOUT_S = 600.0
# An ephemeral instance keeps every event in memory; a fresh one every so many runs keeps a
# long storm's workers small.
RUNS_PER_INSTANCE = 200

# The number re-formatted the way another billing system prints it. Formats that normalise to
# the same number ("INV 10042", "inv-00010042") are exact copies; "10042" needs tolerance.
NUMBER_FORMATS = ("INV-{n}", "{n}", "INV {n}", "inv-{n:08d}", "INV{n}", "INV-{n:07d}", "Inv {n:06d}")
# (name, country, VAT prefix, national part): invented companies.
VAT_SELLERS = (
    ("Nordwind Logistik GmbH", "DE", "DE", "811907980"),
    ("Blue Heron Consulting Ltd", "GB", "GB", "123456782"),
    ("Atelier Lumière SARL", "FR", "FR", "40303265045"),
    ("Van Dijk Installatie B.V.", "NL", "NL", "812345678B01"),
    ("Rautatie Koneistus Oy", "FI", "FI", "20774740"),
    ("Bergquell Getränke AG", "DE", "DE", "266394116"),
)


@dataclass(frozen=True)
class NamedSeller:
    """A seller without a VAT id, and spellings of its name that all normalise to one vendor."""

    street: str
    postcode: str
    city: str
    country: str
    spellings: tuple[str, ...]


NAMED_SELLERS = (
    NamedSeller(
        "Werkstraße 4",
        "50667",
        "Köln",
        "DE",
        (
            "Acme Supplies GmbH",
            "ACME SUPPLIES G.m.b.H.",
            "Acme Supplies",
            "acme supplies gmbh",
            "Acme-Supplies GmbH",
            "Acme Supplies Gesellschaft mit beschränkter Haftung",
        ),
    ),
    NamedSeller(
        "14 Kestrel Row",
        "BS1 4DJ",
        "Bristol",
        "GB",
        (
            "Blue Heron Consulting Ltd",
            "BLUE HERON CONSULTING LTD.",
            "Blue Heron Consulting",
            "Blue Heron Consulting Limited",
            "blue heron consulting, ltd",
        ),
    ),
    NamedSeller(
        "Kanaalweg 3",
        "3526",
        "Utrecht",
        "NL",
        (
            "Van Dijk Installatie B.V.",
            "VAN DIJK INSTALLATIE BV",
            "Van Dijk Installatie",
            "van dijk installatie b.v.",
        ),
    ),
    NamedSeller(
        "8 rue des Tanneurs",
        "69002",
        "Lyon",
        "FR",
        ("Atelier Lumière SARL", "ATELIER LUMIERE S.A.R.L.", "Atelier Lumière", "atelier lumiere sarl"),
    ),
    NamedSeller(
        "220 Alder Ave",
        "97201",
        "Portland",
        "US",
        (
            "Kettle & Pine LLC",
            "KETTLE & PINE, L.L.C.",
            "Kettle and Pine",
            "Kettle & Pine Limited Liability Company",
        ),
    ),
)
ADDRESSES = {
    "DE": ("Hafenstraße 12", "20457", "Hamburg"),
    "GB": ("3 Canal Wharf", "LS11 5PS", "Leeds"),
    "FR": ("8 rue des Tanneurs", "69002", "Lyon"),
    "NL": ("Grachtstraat 71", "2011", "Haarlem"),
    "FI": ("Ratakatu 9", "00120", "Helsinki"),
}


# -- the worker ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    pair: int
    invoice_id: str


@dataclass(frozen=True)
class SideReport:
    lane: int
    worker: int
    pair: int
    invoice_id: str
    success: bool
    raced: bool  # passed the barrier together with its partner
    arrived_at: float | None  # time.monotonic(): one clock for every process on Linux
    released_at: float | None
    decided_at: float | None
    run_s: float  # the whole process_invoice run
    error: str = ""


class DecisionMoment:
    """Makes this process's next duplicate decision wait for its partner's, then run as usual."""

    def __init__(self, barrier: Barrier) -> None:
        self.barrier = barrier
        self.armed = False
        self.raced = False
        self.arrived_at: float | None = None
        self.released_at: float | None = None
        self.decided_at: float | None = None

    def arm(self) -> None:
        self.armed, self.raced = True, False
        self.arrived_at = self.released_at = self.decided_at = None

    def install(self) -> None:
        original = Dedupe.decide_duplicates
        moment = self

        def decide_with_partner(
            self: Dedupe,
            items: Sequence[tuple[Lease, MatchCandidate]],
            match: MatchFunction,
            *,
            step: str | None = None,
        ) -> ChunkWrite[DuplicateDecision]:
            if not moment.armed:
                return original(self, items, match, step=step)
            # Once per run: a step retried in the run must not wait for a partner that moved on.
            moment.armed = False
            moment.arrived_at = time.monotonic()
            try:
                moment.barrier.wait(BARRIER_TIMEOUT_S)
                moment.raced = True
            except threading.BrokenBarrierError:
                moment.raced = False
            moment.released_at = time.monotonic()
            try:
                return original(self, items, match, step=step)
            finally:
                moment.decided_at = time.monotonic()

        setattr(Dedupe, "decide_duplicates", decide_with_partner)  # noqa: B010  # patched, so not type-checked


def race_worker(url: str, lane: int, worker: int, barrier: Barrier, inbox: Any, outbox: Any) -> None:
    """Run process_invoice on every invoice the parent sends, deciding each one with the partner."""
    moment = DecisionMoment(barrier)
    moment.install()
    job, _ = make_jobs(resources(url, lock_ttl_seconds=30, max_attempts=10**6))
    instance = DagsterInstance.ephemeral()
    outbox.put({"ready": worker, "lane": lane})  # so the parent's clock does not time our start-up
    runs = 0
    try:
        while (task := inbox.get()) is not None:
            moment.arm()
            error = ""
            started = time.monotonic()
            try:
                result = job.execute_in_process(
                    run_config=single_run_config(task.invoice_id), instance=instance, raise_on_error=False
                )
                success = result.success
                if not success:
                    error = "; ".join(str(e.message) for e in result.all_events if e.is_failure)[:2000]
            except Exception:
                success, error = False, traceback.format_exc()[-2000:]
            report = SideReport(
                lane,
                worker,
                task.pair,
                task.invoice_id,
                success,
                moment.raced,
                moment.arrived_at,
                moment.released_at,
                moment.decided_at,
                time.monotonic() - started,
                error,
            )
            outbox.put(asdict(report))
            runs += 1
            if runs % RUNS_PER_INSTANCE == 0:
                instance.dispose()
                instance = DagsterInstance.ephemeral()
    finally:
        instance.dispose()


# -- the pairs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    content: bytes
    filename: str
    label: str  # what differs, for violation messages


@dataclass(frozen=True)
class Pair:
    index: int
    kind: str
    docs: tuple[Doc, Doc]


def render(inv: SampleInvoice, fmt: str) -> bytes:
    return render_invoice(inv, fmt, LANG_BY_COUNTRY.get(inv.seller.country, "en"))


class PairMaker:
    """Builds each pair's two documents; every pair gets its own number and its own total."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.buckets: set[int] = set()
        self.buyers = [Party(name, None, street, pc, city, cc) for name, street, pc, city, cc in BUYERS]

    def make(self, kind: str, index: int) -> Pair:
        rng = self.rng
        number = 10000 + index  # distinct digits per pair: distinct number skeletons
        plain = f"INV-{number}"
        if kind == "number_format":
            fmt = rng.choice(FORMATS)
            a, b = rng.sample(NUMBER_FORMATS, 2)
            inv = self.invoice(plain, self.vat_seller(None))
            sides = [(replace_number(inv, f.format(n=number)), fmt) for f in (a, b)]
        elif kind == "vat_id":
            fmt = rng.choice(FORMATS)
            name, cc, prefix, national = rng.choice(VAT_SELLERS)
            spellings = vat_spellings(prefix, national)
            a_vat, b_vat = rng.sample(spellings, 2)
            vats: tuple[str, str | None] = (a_vat, None if rng.random() < 0.2 else b_vat)
            # None: the seller is recognised by VAT id on one side and by name on the other.
            inv = self.invoice(plain, self.vat_seller(name))
            sides = [(replace_seller(inv, name=inv.seller.name, vat_id=v), fmt) for v in vats]
        elif kind == "seller_name":
            fmt = rng.choice(FORMATS)
            named = rng.choice(NAMED_SELLERS)
            a_name, b_name = rng.sample(named.spellings, 2)
            inv = self.invoice(plain, self.name_seller(named))
            sides = [(replace_seller(inv, name=n, vat_id=None), fmt) for n in (a_name, b_name)]
        elif kind == "cross_format":
            a_fmt, b_fmt = rng.sample(FORMATS, 2)
            seller = (
                self.vat_seller(None) if rng.random() < 0.75 else self.name_seller(rng.choice(NAMED_SELLERS))
            )
            inv = self.invoice(plain, seller)
            sides = [(inv, a_fmt), (inv, b_fmt)]
        else:
            raise ValueError(kind)
        docs = tuple(
            Doc(
                render(s, fmt),
                f"race-{index}-{side}.{EXTENSIONS[fmt]}",
                f"{fmt}: {s.invoice_number} / {s.seller.name} / {s.seller.vat_id}",
            )
            for side, (s, fmt) in enumerate(sides)
        )
        assert len(docs) == 2 and docs[0].content != docs[1].content, "a pair needs two documents"
        return Pair(index, kind, (docs[0], docs[1]))

    def vat_seller(self, name: str | None) -> Party:
        choices = [s for s in VAT_SELLERS if name is None or s[0] == name]
        seller_name, cc, prefix, national = self.rng.choice(choices)
        street, pc, city = ADDRESSES[cc]
        return Party(seller_name, prefix + national, street, pc, city, cc)

    @staticmethod
    def name_seller(named: NamedSeller) -> Party:
        return Party(named.spellings[0], None, named.street, named.postcode, named.city, named.country)

    def invoice(self, number: str, seller: Party) -> SampleInvoice:
        rng = self.rng
        issue = dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 400))
        while True:
            lines = tuple(
                Line(
                    rng.choice(ITEMS),
                    Decimal(rng.randint(1, 12)),
                    Decimal(rng.randint(500, 250000)) / 100,
                    Decimal(rng.choice((0, 7, 19, 20, 21))),
                )
                for _ in range(rng.randint(1, 3))
            )
            inv = SampleInvoice(
                invoice_number=number,
                document_type="invoice",
                issue_date=issue,
                due_date=issue + dt.timedelta(days=30),
                currency=CURRENCY_BY_COUNTRY.get(seller.country, "USD"),
                seller=seller,
                buyer=rng.choice(self.buyers),
                lines=lines,
                po_number=f"PO-{rng.randint(1000, 9999)}",
            )
            # Distinct totals, further apart than the matcher's tolerance, for every pair.
            bucket = int(inv.payable_total * 100)
            if not self.buckets & {bucket - 1, bucket, bucket + 1}:
                self.buckets.add(bucket)
                return inv


def replace_number(inv: SampleInvoice, number: str) -> SampleInvoice:
    return replace(inv, invoice_number=number)


def register_vat_sellers(store: InvoiceStore) -> None:
    """The race org's vendor master: every seller with a VAT id, under both spellings the pairs
    print (with and without the country prefix), so a page-read original is posted once its
    race is decided. Sellers known by name only stay unconfirmed (held; docs/vendors.md)."""
    rows = [
        VendorImportRow(
            name,
            tuple(
                Identifier("vat", normalise("vat", v), v)
                for v in dict.fromkeys((prefix + national, national))
            ),
        )
        for name, _, prefix, national in VAT_SELLERS
    ]
    result = store.vendors.import_vendors(ORG, rows, "chaos: vendor master")
    if result.refused:
        raise RuntimeError(f"the race's vendor master was refused: {result.refused}")


def replace_seller(inv: SampleInvoice, *, name: str, vat_id: str | None) -> SampleInvoice:
    return replace(inv, seller=replace(inv.seller, name=name, vat_id=vat_id))


def vat_spellings(prefix: str, national: str) -> list[str]:
    """One VAT id as people write it: prefixed or not, grouped with spaces or dots, any case."""
    groups = [national[i : i + 3] for i in range(0, len(national), 3)]
    return [
        prefix + national,
        national,
        f"{prefix} {' '.join(groups)}",
        f"{prefix} {'.'.join(groups)}",
        (prefix + national).lower(),
        ".".join(groups),
    ]


# -- the parent ---------------------------------------------------------------------------------


@dataclass
class Lane:
    index: int
    barrier: Barrier
    inboxes: tuple[Any, Any]


@dataclass
class PairRun:
    """A raced pair, without its documents' bytes (a long storm would keep them all)."""

    index: int
    kind: str
    labels: tuple[str, str]
    invoice_ids: tuple[str, str]  # by worker: worker w decides invoice_ids[w]
    started: float
    reports: dict[int, SideReport] = field(default_factory=dict)


@dataclass
class KindFigures:
    pairs: int = 0
    exact_duplicates: int = 0
    suspected: int = 0
    both_original: int = 0
    posted_twice: int = 0
    not_raced: int = 0
    decisions_overlapping: int = 0  # both decision windows open at once
    originals_by_worker: list[int] = field(default_factory=lambda: [0, 0])
    seconds: float = 0.0
    ms_per_pair: float = 0.0
    median_run_ms: float = 0.0  # one process_invoice run, barrier wait included
    median_arrival_gap_ms: float = 0.0  # how far apart the two sides reached the decision

    def timings(self, done: list[PairRun]) -> None:
        reports = [r for p in done for r in p.reports.values()]
        if reports:
            self.median_run_ms = round(1000 * statistics.median(r.run_s for r in reports))
        gaps = [
            abs(a.arrived_at - b.arrived_at)
            for a, b in (p.reports.values() for p in done)
            if a.arrived_at is not None and b.arrived_at is not None
        ]
        if gaps:
            self.median_arrival_gap_ms = round(1000 * statistics.median(gaps))


def run(ctx: ChaosContext, params: dict[str, int], seed: int) -> ScenarioResult:
    pairs_per_kind, lane_count = params["pairs"], params.get("lanes", 1)
    result = ScenarioResult("dedupe_race_storm", seed, dict(params))
    rng = random.Random(seed)
    url = ctx.new_database()
    maker = PairMaker(rng)
    mp = worker_context()
    outbox = mp.Queue()
    lanes = [Lane(i, mp.Barrier(2), (mp.Queue(), mp.Queue())) for i in range(lane_count)]
    procs = [
        mp.Process(
            target=race_worker,
            args=(url, lane.index, w, lane.barrier, lane.inboxes[w], outbox),
            name=f"race-{lane.index}-{w}",
        )
        for lane in lanes
        for w in (0, 1)
    ]
    runs: list[PairRun] = []
    figures: dict[str, KindFigures] = {}
    store = InvoiceStore(url, max_size=2)
    register_vat_sellers(store)
    with timed(result):
        try:
            for p in procs:
                p.start()
            for _ in procs:
                next_message(outbox, procs, time.monotonic())
            next_index = 0
            for kind in KINDS:
                started = time.monotonic()
                plan = (maker.make(kind, next_index + i) for i in range(pairs_per_kind))
                done = race_pairs(plan, lanes, outbox, procs, store, rng)
                next_index += pairs_per_kind
                fig = KindFigures(pairs=len(done), seconds=round(time.monotonic() - started, 1))
                fig.ms_per_pair = round(1000 * fig.seconds / max(1, fig.pairs))
                fig.timings(done)
                figures[kind] = fig
                runs.extend(done)
            for lane in lanes:
                for inbox in lane.inboxes:
                    inbox.put(None)
            for p in procs:
                p.join(60)
                if p.exitcode != 0:
                    result.violate(f"race worker {p.name} exited with {p.exitcode}")
        finally:
            store.close()
            for p in procs:
                if p.is_alive():  # only after a failure above: never leave our workers behind
                    p.kill()
                    p.join(10)
        check_pairs(url, runs, figures, result)
        result.figures["invoices_by_status"] = check_common_invariants(url, result)
    result.trials = len(runs)
    result.failures_injected = sum(f.pairs - f.not_raced for f in figures.values())
    result.figures["by_kind"] = {kind: asdict(f) for kind, f in figures.items()}
    for key in ("pairs", "exact_duplicates", "suspected", "both_original", "posted_twice", "not_raced"):
        result.figures[key] = sum(getattr(f, key) for f in figures.values())
    ctx.cleanup()
    return result


def race_pairs(
    plan: Iterator[Pair],
    lanes: list[Lane],
    outbox: Any,
    procs: Sequence[BaseProcess],
    store: InvoiceStore,
    rng: random.Random,
) -> list[PairRun]:
    """Race every planned pair, one pair per lane at a time; the next pair renders meanwhile."""
    free = list(lanes)
    running: dict[int, PairRun] = {}
    done: list[PairRun] = []
    upcoming = next(plan, None)
    while upcoming is not None or running:
        while free and upcoming is not None:
            lane = free.pop()
            docs = list(upcoming.docs)
            rng.shuffle(docs)  # either side may sit in either worker
            ids = [str(store.documents.store_document(d.content, ORG, d.filename).invoice_id) for d in docs]
            if ids[0] == ids[1]:
                raise RuntimeError(f"pair {upcoming.index}: both documents stored as one invoice")
            running[lane.index] = PairRun(
                upcoming.index,
                upcoming.kind,
                (docs[0].label, docs[1].label),
                (ids[0], ids[1]),
                time.monotonic(),
            )
            for w in (0, 1):
                lane.inboxes[w].put(Task(upcoming.index, ids[w]))
            upcoming = next(plan, None)  # rendered while the lanes work
        report = next_report(outbox, procs, running)
        pair_run = running[report.lane]
        pair_run.reports[report.worker] = report
        if len(pair_run.reports) == 2:
            lane = lanes[report.lane]
            if lane.barrier.broken:
                lane.barrier.reset()  # both sides have reported: nobody is waiting on it
            done.append(pair_run)
            free.append(lane)
            del running[report.lane]
    return done


def next_report(outbox: Any, procs: Sequence[BaseProcess], running: dict[int, PairRun]) -> SideReport:
    oldest = min((r.started for r in running.values()), default=time.monotonic())
    return SideReport(**next_message(outbox, procs, oldest))


def next_message(outbox: Any, procs: Sequence[BaseProcess], since: float) -> dict[str, Any]:
    """The next message from a worker; raises if a worker died or nothing came for too long."""
    while True:
        try:
            message: dict[str, Any] = outbox.get(timeout=5)
            return message
        except queue.Empty:
            dead = [p.name for p in procs if not p.is_alive()]
            if dead:
                raise RuntimeError(f"race workers died: {dead}") from None
            if time.monotonic() - since > PAIR_TIMEOUT_S:
                raise RuntimeError(f"no word from the workers for {PAIR_TIMEOUT_S} s: one hangs") from None


# -- the checks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    invoice_id: str
    status: str
    duplicate_status: str | None
    duplicate_of: str | None
    approval: str | None
    postings: int
    fields: InvoiceFields | None
    review_codes: tuple[str, ...] = ()

    @property
    def held_for_who_is_paid(self) -> bool:
        """Held only because no registered vendor confirms its seller: a seller the race's vendor
        master knows by name only, or an invoice in the name of a vendor another pair registered
        that gives none of its identifiers (possible_impersonation, issue 52; docs/vendors.md); or
        a side whose spelling breaks EN 16931 (a VAT id without its country prefix, BR-CO-09:
        einvoice_invalid, issue 55). A person decides; the race is over."""
        codes = set(self.review_codes)
        return self.status == "needs_review" and bool(codes) and codes <= WHO_IS_PAID


WHO_IS_PAID = {VENDOR_UNCONFIRMED, POSSIBLE_IMPERSONATION, EINVOICE_INVALID}
OUTCOMES_SQL = """
SELECT i.id::text, i.status, i.duplicate_status, i.duplicate_of::text, a.decision,
       (SELECT count(*) FROM ledger_postings l WHERE l.invoice_id = i.id), i.fields,
       coalesce(i.review_reasons, '{}')
FROM invoices i LEFT JOIN approvals a ON a.invoice_id = i.id
"""


def check_pairs(
    url: str, runs: list[PairRun], figures: dict[str, KindFigures], result: ScenarioResult
) -> None:
    with psycopg.connect(url) as conn:
        outcomes = {
            inv: Outcome(
                inv,
                status,
                dup,
                dup_of,
                approval,
                int(postings),
                InvoiceFields.from_json(f) if f else None,
                tuple(reason_code(r) for r in reasons),
            )
            for inv, status, dup, dup_of, approval, postings, f, reasons in conn.execute(
                OUTCOMES_SQL
            ).fetchall()
        }
    for pair_run in runs:
        check_pair(pair_run, [outcomes[i] for i in pair_run.invoice_ids], figures[pair_run.kind], result)


def check_pair(pair_run: PairRun, sides: list[Outcome], fig: KindFigures, result: ScenarioResult) -> None:
    where = f"{pair_run.kind} pair {pair_run.index} ({' | '.join(pair_run.labels)})"
    reports = [pair_run.reports[w] for w in (0, 1)]
    for r in reports:
        if not r.success:
            result.violate(f"{where}: the run for {r.invoice_id} failed: {r.error[-500:]}")
    if not all(r.raced for r in reports):
        fig.not_raced += 1
        result.violate(f"{where}: not raced, a partner never reached the decision")
    released = [r.released_at for r in reports if r.released_at is not None]
    decided = [r.decided_at for r in reports if r.decided_at is not None]
    if len(released) == 2 and len(decided) == 2 and max(released) < min(decided):
        fig.decisions_overlapping += 1

    originals = [w for w, s in enumerate(sides) if s.duplicate_status == "original"]
    postings = sum(s.postings for s in sides)
    if postings > 1:
        fig.posted_twice += 1
    # One posting, unless the original waits for a person to confirm who is paid.
    unconfirmed = len(originals) == 1 and sides[originals[0]].held_for_who_is_paid
    if postings != (0 if unconfirmed else 1):
        result.violate(f"{where}: {postings} ledger postings for one invoice")
    if len(originals) == 2:
        fig.both_original += 1
        # Both originals is a race lost only if the matcher pairs the two; otherwise the
        # documents (or their extraction) are not copies, and the message says so.
        result.violate(
            f"{where}: both copies are originals; the matcher alone says {verdict(sides[1], sides[0])}"
        )
    if len(originals) != 1:
        if len(originals) == 0:
            result.violate(f"{where}: no original ({[s.duplicate_status for s in sides]})")
        return
    fig.originals_by_worker[originals[0]] += 1
    original, copy = sides[originals[0]], sides[1 - originals[0]]
    if not original.held_for_who_is_paid and (original.status, original.approval, original.postings) != (
        "processed",
        "approved",
        1,
    ):
        result.violate(
            f"{where}: original {original.invoice_id} is {original.status}, "
            f"approval {original.approval}, {original.postings} postings"
        )
    if copy.duplicate_of != original.invoice_id:
        result.violate(f"{where}: copy {copy.invoice_id} points at {copy.duplicate_of}, not the original")
    if copy.duplicate_status == "duplicate":
        fig.exact_duplicates += 1
        if (copy.status, copy.approval, copy.postings) != ("processed", "rejected", 0):
            result.violate(
                f"{where}: exact copy {copy.invoice_id} is {copy.status}, "
                f"approval {copy.approval}, {copy.postings} postings"
            )
    elif copy.duplicate_status == "suspected":
        fig.suspected += 1
        if (copy.status, copy.approval, copy.postings) != ("needs_review", None, 0):
            result.violate(
                f"{where}: suspected copy {copy.invoice_id} is {copy.status}, "
                f"approval {copy.approval}, {copy.postings} postings"
            )
    else:
        result.violate(f"{where}: copy {copy.invoice_id} is {copy.duplicate_status}")
    # The race must not change the verdict: the pure matcher, shown the original the copy was
    # decided against, gives the same answer on the fields as extracted.
    expected = verdict(copy, original)
    if expected != copy.duplicate_status:
        result.violate(f"{where}: decided {copy.duplicate_status}, the matcher alone says {expected}")


def verdict(copy: Outcome, original: Outcome) -> str | None:
    """What the pure matcher makes of `copy` against `original`; None if either has no usable fields."""
    if copy.fields is None or original.fields is None:
        return None
    try:
        found = find_match(
            MatchCandidate.from_fields(copy.invoice_id, ORG, copy.fields),
            [MatchCandidate.from_fields(original.invoice_id, ORG, original.fields)],
        )
    except ValueError:  # no number or vendor: no business key
        return None
    if found is None:
        return "original"
    return "duplicate" if found.exact else "suspected"
