"""Many invoices from the same vendor, in the same layout: what vendor layouts are learnt from.

`vendor_series` draws vendors, each with its own page layout (`page_layouts`: language, variant,
totals column, number format, currency shown or not) and its own seller, VAT id, number prefix
and VAT rates, then several invoices from each. Invoices of one vendor differ in their number,
dates and amounts, sometimes a prepayment (two more totals rows), and in how long they are:
`grow` address lines push the page down and `items` rows push the totals further, so a layout
that remembered absolute positions would not read them.

Some vendors print their own wording (`HOUSE_LABELS`): labels the template-free reader's
dictionaries do not know, the case a learnt layout is for. Results are reported per kind.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, replace
from decimal import Decimal

from .page_layouts import (
    CURRENCY_BY_LANG,
    FORMATS,
    PAGE_LABELS,
    SELLERS,
    VARIANTS,
    VAT_PREFIX,
    PageCase,
    PageLabels,
    page_pdf,
    page_vat_id,
)

# A vendor's own wording: a number label the reader knows (else the page is quarantined as
# having no number, before any person sees it), but no dictionary label for the dates or for
# the net, tax and amount due (only a bare "Total"/"Summe"), so the amount is left unconfirmed.
HOUSE_LABELS: dict[str, PageLabels] = {
    "en": replace(
        PAGE_LABELS["en"],
        number="Invoice no.",
        issue="Dated",
        due_date="Settle by",
        net="Goods",
        tax="Duty {rate}%",
        tax_total="All duty",
        gross="Total",
        prepaid="Received",
        due="Remit",
    ),
    "de": replace(
        PAGE_LABELS["de"],
        number="Beleg-Nr.",
        issue="Erstellt",
        due_date="Ausgleich bis",
        net="Warenkorb",
        tax="Abgabe {rate}%",
        tax_total="Abgaben",
        gross="Summe",
        prepaid="Erhalten",
        due="Überweisen",
    ),
}

# The page layouts' sellers first, then vendors of this series' own.
_NAMES = SELLERS + (
    "Oakridge Supplies Ltd",
    "Vogel Elektro GmbH",
    "Bertrand & Fils SAS",
    "Van Dijk Installatie B.V.",
)


@dataclass(frozen=True)
class SeriesInvoice:
    case: PageCase
    grow: int
    items: int
    labels: PageLabels | None

    def pdf(self) -> bytes:
        return page_pdf(self.case, grow=self.grow, items=self.items, labels=self.labels)


@dataclass(frozen=True)
class Vendor:
    key: str  # a short name for reports: "v03-de-right-letterhead"
    house_labels: bool
    invoices: tuple[SeriesInvoice, ...]


def vendor_series(seed: int, vendors: int, per_vendor: int, *, house: bool = True) -> list[Vendor]:
    """`vendors` vendors with `per_vendor` invoices each. With `house`, the EN and DE vendors of
    every other round of languages print their own wording (`HOUSE_LABELS`)."""
    rng = random.Random(seed)
    out: list[Vendor] = []
    langs = tuple(PAGE_LABELS)
    for v in range(vendors):
        lang = langs[v % len(langs)]
        variant = VARIANTS[(v // len(langs)) % len(VARIANTS)]
        own = house and lang in HOUSE_LABELS and (v // len(langs)) % 2 == 0
        name = f"{_NAMES[v % len(_NAMES)]}" if v < len(_NAMES) else f"{_NAMES[v % len(_NAMES)]} {v}"
        vat = page_vat_id(VAT_PREFIX[lang], rng.randint(100_000_000, 999_999_999))  # check digits valid
        rates = rng.choice(
            ((Decimal(19),), (Decimal(21), Decimal(9)), (Decimal(20),), (Decimal(22), Decimal(10)))
        )
        prefix = rng.choice(("INV", "RE", "F", "FV", "FA"))
        fmt, right, show = rng.choice(FORMATS), rng.random() < 0.5, rng.random() < 0.7
        buyer = rng.choice(("Northfield Bakery", "Stadtwerke Talheim", "Hotel Zonneweide"))
        invoices = []
        for k in range(per_vendor):
            net_parts = [Decimal(rng.randint(500, 400_000)) / 100 for _ in rates]
            rows = tuple(
                (r, (n * r / 100).quantize(Decimal("0.01"))) for r, n in zip(rates, net_parts, strict=True)
            )
            net = sum(net_parts, Decimal("0.00"))
            gross = net + sum((t for _, t in rows), Decimal(0))
            prepaid = (gross * Decimal(rng.choice((0, 0, 0, 0.3)))).quantize(Decimal("0.01"))
            case = PageCase(
                name=f"vendor-{v:02d}-{k:02d}-{lang}",
                lang=lang,
                layout=f"v{v:02d}-{lang}-{'right' if right else 'left'}-{variant}{'-house' if own else ''}",
                invoice_number=f"{prefix}-{rng.randint(2024, 2026)}-{rng.randint(1, 99999):05d}",
                issue_date=dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 300)),
                currency=CURRENCY_BY_LANG[lang],
                seller_name=name,
                seller_vat_id=vat,
                buyer_name=buyer,
                net=net,
                tax_rows=rows,
                prepaid=prepaid,
                number_format=fmt,
                totals_right=right,
                show_currency=show,
                variant=variant,
            )
            grow = 0 if k == 0 else rng.randint(0, 2)
            items = rng.randint(0, 4)
            invoices.append(SeriesInvoice(case, grow, items, HOUSE_LABELS[lang] if own else None))
        out.append(Vendor(invoices[0].case.layout, own, tuple(invoices)))
    return out


def due_date_of(case: PageCase) -> dt.date:
    """The due date `page_pdf` prints: 30 days after the issue date."""
    return case.issue_date + dt.timedelta(days=30)
