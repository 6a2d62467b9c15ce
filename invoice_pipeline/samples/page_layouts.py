"""Invoice pages in more layouts than `render.invoice_pdf`: six languages, number formats,
totals tables with per-rate VAT rows, a prepaid row and an amount due that is not the gross.

Each `PageCase` carries its truth, so the page-reading benchmark can score what is read from
the rendered PDF (no XML is embedded: only the visible page can be read).
"""

from __future__ import annotations

import datetime as dt
import io
import random
from dataclasses import dataclass
from decimal import Decimal

from fpdf import FPDF

from .render import FIXED_PDF_DATE
from .vat_ids import valid_vat_id


@dataclass(frozen=True)
class PageLabels:
    heading: str
    number: str
    issue: str
    due_date: str
    bill_to: str
    net: str
    tax: str  # with "{rate}" for the per-rate rows
    tax_total: str
    gross: str
    prepaid: str
    due: str
    vat: str
    stamp: str  # a version/print stamp with a date that is not the issue date
    number_mark: str  # the bare "No." printed under the heading in the heading-number variant
    registration: str  # the legal footer's registration words


PAGE_LABELS: dict[str, PageLabels] = {
    "en": PageLabels(
        "INVOICE",
        "Invoice number",
        "Invoice date",
        "Due date",
        "Bill to",
        "Subtotal",
        "VAT {rate}%",
        "Total VAT",
        "Total incl. VAT",
        "Already paid",
        "Balance due",
        "VAT Reg. No.",
        "Printed on",
        "No.",
        "Registered in England and Wales No. 04417856",
    ),
    "de": PageLabels(
        "RECHNUNG",
        "Rechnungsnummer",
        "Rechnungsdatum",
        "Fällig am",
        "Rechnungsempfänger",
        "Nettobetrag",
        "USt {rate}%",
        "Summe USt",
        "Gesamtbetrag",
        "Anzahlung",
        "Zahlbetrag",
        "USt-IdNr.",
        "Stylesheet-Version 3 vom",
        "Nr.",
        "Amtsgericht Talheim HRB 51733 - Geschäftsführer: J. Kessler",
    ),
    "fr": PageLabels(
        "FACTURE",
        "Facture n°",
        "Date de facture",
        "Date d'échéance",
        "Client",
        "Total HT",
        "TVA {rate}%",
        "Total TVA",
        "Total TTC",
        "Acompte",
        "Net à payer",
        "N° TVA",
        "Édité le",
        "N°",
        "SAS au capital de 10 000 EUR - RCS Lyon 512 804 337",
    ),
    "nl": PageLabels(
        "FACTUUR",
        "Factuurnummer",
        "Factuurdatum",
        "Vervaldatum",
        "Klant",
        "Totaal excl. BTW",
        "BTW {rate}%",
        "Totaal BTW",
        "Totaal incl. BTW",
        "Vooruitbetaald",
        "Te betalen",
        "BTW-nummer",
        "Afgedrukt op",
        "Nr.",
        "KvK 30127731",
    ),
    "it": PageLabels(
        "FATTURA",
        "Fattura n.",
        "Data fattura",
        "Scadenza",
        "Cliente",
        "Imponibile",
        "IVA {rate}%",
        "Totale IVA",
        "Totale fattura",
        "Acconto",
        "Totale da pagare",
        "Partita IVA",
        "Stampato il",
        "N.",
        "Capitale sociale 50.000 EUR - REA MI-1921744",
    ),
    "es": PageLabels(
        "FACTURA",
        "Factura n.º",
        "Fecha de factura",
        "Vencimiento",
        "Cliente",
        "Base imponible",
        "IVA {rate}%",
        "Total IVA",
        "Importe total",
        "Anticipo",
        "Importe a pagar",
        "NIF",
        "Impreso el",
        "N.º",
        "Registro Mercantil de Zaragoza, tomo 3120",
    ),
}
CURRENCY_BY_LANG = {"en": "GBP", "de": "EUR", "fr": "EUR", "nl": "EUR", "it": "EUR", "es": "EUR"}
VAT_PREFIX = {"en": "GB", "de": "DE", "fr": "FR", "nl": "NL", "it": "IT", "es": "ES"}


def page_vat_id(prefix: str, number: int) -> str:
    """A VAT id of the country's shape, built from a drawn 9-digit number, with check digits that
    pass (the pipeline refuses one that fails them; vat_ids.py)."""
    digits = str(number)
    if prefix == "FR":
        return valid_vat_id(prefix, digits[:2] + digits)  # two check digits, then a SIREN
    if prefix == "IT":
        return valid_vat_id(prefix, digits + digits[:2])  # eleven digits
    if prefix == "NL":
        return valid_vat_id(prefix, digits, suffix="B01")
    if prefix == "ES":
        return valid_vat_id(prefix, digits[:8], lead="B")  # a company's CIF
    return valid_vat_id(prefix, digits)


# Number formats: 1,234.56 / 1.234,56 / 1 234,56 / 1'234.56
FORMATS = ("en", "de", "fr", "ch")
# Where the page puts its parties and its number:
# - "letterhead": the seller's name on top, the VAT id in a one-line footer;
# - "buyer_vat": the buyer's block prints the buyer's own VAT id, above the seller's legal footer;
# - "footer_seller": no letterhead, the buyer's window address first; the seller is named only
#   in the legal footer, which also carries the seller's VAT id;
# - "heading_number": no labelled number: a bare "No. …" under the heading, the date under it.
VARIANTS = ("letterhead", "buyer_vat", "footer_seller", "heading_number")
# Drawn only for the ranker's training (issue 40), so the pages other benchmarks read stay the same:
# - "plain_letterhead": the seller's name in regular body type, its address ending in a country
#   line, the buyer's block at the right, ending in the same country (a domestic invoice);
# - "right_letterhead": a bold letterhead at the top right, address and country under it, and
#   the buyer's block at the left ending in a country.
TRAINING_VARIANTS = (*VARIANTS, "plain_letterhead", "right_letterhead")
COUNTRY_BY_LANG = {
    "en": "United Kingdom",
    "de": "Deutschland",
    "fr": "France",
    "nl": "Nederland",
    "it": "Italia",
    "es": "España",
}


def fmt_amount(value: Decimal, style: str) -> str:
    text = f"{abs(value):,.2f}"
    if style == "de":
        text = text.replace(",", "X").replace(".", ",").replace("X", ".")
    elif style == "fr":
        text = text.replace(",", " ").replace(".", ",")
    elif style == "ch":
        text = text.replace(",", "'")
    return f"-{text}" if value < 0 else text


@dataclass(frozen=True)
class PageCase:
    name: str
    lang: str
    layout: str
    invoice_number: str
    issue_date: dt.date
    currency: str
    seller_name: str
    seller_vat_id: str
    buyer_name: str
    net: Decimal
    tax_rows: tuple[tuple[Decimal, Decimal], ...]  # (rate, tax)
    prepaid: Decimal
    number_format: str
    totals_right: bool
    show_currency: bool
    variant: str = "letterhead"

    @property
    def buyer_vat_id(self) -> str:
        """The buyer's own VAT id (same country as the seller's, a different number)."""
        digits = int("".join(ch for ch in self.seller_vat_id[2:] if ch.isdigit())[:9])
        return page_vat_id(self.seller_vat_id[:2], (digits * 7 + 13) % 900_000_000 + 100_000_000)

    @property
    def tax(self) -> Decimal:
        return sum((t for _, t in self.tax_rows), Decimal("0.00"))

    @property
    def gross(self) -> Decimal:
        return self.net + self.tax

    @property
    def amount_due(self) -> Decimal:
        return self.gross - self.prepaid


SELLERS = (
    "Halvorsen Metaalwerk B.V.",
    "Officine Ruggeri S.r.l.",
    "Talleres Ebro S.L.",
    "Brightwater Tools Ltd",
    "Kessler Haustechnik GmbH",
    "Atelier Morvan SARL",
    "Lindqvist Design AB",
    "Pereira Consulting SA",
)
_BUYERS = (
    "Northfield Bakery",
    "Stadtwerke Talheim",
    "Café du Marché",
    "Hotel Zonneweide",
    "Bar Centrale",
    "Ferretería López",
)


def page_cases(seed: int, count: int, variants: tuple[str, ...] = VARIANTS) -> list[PageCase]:
    rng = random.Random(seed)
    out: list[PageCase] = []
    langs = tuple(PAGE_LABELS)
    for i in range(count):
        lang = langs[i % len(langs)]
        rates = rng.choice(
            ((Decimal(19),), (Decimal(21), Decimal(9)), (Decimal(20),), (Decimal(22), Decimal(10)))
        )
        net_parts = [Decimal(rng.randint(500, 400_000)) / 100 for _ in rates]
        rows = tuple(
            (r, (n * r / 100).quantize(Decimal("0.01"))) for r, n in zip(rates, net_parts, strict=True)
        )
        net = sum(net_parts, Decimal("0.00"))
        gross = net + sum((t for _, t in rows), Decimal(0))
        prepaid = (gross * Decimal(rng.choice((0, 0, 0.3, 0.5)))).quantize(Decimal("0.01"))
        out.append(
            PageCase(
                name=f"page-{i:03d}-{lang}",
                lang=lang,
                layout=f"{lang}-{'right' if i % 2 else 'left'}-{variants[(i // len(langs)) % len(variants)]}",
                invoice_number=f"{rng.choice(('INV', 'RE', 'F', 'FV', 'FA'))}-{rng.randint(2020, 2026)}-{rng.randint(1, 99999):05d}",
                issue_date=dt.date(2025, 1, 1) + dt.timedelta(days=rng.randint(0, 300)),
                currency=CURRENCY_BY_LANG[lang],
                seller_name=rng.choice(SELLERS),
                seller_vat_id=page_vat_id(VAT_PREFIX[lang], rng.randint(100_000_000, 999_999_999)),
                buyer_name=rng.choice(_BUYERS),
                net=net,
                tax_rows=rows,
                prepaid=prepaid,
                number_format=rng.choice(FORMATS),
                totals_right=i % 2 == 1,
                show_currency=rng.random() < 0.7,
                variant=variants[(i // len(langs)) % len(variants)],
            )
        )
    return out


def _date(value: dt.date, lang: str) -> str:
    if lang == "en":
        return value.isoformat()
    if lang in ("nl", "es", "it"):
        return value.strftime("%d-%m-%Y") if lang == "nl" else value.strftime("%d/%m/%Y")
    return value.strftime("%d.%m.%Y") if lang == "de" else value.strftime("%d/%m/%Y")


def page_pdf(case: PageCase, *, grow: int = 0, items: int = 0, labels: PageLabels | None = None) -> bytes:
    """The page; `grow` extra lines push everything under the letterhead down (a longer address),
    `items` item rows push the totals further (a longer invoice), `labels` replace the language's
    (a vendor's own wording). All left out: the page as always."""
    pdf = FPDF(format="A4")
    pdf.set_creation_date(FIXED_PDF_DATE)
    pdf.set_auto_page_break(False)  # the legal footer sits below fpdf's default bottom margin
    pdf.add_page()
    page = _PageDrawing(pdf, case, labels or PAGE_LABELS[case.lang], top=6.0 * grow)
    _letterhead_and_address(page, grow)
    _item_rows(page, items)
    _heading_and_header(page)
    _totals(page, items)
    _legal_footer(page)
    out = io.BytesIO()
    pdf.output(out)
    return out.getvalue()


@dataclass(frozen=True)
class _PageDrawing:
    """A page case being drawn, in the order fpdf writes it (the PDF's bytes depend on it)."""

    pdf: FPDF
    case: PageCase
    labels: PageLabels
    top: float  # how far a longer address pushes everything under the letterhead down


def _letterhead_and_address(page: _PageDrawing, grow: int) -> None:
    """The seller's letterhead (not on a footer-seller page) and the buyer's address block."""
    pdf, case, lab = page.pdf, page.case, page.labels
    if case.variant in ("plain_letterhead", "right_letterhead"):
        _letterhead_with_countries(page)
        return
    if case.variant != "footer_seller":
        pdf.set_font("Helvetica", "B", 15)
        pdf.set_xy(20, 15)
        pdf.cell(100, 8, case.seller_name)
        pdf.set_font("Helvetica", "", 9)
        pdf.set_xy(20, 24)
        pdf.cell(100, 5, "Industrieweg 4, 1234 AB Stad")
    pdf.set_font("Helvetica", "", 10)
    buyer = case.buyer_name if case.variant != "footer_seller" else f"{case.buyer_name} GmbH"
    address = [f"{lab.bill_to}:", buyer, *(f"Afdeling {k + 1}" for k in range(grow)), "Marktplein 7"]
    if case.variant == "buyer_vat":
        address.append(f"{lab.vat}: {case.buyer_vat_id}")
    for k, text in enumerate(address):
        pdf.set_xy(20, 45 + 6 * k)
        pdf.cell(60, 5, text)


def _letterhead_with_countries(page: _PageDrawing) -> None:
    """The training-only letterheads: the seller's block (plain at the left, or bold at the right)
    and the buyer's on the other side, each address ending in its country."""
    pdf, case, lab = page.pdf, page.case, page.labels
    plain = case.variant == "plain_letterhead"
    seller_x, buyer_x = (20, 110) if plain else (110, 20)
    pdf.set_font("Helvetica", "" if plain else "B", 10 if plain else 13)
    pdf.set_xy(seller_x, 15)
    pdf.cell(80, 6, case.seller_name)
    pdf.set_font("Helvetica", "", 10 if plain else 9)
    for k, text in enumerate(("Industrieweg 4", "1234 AB Stad", COUNTRY_BY_LANG[case.lang])):
        pdf.set_xy(seller_x, 21 + 5 * k)
        pdf.cell(80, 5, text)
    pdf.set_font("Helvetica", "", 10)
    # A domestic invoice: the buyer's country is the seller's (printed twice on the page).
    for k, text in enumerate(
        (f"{lab.bill_to}:", case.buyer_name, "Marktplein 7", COUNTRY_BY_LANG[case.lang])
    ):
        pdf.set_xy(buyer_x, 15 + 5 * k if plain else 45 + 6 * k)
        pdf.cell(60, 5, text)


def _item_rows(page: _PageDrawing, items: int) -> None:
    for k in range(items):
        page.pdf.set_xy(20, 104 + page.top + 6 * k)
        page.pdf.cell(150, 5, f"{k + 1}. Service item {k + 1}")


def _heading_and_header(page: _PageDrawing) -> None:
    """The heading, then number and dates: labelled in a header block, or (heading_number) the
    number and issue date under the heading with only the due date labelled."""
    pdf, case, lab, top = page.pdf, page.case, page.labels, page.top
    pdf.set_font("Helvetica", "B", 16)
    pdf.set_xy(20, 80 + top)
    pdf.cell(80, 8, lab.heading)
    pdf.set_font("Helvetica", "", 10)
    due_date = case.issue_date + dt.timedelta(days=30)
    if case.variant == "heading_number":
        pdf.set_xy(20, 89 + top)
        pdf.cell(80, 5, f"{lab.number_mark} {case.invoice_number}")
        pdf.set_xy(20, 95 + top)
        pdf.cell(80, 5, _date(case.issue_date, case.lang))
        header = [(lab.due_date, _date(due_date, case.lang))]
    else:
        header = [
            (lab.number, case.invoice_number),
            (lab.issue, _date(case.issue_date, case.lang)),
            (lab.due_date, _date(due_date, case.lang)),
        ]
    for k, (label, value) in enumerate(header):
        pdf.set_xy(110, 45 + top + 6 * k)
        pdf.cell(40, 5, f"{label}:")
        pdf.cell(40, 5, value)


def _totals(page: _PageDrawing, items: int) -> None:
    """Net, the tax rows (and their total), gross, and prepaid then due when something was prepaid."""
    pdf, case, lab = page.pdf, page.case, page.labels

    def money(value: Decimal) -> str:
        shown = fmt_amount(value, case.number_format)
        return f"{shown} {case.currency}" if case.show_currency else shown

    rows: list[tuple[str, Decimal]] = [(lab.net, case.net)]
    rows += [(lab.tax.format(rate=f"{rate}"), tax) for rate, tax in case.tax_rows]
    if len(case.tax_rows) > 1:
        rows.append((lab.tax_total, case.tax))
    rows.append((lab.gross, case.gross))
    if case.prepaid:
        rows.append((lab.prepaid, case.prepaid))
        rows.append((lab.due, case.amount_due))
    x = 110 if case.totals_right else 20
    y = 110.0 + page.top + 6 * items
    for label, amount in rows:
        pdf.set_xy(x, y)
        pdf.cell(50, 6, label)
        pdf.cell(35, 6, money(amount), align="R")
        y += 6


def _legal_footer(page: _PageDrawing) -> None:
    """The print stamp, then the seller's name and VAT id: one line, or a three-line legal footer."""
    pdf, case, lab = page.pdf, page.case, page.labels
    pdf.set_font("Helvetica", "", 7)
    pdf.set_xy(20, 270)
    pdf.cell(170, 4, f"{lab.stamp} 02.01.2019")
    if case.variant in ("letterhead", "heading_number", "plain_letterhead", "right_letterhead"):
        pdf.set_xy(20, 276)
        pdf.cell(170, 4, f"{case.seller_name} - {lab.vat}: {case.seller_vat_id}")
    else:
        for k, text in enumerate(
            (
                case.seller_name,
                "Industrieweg 4 - 1234 AB Stad",
                f"{lab.registration} - {lab.vat}: {case.seller_vat_id}",
            )
        ):
            pdf.set_xy(20, 276 + 4 * k)
            pdf.cell(170, 4, text)
