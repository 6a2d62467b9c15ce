"""Invented invoices drawn from a seed: sellers, buyers, numbers, dates and lines.

The generator (generator.py) writes them as files; the scans (scans.py) and the benchmarks draw
them without writing anything. Both come here, so neither imports the other for it.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace
from decimal import Decimal
from typing import Any

from .render import Line, Party, SampleInvoice
from .vat_ids import valid_vat_id

# Invented companies; any resemblance to real ones is accidental.
# Sellers without a VAT id are identified as EN 16931 asks instead (render.Party): a state
# registration (BT-30) and a federal tax number (BT-32), invented like the rest.
_US_IDS = {
    "Kettle & Pine LLC": ("OR-1184502", "93-4417208"),
    "Quillstone Analytics Inc.": ("CA-C4021197", "94-3380561"),
}
SELLERS = (
    ("Nordwind Logistik GmbH", "DE", "Hafenstraße 12", "20457", "Hamburg"),
    ("Blue Heron Consulting Ltd", "GB", "14 Kestrel Row", "BS1 4DJ", "Bristol"),
    ("Atelier Lumière SARL", "FR", "8 rue des Tanneurs", "69002", "Lyon"),
    ("Kettle & Pine LLC", None, "220 Alder Ave", "97201", "Portland"),
    ("Van Dijk Installatie B.V.", "NL", "Kanaalweg 3", "3526", "Utrecht"),
    ("Fjordlys AS", "NO", "Bryggen 5", "5003", "Bergen"),
    ("Quillstone Analytics Inc.", None, "900 Market St", "94103", "San Francisco"),
    ("Rautatie Koneistus Oy", "FI", "Ratakatu 9", "00120", "Helsinki"),
    ("Sol y Mar Distribución S.L.", "ES", "Calle Mayor 44", "28013", "Madrid"),
    ("Brightmoor Office Supplies Ltd", "GB", "3 Canal Wharf", "LS11 5PS", "Leeds"),
    ("Bergquell Getränke AG", "DE", "Quellweg 1", "83646", "Bad Tölz"),
    ("Osterhout Print & Design BV", "NL", "Grachtstraat 71", "2011", "Haarlem"),
)
BUYERS = (
    ("Harbor Street Bakery", "Harbor Street 2", "10115", "Berlin", "DE"),
    ("Lindqvist Architects", "Storgatan 19", "11455", "Stockholm", "SE"),
    ("Copperfield Veterinary Clinic", "Mill Lane 7", "EH1 2AB", "Edinburgh", "GB"),
    ("Maison Verte Paysage", "12 avenue Foch", "75016", "Paris", "FR"),
    ("Tallgrass Community School", "Prairie Rd 400", "66044", "Lawrence", "US"),
)
ITEMS = (
    "Consulting hours",
    "Freight Hamburg-Rotterdam",
    "Printer toner, black",
    "Software licence (annual)",
    "Installation work",
    "Spring water 0.5l (crate)",
    "Workshop facilitation",
    "Maintenance contract",
)
CURRENCY_BY_COUNTRY = {
    "DE": "EUR",
    "FR": "EUR",
    "NL": "EUR",
    "FI": "EUR",
    "ES": "EUR",
    "GB": "GBP",
    "NO": "NOK",
    None: "USD",
}
LANG_BY_COUNTRY = {"DE": "de", "FR": "fr"}


def _vat(rng: random.Random, country: str | None) -> str | None:
    digits = "".join(rng.choice("0123456789") for _ in range(12))
    match country:
        case "DE":
            return valid_vat_id("DE", digits[:9])
        case "GB":
            return valid_vat_id("GB", digits[:9])
        case "FR":
            return valid_vat_id("FR", digits[:2] + digits[2:11])
        case "NL":
            return valid_vat_id("NL", digits[:9], suffix="B01")
        case "NO":
            return valid_vat_id("NO", digits[:9], suffix="MVA")
        case "FI":
            return valid_vat_id("FI", digits[:8])
        case "ES":
            return valid_vat_id("ES", digits[:8], lead="B")
    return None


def random_lines(rng: random.Random) -> tuple[Line, ...]:
    """One to three invoice lines: item, quantity, unit price, VAT rate."""
    return tuple(
        Line(
            rng.choice(ITEMS),
            Decimal(rng.randint(1, 20)),
            Decimal(rng.randint(500, 250000)) / 100,
            Decimal(rng.choice((0, 7, 10, 19, 20, 21, 25))),
        )
        for _ in range(rng.randint(1, 3))
    )


class InvoiceDrawer:
    """Seeded invoices: the same seed draws the same invoices, in the same order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.sellers = [
            Party(name, _vat(self.rng, cc), street, pc, city, cc or "US", *_US_IDS.get(name, (None, None)))
            for name, cc, street, pc, city in SELLERS
        ]
        self.buyers = [Party(name, None, street, pc, city, cc) for name, street, pc, city, cc in BUYERS]
        self.numbers: set[str] = set()

    def lang(self, inv: SampleInvoice) -> str:
        return LANG_BY_COUNTRY.get(inv.seller.country, "en")

    def invoice(self, seller: Party | None = None, **over: Any) -> SampleInvoice:
        rng = self.rng
        seller = seller or rng.choice(self.sellers)
        while True:
            prefix = rng.choice(("INV", "RE", "F", "2024"))
            number = f"{prefix}-{rng.randint(1, 99999):05d}"
            if number not in self.numbers:
                self.numbers.add(number)
                break
        issue = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randint(0, 500))
        lines = random_lines(rng)
        inv = SampleInvoice(
            invoice_number=number,
            document_type="invoice",
            issue_date=issue,
            due_date=issue + dt.timedelta(days=rng.choice((14, 30, 45))),
            currency=CURRENCY_BY_COUNTRY.get(seller.vat_id[:2] if seller.vat_id else None, "USD"),
            seller=seller,
            buyer=rng.choice(self.buyers),
            lines=lines,
            po_number=rng.choice((None, f"PO-{rng.randint(1000, 9999)}")),
        )
        return replace(inv, **over)
