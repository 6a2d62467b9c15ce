"""Scenario 5, property-based: duplicate decisions made in the database, against the pure model.

The pure properties already live in the tests, invoice_pipeline_tests/domain/: org isolation
(test_matching.test_org_isolation), normalisation idempotence (test_normalize.
test_invoice_number_idempotent, test_vendor_idempotent), a reformatted copy matches its
original (test_matching.test_reformatted_copy_matches_original, test_normalize.
test_reformatted_numbers_normalise_equal) and different sellers never match on number alone
(test_matching.test_different_sellers_never_match_on_number_alone). What they cannot see is the
database half: the candidate query that picks which originals the matcher is shown, the
advisory-locked transaction, the unique index. Here hypothesis generates batches of invoices
across orgs — reformatted numbers, VAT id present or missing, totals a cent apart, credit
notes — decides each through `invoice_pipeline.engine.dedupe.decide_duplicate` on a real database and
checks: never grouped across orgs, and the same verdict as the pure model (find_match over every
earlier original of the org), i.e. the SQL prefilter never hides an original the rules match.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from uuid import UUID

import psycopg
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from chaos.common import ChaosContext, ScenarioResult, timed
from invoice_pipeline.domain.fields import InvoiceFields
from invoice_pipeline.domain.matching import MatchCandidate, find_match
from invoice_pipeline.engine.dedupe import decide_duplicate
from invoice_pipeline.engine.store import InvoiceStore

SELLERS = [("Acme Supplies GmbH", "DE123456789"), ("ACME Supplies", None), ("Globex Ltd", "GB999999973")]
FORMATS = ["INV-{:05d}", "INV {}", "inv{}", "Inv.#{:04d}", "{}"]


@dataclass(frozen=True)
class Spec:
    org: int
    seller: int
    vat_missing: bool
    number: int
    fmt: int
    cents: int
    credit_note: bool
    day: int

    def fields(self) -> InvoiceFields:
        name, vat = SELLERS[self.seller]
        return InvoiceFields(
            invoice_number=FORMATS[self.fmt].format(self.number),
            document_type="credit_note" if self.credit_note else "invoice",
            issue_date=date(2026, 3, 1) + timedelta(days=self.day),
            currency="EUR",
            payable_total=Decimal("100.00") + Decimal(self.cents) / 100,
            seller_name=name,
            seller_vat_id=None if self.vat_missing else vat,
        )


specs = st.builds(
    Spec,
    org=st.integers(0, 2),
    seller=st.integers(0, len(SELLERS) - 1),
    vat_missing=st.booleans(),
    number=st.integers(1, 3),
    fmt=st.integers(0, len(FORMATS) - 1),
    cents=st.integers(0, 2),
    credit_note=st.booleans(),
    day=st.integers(0, 4),
)


def run(ctx: ChaosContext, params: dict[str, int], seed_value: int) -> ScenarioResult:
    result = ScenarioResult("dedupe_properties", seed_value, dict(params))
    url = ctx.new_database()
    store = InvoiceStore(url, max_size=2)
    example = itertools.count()
    stats = {"invoices": 0, "duplicates": 0, "suspected": 0, "model_disagreements": 0}

    @seed(seed_value)
    @settings(
        max_examples=params["trials"],
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
        report_multiple_bugs=False,
    )
    @given(st.lists(specs, min_size=2, max_size=12))
    def decisions_agree_with_the_model(batch: list[Spec]) -> None:
        prefix = f"p{next(example)}"  # fresh orgs per example: examples never see each other
        originals: dict[str, list[MatchCandidate]] = {}
        for spec in batch:
            org = f"{prefix}-org{spec.org}"
            fields = spec.fields()
            invoice_id = store.documents.store_document(
                repr((prefix, spec, stats["invoices"])).encode(), org
            ).invoice_id
            lease = store.claims.acquire(invoice_id, 1)
            assert lease is not None
            store.documents.save_fields(lease, fields)
            decision = decide_duplicate(store, lease, org, fields)
            store.claims.finish(lease.job_id, "succeeded")
            mine = MatchCandidate.from_fields(str(invoice_id), org, fields)
            model = find_match(mine, originals.get(org, []))
            stats["invoices"] += 1
            is_copy = decision.original_id is not None  # duplicate (exact) or suspected (tolerance)
            if is_copy:
                stats["duplicates" if decision.is_duplicate else "suspected"] += 1
                assert decision.original_id is not None
                other = store.documents.invoice_state(decision.original_id)
                assert other is not None and other.org_id == org, f"grouped across orgs: {org} with {other}"
            verdict = (
                None
                if model is None
                else (UUID(model.original_id), "duplicate" if model.exact else "suspected")
            )
            if (None if not is_copy else (decision.original_id, decision.status)) != verdict:
                stats["model_disagreements"] += 1
                raise AssertionError(
                    f"{spec} decided {decision.status} of {decision.original_id}, the rules say "
                    f"{'original' if model is None else f'copy of {model.original_id} ({model.how})'}"
                )
            if not is_copy:
                originals.setdefault(org, []).append(mine)

    with timed(result):
        try:
            decisions_agree_with_the_model()
        except AssertionError as exc:
            result.violate(f"property falsified: {str(exc)[:1500]}")
        finally:
            store.close()
        with psycopg.connect(url) as conn:
            cross = conn.execute(
                "SELECT count(*) FROM invoices d JOIN invoices o ON o.id = d.duplicate_of WHERE d.org_id <> o.org_id"
            ).fetchone()
        if cross and cross[0]:
            result.violate(f"{cross[0]} duplicate(s) point at another org's invoice")
    result.trials = params["trials"]
    result.figures.update(stats)
    ctx.cleanup()
    return result
