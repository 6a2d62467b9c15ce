"""Reading by role: which number is the invoice's, which date is its issue date, which party and
which VAT id are the seller's. Layout texts as `pdf.layout_text` writes them (columns apart by
three or more spaces); each case is a way real pages fooled the reader before.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from invoice_pipeline.documents.reading.amounts import EXEMPT, find_amounts, resolve
from invoice_pipeline.documents.reading.page_values import currency_of_vat_id
from invoice_pipeline.documents.reading.parties import name_like
from invoice_pipeline.documents.reading.words import TextBoxes
from invoice_pipeline.documents.text_fields import fields_from_text, hand_fields_from_text, looks_like_invoice
from invoice_pipeline.domain.fields import FieldSource

TOTALS = """
                                                  Total HT        1 000,00 EUR
                                                  TVA 20 %          200,00 EUR
                                                  Total TTC       1 200,00 EUR
"""


def test_a_label_inside_a_sentence_does_not_read_the_line_below() -> None:
    text = (
        "Atelier Rive SARL\n"
        + TOTALS
        + "Mode de règlement : virement en indiquant le numéro de facture\n"
        + "            2, rue de la Paix – 75000 Paris – Tel: +33 1 01 12 34 56\n"
    )
    fields = fields_from_text(text)
    assert fields.invoice_number is None
    assert fields.sources["invoice_number"].reason


def test_the_number_and_date_under_a_heading_and_a_due_date_label_that_says_date() -> None:
    text = (
        "                                                            FACTURE\n"
        "                                                            20/09/2023\n"
        "                                                            nº 2023-6013\n"
        "Atelier Rive SARL\n" + TOTALS + "Date limite de règlement : 19/10/2023\n"
    )
    fields = fields_from_text(text)
    assert fields.invoice_number == "2023-6013"
    assert fields.issue_date == dt.date(2023, 9, 20)


def test_a_compact_date_is_read_after_a_date_label_only() -> None:
    labelled = fields_from_text("FACTURE\nN° FA-1\nDate : 20260815 · Échéance : 20260914\n" + TOTALS)
    assert (labelled.issue_date, labelled.due_date) == (dt.date(2026, 8, 15), dt.date(2026, 9, 14))
    # The same digits inside a number are not a date.
    unlabelled = fields_from_text("Invoice number: RE-20170509/505\n" + TOTALS)
    assert unlabelled.issue_date is None


def test_a_print_or_version_stamp_is_not_the_issue_date() -> None:
    fields = fields_from_text("Rechnungsnummer: 4711\n" + TOTALS + "Stylesheet-Version 3 vom 02.01.2019\n")
    assert fields.issue_date is None


def test_the_seller_is_the_legal_footer_not_the_company_in_the_address_window() -> None:
    text = (
        "Rechnungsempfänger:                                  Rechnungsnummer:     R-77\n"
        "Bar Centrale GmbH                                    Rechnungsdatum:      04.02.2025\n"
        "Marktplein 7\n" + TOTALS + "\n" * 4 + "Brightwater Tools Ltd\n"
        "Industrieweg 4 - 1234 AB Stad\n"
        "Amtsgericht Talheim HRB 51733 - Geschäftsführer: J. Kessler - USt-IdNr.: DE514539285\n"
    )
    fields = fields_from_text(text)
    assert fields.seller_name == "Brightwater Tools Ltd"
    assert "legal footer" in fields.sources["seller_name"].source
    assert fields.seller_vat_id == "DE514539285"


def test_a_footer_name_ending_in_a_number_after_its_legal_form_is_the_seller() -> None:
    """A Dutch customer label ("Klant") names the buyer, and a company whose name goes on after
    its legal form ("Ltd 15") is still a name; a postcode with letters ("1234 AB") is not."""
    text = (
        "Klant:                                               Factuurnummer:       RE-2024-15343\n"
        "Stadtwerke Talheim GmbH                              Factuurdatum:        11-06-2025\n"
        "Marktplein 7\n" + TOTALS + "\n" * 4 + "Afgedrukt op 02.01.2019\n"
        "Brightwater Tools Ltd 15\n"
        "1234 AB Stad - Industrieweg 4\n"
        "KvK 30127731 - BTW-nummer: NL413130981\n"
    )
    fields = fields_from_text(text)
    assert fields.buyer_name == "Stadtwerke Talheim GmbH"
    assert fields.seller_name == "Brightwater Tools Ltd 15"
    assert "legal footer" in fields.sources["seller_name"].source
    assert name_like("1234 AB Stad") is None
    assert name_like("Industrieweg 4") is None


def test_the_buyers_vat_id_loses_to_the_sellers() -> None:
    in_buyer_block = (
        "Société Hôtelière du Pacano\n"
        "                                           Securibox SARL\n"
        "                                           27, Rue de Bassano\n"
        "                                           TVA : FR38500003710\n"
        + TOTALS
        + "Société Hôtelière du Pacano\n"
        "2, rue de la Paix – 75000 Paris\n"
        "SASU au capital de 200000€ - SIRET 12345682400016 – TVA FR40123456824\n"
    )
    fields = fields_from_text(in_buyer_block)
    assert fields.seller_name == "Société Hôtelière du Pacano"
    assert fields.seller_vat_id == "FR40123456824"

    among_customer_references = (
        "Hetzner Online GmbH • Industriestr. 25 • 91710 Gunzenhausen\n"
        "Usegroup                                              Kundennummer: K0100077603\n"
        "Huswertstr. 14                                        USt-IdNr.: DE199952957\n"
        "                                                      Rechnungsnummer: R0005532486\n"
        + TOTALS
        + "Registergericht Ansbach, HRB 6089\n"
        "USt-IdNr. DE812871812\n"
    )
    assert fields_from_text(among_customer_references).seller_vat_id == "DE812871812"


def test_a_bare_tax_word_reads_only_a_well_formed_vat_id() -> None:
    fields = fields_from_text("Invoice No: 42\n" + TOTALS + "Footer Ltd - TVA EUR 1 234 567,00\n")
    assert fields.seller_vat_id is None


def test_the_currency_from_a_vat_id_follows_the_countrys_changeover() -> None:
    assert currency_of_vat_id("BG123456789", dt.date(2025, 12, 31)) == "BGN"
    assert currency_of_vat_id("BG123456789", dt.date(2026, 1, 2)) == "EUR"
    assert currency_of_vat_id("BG123456789", None) is None  # ambiguous: held, not guessed
    assert currency_of_vat_id("ATU12345678", None) == "EUR"


def test_each_tax_breakdown_is_summed_on_its_own() -> None:
    """A rate table with a net column and a tax column under tax-ish headers: only the tax column
    adds up to the tax total, and that confirms the gross. A breakdown that adds up to nothing
    still fails closed."""
    text = (
        "Nettobetrag: 496,00 €\n"
        "zuzüglich Umsatzsteuer\n"
        " USt. Satz              Nettopreis          Ust.-Betrag\n"
        " 7%                     160,00 €            11,20 €\n"
        " 19%                    336,00 €            63,84 €\n"
        "                      USt. Gesamt: 75,04 €\n"
        "Gesamtbetrag: 571,04 €\n"
    )

    def check(page: str) -> tuple[bool, Decimal | None]:
        res = resolve(
            find_amounts(page), exempt=EXEMPT.search(page) is not None, source_of=lambda f: FieldSource("t")
        )
        return res.check.confirmed, res.payable.amount if res.payable else None

    assert check(text) == (True, Decimal("571.04"))
    assert check(text.replace("63,84 €", "62,84 €"))[0] is False


def test_a_right_aligned_total_in_larger_type_is_read_under_its_label_by_the_boxes() -> None:
    """The layout text places a segment by where it starts, in characters of one width: a total
    in larger type, right-aligned under its header, starts left of the header in the text though
    its cell lies under it on the page. With the boxes the column is measured on the page."""
    text = (
        "Invoice number: 4711\n"
        "Invoice date: 2024-03-01\n"
        f"{'DUE BY':<60}TOTAL DUE\n"
        f"{'10 May 2024':<45}€1,250.00\n"
    )
    boxes = TextBoxes(
        (
            ((40.0, 40.0, 160.0, 50.0),),
            ((40.0, 55.0, 160.0, 65.0),),
            ((40.0, 300.0, 90.0, 310.0), (330.0, 300.0, 390.0, 310.0)),
            ((40.0, 315.0, 110.0, 325.0), (300.0, 313.0, 390.0, 329.0)),  # 16 pt, right-aligned
            (),
        )
    )
    assert hand_fields_from_text(text).payable_total is None  # in characters: another column
    assert hand_fields_from_text(text, boxes=boxes).payable_total == Decimal("1250.00")
    # Boxes that do not overlap on the page are not one column, however the text lines up.
    apart = TextBoxes(boxes.lines[:3] + (((40.0, 315.0, 110.0, 325.0), (200.0, 315.0, 280.0, 325.0)), ()))
    assert hand_fields_from_text(text, boxes=apart).payable_total is None


def test_a_contact_line_is_no_sender_and_a_footer_label_is_no_seller() -> None:
    contact = (
        "billing@example.org | +49 30 1234567 | www.example.org\n"
        "Nordlicht Werkstatt GmbH\n"
        "Rechnungsnummer: R-77\n" + TOTALS
    )
    seller = hand_fields_from_text(contact)
    assert seller.seller_name == "Nordlicht Werkstatt GmbH"
    assert "legal form" in seller.sources["seller_name"].source
    # A label whose colon stands apart from it ("Échéance      : date") heads no footer.
    footer = (
        "Facture n° F-12\n" + TOTALS + "\n" * 4 + "Échéance                  : 05-08-2024\n"
        "Atelier Rive SARL\n"
        "2, rue de la Paix, 75000 Paris\n"
        "SARL au capital de 10 000 € - RCS Paris 123 456 789\n"
    )
    assert hand_fields_from_text(footer).seller_name == "Atelier Rive SARL"
    # Nor does one whose colon OCR lost: a name is followed by an address, not by a date or a sum.
    for label, value in (("Date decheance", "05-08-2024"), ("Montant TTC", "1.200,00")):
        lost_colon = footer.replace("Échéance                  : 05-08-2024", f"{label}        {value}")
        assert hand_fields_from_text(lost_colon).seller_name == "Atelier Rive SARL", label


def test_a_printed_currency_the_pipeline_does_not_take_is_not_replaced_by_the_sellers_country() -> None:
    page = (
        "Rechnungsnummer: 4711\n"
        "Währung                DEM\n"
        + TOTALS.replace(" EUR", "")
        + "Nordlicht Werkstatt GmbH - USt-IdNr. DE136695976\n"
    )
    withdrawn = hand_fields_from_text(page)
    assert withdrawn.seller_vat_id == "DE136695976"
    assert withdrawn.currency is None
    assert "'DEM'" in (withdrawn.sources["currency"].reason or "")
    # Printed and taken: read as printed; not printed at all: the seller's country stands in.
    assert hand_fields_from_text(page.replace("DEM", "CHF")).currency == "CHF"
    assert hand_fields_from_text(page.replace("Währung                DEM\n", "")).currency == "EUR"


# An insurer's premium invoice, its French notice of premium due, and a utility's instalment
# (Abschlags-) invoice: invoices, read as such, never `not_an_invoice` (issue 40). The words are
# the document types' own, in their languages; the companies are made up.
PREMIUM_AND_INSTALMENT_INVOICES = {
    "de_insurance": """Nordsee Versicherung AG · Hafenweg 3 · 20457 Hamburg
                                                   Beitragsrechnung Nr. BR-2026-0815
                                                   Datum: 01.02.2026
Versicherungsschein-Nr. 44 123 567
Zeitraum 01.02.2026 - 31.01.2027
                                       Jahresbeitrag netto          500,00 EUR
                                       Versicherungsteuer 19 %       95,00 EUR
                                       zu zahlender Beitrag         595,00 EUR
""",
    "en_premium": """Harbour Mutual Insurance Ltd · 4 Quay Street · Bristol BS1 4DJ
                                                   Premium notice no. PN-77812
                                                   Date: 3 March 2026
Policy number: HM-55-1200
                                       Annual premium               1,200.00 GBP
                                       Insurance premium tax 12 %     144.00 GBP
                                       Premium due                  1,344.00 GBP
""",
    "de_abschlag": """Stadtwerke Beispielstadt GmbH · Am Werk 1 · 12345 Beispielstadt
                                                   Abschlagsrechnung Nr. 2026-000123
                                                   Datum: 15.01.2026
                                       Abschlag Strom Januar 2026    84,03 EUR
                                       USt 19 %                      15,97 EUR
                                       Abschlagsbetrag              100,00 EUR
""",
    "fr_echeance": """Mutuelle du Littoral · 8 quai des Chartrons · 33000 Bordeaux
                                                   Avis d'échéance n° AE-2026-0042
                                                   Date : 05/01/2026
                                       Cotisation annuelle HT       400,00 EUR
                                       Taxe 9 %                      36,00 EUR
                                       Cotisation à payer           436,00 EUR
""",
}


def test_premium_notices_and_instalment_invoices_are_invoices() -> None:
    expected = {
        "de_insurance": ("BR-2026-0815", Decimal("595.00")),
        "en_premium": ("PN-77812", Decimal("1344.00")),
        "de_abschlag": ("2026-000123", Decimal("100.00")),
        "fr_echeance": ("AE-2026-0042", Decimal("436.00")),
    }
    for kind, text in PREMIUM_AND_INSTALMENT_INVOICES.items():
        assert looks_like_invoice(text), kind
        fields = fields_from_text(text)
        assert (fields.invoice_number, fields.payable_total) == expected[kind], kind


def test_a_weight_in_kilograms_is_no_company() -> None:
    # "KG" is a legal form after a name, and a unit after a number (a real scan read a weight
    # as the seller).
    text = (
        "                                                            Rechnung Nr. 2026-4411\n"
        "                                                            Datum: 07.01.2026\n"
        "Gross Weight                412,250 KG\n"
        "Net Weight                  398,100 KG\n" + TOTALS
    )
    fields = hand_fields_from_text(text)
    assert fields.seller_name is None, fields.seller_name
    assert fields.invoice_number == "2026-4411"
