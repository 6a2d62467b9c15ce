"""Business exceptions: usable invoices that a person must see before they are paid.

Two kinds of trouble reach a person (see docs/review.md):

* an **unusable document** is quarantined by `validation.validate_fields` (no number, no total,
  impossible dates, unknown currency...): nothing to decide, the file must be fixed or re-sent
  (a structured e-invoice whose one problem is its currency is held instead, naming BR-CL-04:
  `einvoice_currency_reasons`);
* a **business exception** is a valid document that breaks what an accounts-payable team
  expects. EN 16931 allows a negative invoice total and puts no order between due date and
  issue date, so quarantining those threw away real, valid e-invoices. They are processed and
  end `needs_review` with the reasons below, and are never posted until a person decides.

Pure: no database, no clock unless `today` is left out.

Every reason starts with a machine-readable code, then a colon, then what a person needs to
decide: `negative_total: payable -120.00 EUR on an invoice (type 380); ...`. The CLI's and the
UI's `--reason` filter and the review-queue report group by that code (`reason_code`). The
approve stage adds one reason of its own, `suspected_duplicate of <id>: ...`, which needs the
database and so is not computed here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date, timedelta
from decimal import Decimal

from .doctypes import document_type_of
from .fields import EURO_BY_SHAPE, FieldSource, InvoiceFields
from .identity import BANK_DETAILS_CHANGED, VENDOR_UNCONFIRMED
from .validation import CURRENCY_CODE_LIST_RULE, ValidationProblem, excess_decimals, minor_units

NEGATIVE_TOTAL = "negative_total"
DUE_BEFORE_ISSUE = "due_before_issue"
OVER_LIMIT = "over_approval_limit"
FOREIGN_CURRENCY = "foreign_currency"
STALE_INVOICE = "stale_invoice"
SUSPECTED_DUPLICATE = "suspected_duplicate"
AMOUNT_UNCONFIRMED = "amount_unconfirmed"
CURRENCY_UNKNOWN = "currency_unknown"
DUPLICATE_CHECK_IMPOSSIBLE = "duplicate_check_impossible"
# A person corrected fields (domain/corrections.py): held until a person approves what they typed.
CORRECTED = "corrected"
# A legible page on which the reader did not find (or could not trust) a field validation needs:
# a person reads it off the page and types it (`review correct`), instead of the file being
# quarantined as unusable.
FIELD_UNREAD = "field_unread"
# A vendor layout in shadow read the page differently from the page reader (docs/layouts.md).
LAYOUT_DISAGREES = "layout_disagrees"
# What the document's type code (UNTDID 1001, domain/doctypes.py) says it is: nothing owed (a
# pro-forma), a correction of an earlier invoice, a code nobody classed, or a code that contradicts
# the document's own kind (a credit-note code on an invoice).
NOT_A_CLAIM = "not_a_claim"
CORRECTION = "correction"
UNKNOWN_DOCUMENT_TYPE = "unknown_document_type"
DOCUMENT_TYPE_CONFLICT = "document_type_conflict"
# Amounts the document itself contradicts: more decimals than the currency has, another currency
# than the document's, an amount due that is not grand total - prepaid + rounding (BR-CO-16).
AMOUNT_PRECISION = "amount_precision"
CURRENCY_MISMATCH = "currency_mismatch"
AMOUNT_DUE_MISMATCH = "amount_due_mismatch"
# A structured document that states amounts none of which forms an amount due (BT-115 absent, no
# grand total BT-112 to form it from, BR-CO-16): held for a person to read the amount owed, not
# quarantined as unusable (issue 58).
AMOUNT_DUE_UNFORMED = "amount_due_unformed"
# A structured e-invoice that breaks a fatal rule of the EN 16931 / Factur-X rule set it declares,
# and a Factur-X/ZUGFeRD PDF whose visible page prints a key field differently from its XML
# (domain/einvoice.py, issue 55).
EINVOICE_INVALID = "einvoice_invalid"
PAGE_DISAGREES_WITH_XML = "page_disagrees_with_xml"
# A Factur-X/ZUGFeRD MINIMUM or BASIC WL document, for an org that receives under the German
# e-invoicing rules: no invoice lines, so not an e-invoice there; its page is the invoice.
NOT_AN_EINVOICE = "not_an_einvoice"
# The countries whose e-invoicing rules an org can receive under (ReviewPolicy.einvoice_country).
EINVOICE_COUNTRIES: tuple[str | None, ...] = (None, "DE")
# The Factur-X/ZUGFeRD profiles without invoice lines (BG-25): under the German rules from 2025
# (section 14 UStG, BMF letter of 15 October 2024) they are not e-invoices.
PROFILES_WITHOUT_LINES = ("MINIMUM", "BASIC WL")
# The source entry where a layout in shadow leaves that disagreement (not a field of its own).
SHADOW_SOURCE = "layout_shadow"

# Every code a reason can start with, for argument validation and the docs.
REASON_CODES: tuple[str, ...] = (
    NEGATIVE_TOTAL,
    DUE_BEFORE_ISSUE,
    OVER_LIMIT,
    FOREIGN_CURRENCY,
    STALE_INVOICE,
    SUSPECTED_DUPLICATE,
    AMOUNT_UNCONFIRMED,
    CURRENCY_UNKNOWN,
    DUPLICATE_CHECK_IMPOSSIBLE,
    CORRECTED,
    FIELD_UNREAD,
    VENDOR_UNCONFIRMED,
    BANK_DETAILS_CHANGED,
    LAYOUT_DISAGREES,
    NOT_A_CLAIM,
    CORRECTION,
    UNKNOWN_DOCUMENT_TYPE,
    DOCUMENT_TYPE_CONFLICT,
    AMOUNT_PRECISION,
    CURRENCY_MISMATCH,
    AMOUNT_DUE_MISMATCH,
    AMOUNT_DUE_UNFORMED,
    EINVOICE_INVALID,
    PAGE_DISAGREES_WITH_XML,
    NOT_AN_EINVOICE,
)

_CODE = re.compile(r"^[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class ReviewPolicy:
    """What one org wants a person to look at. The default holds nothing but what is always
    suspicious (negative invoice totals, due before issue).

    * `auto_approve_limit`: a payable total above it (in the invoice's own currency: there is
      no exchange-rate table, so set `home_currency` too when the org is billed in several)
      needs a person's approval. None: no limit.
    * `home_currency`: an invoice in any other currency is held (a typo'd or unexpected
      currency is a classic AP error). None: any known currency is fine.
    * `stale_after_days`: an invoice issued longer ago than this is held (late invoices are
      where duplicate payments and fraud hide). None: no age limit.
    * `default_currency`: the currency of an invoice whose document names none (most scans).
      None: such an invoice is held (`currency_unknown`), because nothing is paid in a
      currency nobody stated.
    * `register_einvoice_vendors`: a vendor's first structured e-invoice registers the vendor
      by itself (the default), or is held as `vendor_unconfirmed` like a page-read one
      (domain/identity.py).
    * `einvoice_country`: the country whose e-invoicing rules the org receives under. "DE": a
      German seller's Factur-X/ZUGFeRD MINIMUM or BASIC WL PDF is read from its page, its XML as
      evidence (`page_is_the_invoice`); one whose page cannot be read is held `not_an_einvoice`.
      None: no country's rules beyond EN 16931.
    """

    auto_approve_limit: Decimal | None = None
    home_currency: str | None = None
    stale_after_days: int | None = None
    default_currency: str | None = None
    register_einvoice_vendors: bool = True
    einvoice_country: str | None = None

    def __post_init__(self) -> None:
        if self.auto_approve_limit is not None and (
            not self.auto_approve_limit.is_finite() or self.auto_approve_limit < 0
        ):
            raise ValueError(
                f"auto_approve_limit must be a non-negative amount, got {self.auto_approve_limit}"
            )
        if self.home_currency is not None and not re.fullmatch(r"[A-Z]{3}", self.home_currency):
            raise ValueError(f"home_currency must be a 3-letter ISO 4217 code, got {self.home_currency!r}")
        if self.default_currency is not None and not re.fullmatch(r"[A-Z]{3}", self.default_currency):
            raise ValueError(
                f"default_currency must be a 3-letter ISO 4217 code, got {self.default_currency!r}"
            )
        if self.einvoice_country not in EINVOICE_COUNTRIES:
            raise ValueError(
                f"einvoice_country must be one of {', '.join(map(str, EINVOICE_COUNTRIES))}, "
                f"got {self.einvoice_country!r}"
            )
        if self.stale_after_days is not None and self.stale_after_days < 1:
            raise ValueError(f"stale_after_days must be at least 1, got {self.stale_after_days}")


DEFAULT_POLICY = ReviewPolicy()


def review_reasons(fields: InvoiceFields, policy: ReviewPolicy, *, today: date | None = None) -> list[str]:
    """Why a person must see this (valid) invoice before it is paid; empty: nothing to see.

    Only called on fields that passed `validate_fields`, so amounts are finite and dates real.
    """
    out: list[str] = []
    payable, currency = fields.payable_total, fields.currency or "?"
    out.extend(document_type_reasons(fields))
    out.extend(einvoice_reasons(fields))
    out.extend(german_profile_reasons(fields, policy))
    out.extend(money_reasons(fields))
    kind = "credit note" if fields.document_type == "credit_note" else "invoice"

    # A credit note may carry either sign (validation.py explains why); an invoice asking for a
    # negative amount is a refund or a correction sent under the wrong type, e.g. a French
    # "avoir" sent as an invoice: a person must say whether to book it as a credit.
    if payable is not None and payable < 0 and fields.document_type == "invoice":
        out.append(
            f"{NEGATIVE_TOTAL}: payable {payable} {currency} on an invoice (type 380); "
            "approve to book it as a credit, or reject and ask the seller for a credit note (type 381)"
        )
    issue, due = fields.issue_date, fields.due_date
    if issue is not None and due is not None and due < issue:
        out.append(
            f"{DUE_BEFORE_ISSUE}: due {due} is {(issue - due).days} day(s) before issue {issue}; "
            "check the payment terms before paying"
        )
    limit = policy.auto_approve_limit
    if limit is not None and payable is not None and abs(payable) > limit:
        out.append(
            f"{OVER_LIMIT}: payable {payable} {currency} is above the org's auto-approval limit {limit}; "
            "a person approves it"
        )
    home = policy.home_currency
    if home is not None and fields.currency is not None and fields.currency != home:
        out.append(
            f"{FOREIGN_CURRENCY}: {kind} in {fields.currency}, the org pays in {home}; check the currency"
        )
    if policy.stale_after_days is not None and issue is not None:
        today = today or date.today()
        if issue < today - timedelta(days=policy.stale_after_days):
            out.append(
                f"{STALE_INVOICE}: issued {issue}, more than {policy.stale_after_days} day(s) ago; "
                "check it was not paid already"
            )
    shadow = fields.sources.get(SHADOW_SOURCE)
    if shadow is not None and shadow.reason:
        out.append(
            f"{LAYOUT_DISAGREES}: {shadow.reason}; correct what is wrong and approve: approving a page "
            "the layout reads as approved makes it active"
        )
    return out


def document_type_reasons(fields: InvoiceFields) -> list[str]:
    """What the stated type code (BT-3) says a person must decide: a document that is no claim,
    a correction, or a code the table does not know is never posted by itself. No code (a
    page-read document, a JSON one without it): nothing here, as before."""
    code = fields.type_code
    if code is None:
        return []
    row = document_type_of(code)
    if row is None:
        return [
            f"{UNKNOWN_DOCUMENT_TYPE}: type code {code!r} is not in the pipeline's document-type table "
            "(docs/formats.md); check what the document is: approve it as an invoice or credit note, "
            "or reject it"
        ]
    what = f"type {code}, {row.label}"
    if row.document_class == "not_a_claim":
        return [
            f"{NOT_A_CLAIM}: {what}: nothing is owed on it, so it is never posted; reject it to file it "
            "as information (the claim is the invoice that follows it)"
        ]
    if row.document_class == "correction":
        refers = fields.preceding_invoice or "an invoice it does not name (no BT-25)"
        of = f" of {fields.preceding_issue_date}" if fields.preceding_issue_date else ""
        return [
            f"{CORRECTION}: {what}: corrects {refers}{of}; decide whether it replaces that invoice "
            "(pay only the difference) or reverses it; it is never paid on top of it"
        ]
    if (row.document_class == "credit_note") != (fields.document_type == "credit_note"):
        kind = "credit note" if fields.document_type == "credit_note" else "invoice"
        return [
            f"{DOCUMENT_TYPE_CONFLICT}: the document is sent as a {kind} but its type code {code} is a "
            f"{row.label}; check whether it is owed or credited before booking it"
        ]
    return []


# Rules named with their text in a reason; the others by id only (all are in einvoice_findings).
_RULES_WITH_TEXT = 5
_RULE_TEXT_CHARS = 160
_RULE_ID_PREFIX = re.compile(r"^\[([^\]]*)\]\s*-?\s*")


def _rule_text(rule_id: str, text: str) -> str:
    """A rule's text, shortened, without the "[BR-CO-10]-" its rule sets begin it with when that is
    its id; the Factur-X rule sets number EN 16931's rules FX-SCH-*, so there the EN 16931 id the
    text names is kept ("FX-SCH-A-000226 [BR-CO-10] Sum of ...")."""
    match = _RULE_ID_PREFIX.match(text)
    if match:
        named = match.group(1).strip()
        text = text[match.end() :] if named == rule_id else f"[{named}] {text[match.end() :]}"
    return text if len(text) <= _RULE_TEXT_CHARS else text[: _RULE_TEXT_CHARS - 1] + "…"


def einvoice_reasons(fields: InvoiceFields) -> list[str]:
    """What the e-invoice's own rules and its own page say a person must see (issue 55): every
    fatal rule it breaks, by id, and every key field its page prints differently from its XML,
    with both values. Warnings hold nothing: they are shown with the invoice (`einvoice_warnings`)."""
    out: list[str] = []
    check = fields.einvoice_check
    if check is not None and check.fatal:
        counts: dict[str, int] = {}
        texts: dict[str, str] = {}
        for finding in check.fatal:
            counts[finding.rule_id] = counts.get(finding.rule_id, 0) + 1
            texts.setdefault(finding.rule_id, _rule_text(finding.rule_id, finding.text))
        named = [
            f"{rule} {texts[rule]}" + (f" (x{counts[rule]})" if counts[rule] > 1 else "")
            for rule in list(counts)[:_RULES_WITH_TEXT]
        ]
        rest = list(counts)[_RULES_WITH_TEXT:]
        more = f"; and {', '.join(rest)}" if rest else ""
        out.append(
            f"{EINVOICE_INVALID}: {'; '.join(named)}{more} ({check.rule_set} {check.version}, profile "
            f"{check.profile}); the original file is kept: ask the seller for a corrected e-invoice and "
            "reject this one, or correct the fields and approve"
        )
    if fields.page_disagreements:
        shown = "; ".join(
            f"{d.field}: the XML says {d.xml_value!r}, the page prints {d.page_value!r} ({d.where})"
            for d in fields.page_disagreements
        )
        recorded = (
            # The page is the invoice (`page_is_the_invoice`): its values are the fields, the XML
            # is the evidence that contradicts them.
            "the ledger would record the page's values while its own XML says otherwise"
            if fields.read_from_page
            else "the ledger would record the XML's values while a person reading the PDF sees the page's"
        )
        out.append(
            f"{PAGE_DISAGREES_WITH_XML}: {shown}; {recorded}: ask the seller, by a channel you already "
            "know, which is right before approving"
        )
    return out


def page_is_the_invoice(fields: InvoiceFields, policy: ReviewPolicy) -> bool:
    """A Factur-X/ZUGFeRD MINIMUM or BASIC WL document from a German seller, for an org that
    receives under the German rules. Those profiles carry no invoice lines, so from 2025 they are
    not e-invoices under section 14 UStG: the invoice is the PDF's page (an "other invoice", which
    the transition still allows for supplies until the end of 2026, 2027 for small sellers), and
    its XML is evidence. The engine reads such a PDF's page as any page-read invoice
    (`engine.page_invoice`); `german_profile_reasons` holds the ones whose page it could not read.

    A seller whose VAT id is another country's is a cross-border supply, which the German
    obligation does not cover: its XML is the invoice. One without a VAT id counts as German
    (unsure: the page is read, or a person looks)."""
    check = fields.einvoice_check
    if policy.einvoice_country != "DE" or check is None or check.profile not in PROFILES_WITHOUT_LINES:
        return False
    seller_vat = (fields.seller_vat_id or "").replace(" ", "").upper()
    return not seller_vat or seller_vat.startswith("DE")


def german_profile_reasons(fields: InvoiceFields, policy: ReviewPolicy) -> list[str]:
    """`page_is_the_invoice`, but its fields are still the XML's: a bare XML of such a profile (no
    page at all), a PDF whose page has no text layer, or one on which the page reader found no
    invoice. Held `not_an_einvoice`: a person reads the page, approves when the fields shown (the
    XML's) agree with it, corrects them, or asks for an EN 16931 e-invoice. A page-read one is not
    held for it: the page reader's own rules and the comparison with its XML apply."""
    if fields.read_from_page or not page_is_the_invoice(fields, policy):
        return []
    check = fields.einvoice_check
    assert check is not None
    return [
        f"{NOT_AN_EINVOICE}: a Factur-X/ZUGFeRD {check.profile} document carries no invoice lines, so "
        "under the German e-invoicing rules this org receives under (section 14 UStG, from 2025) it is "
        "not an e-invoice and its XML is not the invoice: the PDF's page is (a bare XML of this profile "
        "is no invoice at all), and it could not be read here (no page, no text layer, or no invoice "
        "found on it). Check the fields shown (read from the XML) against the page and approve, "
        "or ask the seller for an EN 16931 e-invoice (Factur-X EN16931, XRechnung) and reject this one"
    ]


def einvoice_warnings(fields: InvoiceFields) -> list[str]:
    """The rule set's warnings, shown with the invoice (review page, `show`); they hold nothing."""
    check = fields.einvoice_check
    if check is None:
        return []
    return [f"{w.rule_id} {_rule_text(w.rule_id, w.text)} ({w.location})" for w in check.warnings]


def money_reasons(fields: InvoiceFields) -> list[str]:
    """What stops the amount from being paid as read: money fails closed.

    A payable total read from the page (text layer or OCR) is paid only when the page's own
    arithmetic confirms it (`AmountCheck`); and nothing is paid in an unknown currency (the
    org's `default_currency` fills it in before this runs, when the org has one), nor in one a
    scan only suggests by the seller's country.
    """
    out: list[str] = []
    check = fields.amount_check
    if fields.payable_total is not None and fields.payable_from_page and not (check and check.confirmed):
        why = check.rule if check is not None else "the reader gave no arithmetic check"
        shown = ", ".join(
            f"{c.role} {c.amount} ({c.source.source})" for c in (check.candidates if check else ())[:8]
        )
        out.append(
            f"{AMOUNT_UNCONFIRMED}: payable {fields.payable_total} was read from the page and no arithmetic "
            f"on the page confirms it ({why})"
            + (f"; amounts found: {shown}" if shown else "")
            + "; check the amount due on the document"
        )
    out.extend(_stated_amount_reasons(fields))
    if fields.currency_inferred_on_a_scan:
        source = fields.sources["currency"].source
        why = (
            f"a sign beside the amounts looks like a euro sign, which OCR cannot spell, and the seller's "
            f"VAT country does not confirm {fields.currency}"
            if EURO_BY_SHAPE in source
            else f"the scan shows no currency OCR can read (it cannot spell € or £), so {fields.currency} "
            "is only the seller's VAT country's currency"
        )
        out.append(
            f"{CURRENCY_UNKNOWN}: {why}; check the currency printed on the page, correct it if it differs, "
            "then approve"
        )
    if not fields.currency:
        out.append(
            f"{CURRENCY_UNKNOWN}: no currency on the document ({_reason_of(fields, 'currency')}); "
            "nothing is paid in a currency nobody stated; reject it and ask for a corrected copy, or give "
            "the org a default currency (review policy --default-currency) for documents that name none"
        )
        # Without a currency there is no blocking key: the invoice was compared only with
        # invoices of the very same number (matching.twins), not with differently written ones.
        out.append(
            f"{DUPLICATE_CHECK_IMPOSSIBLE}: without a currency the duplicate check could only compare "
            "invoices of the same number and seller, not differently written numbers of the same invoice"
        )
    return out


def _stated_amount_reasons(fields: InvoiceFields) -> list[str]:
    """Amounts the document contradicts itself on: never rounded, converted or picked by the
    pipeline, since each would be a guess at what the seller meant."""
    out: list[str] = []
    amounts = {
        "payable": fields.payable_total,
        "net": fields.net_total,
        "tax": fields.tax_total,
        "grand total": fields.grand_total,
        "prepaid": fields.prepaid_total,
        "rounding": fields.rounding_total,
    }
    excess = [
        f"{name} {amount}"
        for name, amount in amounts.items()
        if amount is not None and excess_decimals(amount, fields.currency)
    ]
    if excess:
        out.append(
            f"{AMOUNT_PRECISION}: {', '.join(excess)} {fields.currency} has more decimals than "
            f"{fields.currency} has ({minor_units(fields.currency)}); the pipeline does not round money: "
            "ask the seller for a corrected document, or correct the amount and approve"
        )
    if fields.foreign_amounts:
        shown = ", ".join(fields.foreign_amounts[:5])
        more = f" and {len(fields.foreign_amounts) - 5} more" if len(fields.foreign_amounts) > 5 else ""
        out.append(
            f"{CURRENCY_MISMATCH}: the document currency is {fields.currency} but amounts say another "
            f"currency ({shown}{more}); check which currency is owed: nothing is converted"
        )
    # An amount due formed from these very amounts (none stated) agrees with them by construction.
    due, grand = fields.payable_total, fields.grand_total
    if due is not None and grand is not None:
        expected = grand - (fields.prepaid_total or 0) + (fields.rounding_total or 0)
        if expected != due:
            out.append(
                f"{AMOUNT_DUE_MISMATCH}: amount due {due} is not grand total {grand} - prepaid "
                f"{fields.prepaid_total or 0} + rounding {fields.rounding_total or 0} = {expected} "
                "(EN 16931 BR-CO-16); check which amount is owed"
            )
    return out


def unread_reasons(problems: Sequence[ValidationProblem]) -> list[str]:
    """What validation found wrong with a page-read invoice, as review reasons: the page is
    legible, so a person reads the value off it and types it in instead of the file being
    quarantined (`field_unread: invoice_number: ...`)."""
    return [
        f"{FIELD_UNREAD}: {p.field or 'fields'}: {p.reason}; read it off the page and correct it "
        "(review correct, or the review page), then approve"
        for p in problems
    ]


def amount_due_unformed_reasons(
    fields: InvoiceFields, problems: Sequence[ValidationProblem]
) -> list[str] | None:
    """A structured document that states amounts, none of which forms an amount due (a prepaid
    amount without a grand total, say), and has nothing else wrong: held with this reason (a person
    reads the amount owed and types it), never posted at a guess. None otherwise: a document that
    states no amount at all, or with anything else wrong, is unusable as it is."""
    stated = (
        fields.net_total,
        fields.tax_total,
        fields.grand_total,
        fields.prepaid_total,
        fields.rounding_total,
    )
    if not problems or any(p.code != "missing_total" for p in problems) or all(a is None for a in stated):
        return None
    return [
        f"{AMOUNT_DUE_UNFORMED}: {p.reason}: neither stated (BT-115) nor formed from the grand total, "
        "prepaid and rounding amounts (BR-CO-16); read the amount owed on the document and correct "
        "payable_total (review correct), then approve, or reject it"
        for p in problems
    ]


def einvoice_currency_reasons(
    fields: InvoiceFields, problems: Sequence[ValidationProblem]
) -> list[str] | None:
    """A structured e-invoice whose one problem is a currency code outside ISO 4217 breaks EN 16931's
    BR-CL-04 and is held `einvoice_invalid` naming it, as any rule it breaks (issue 55): the file is
    read and kept, and a person can ask the seller and correct the currency or reject it. It cannot
    post as it is: a correction must pass validation and approval waits for one (the duplicate check
    has not run). None for any other document (a JSON file's code is its own data, quarantined) or
    with anything else wrong (unusable as it is; the quarantine reason names BR-CL-04 too).

    The rule sets name BR-CL-04 on UBL (without the code), and on CII the code list is a Factur-X
    rule (FX-SCH-*, left out of a plain CII file's check): the pipeline's own check names it, and
    the code, on every structured e-invoice; the rule set's findings follow."""
    check = fields.einvoice_check
    if check is None or not problems or any(p.code != "unknown_currency" for p in problems):
        return None
    return [
        f"{EINVOICE_INVALID}: {CURRENCY_CODE_LIST_RULE} the invoice currency code (BT-5) "
        f"{fields.currency!r} is not in ISO 4217, the code list EN 16931 requires (checked by the "
        f"pipeline, {check.rule_set or check.skipped or 'no rule set'}); the original file is kept: "
        "ask the seller for a corrected e-invoice and reject this one, or correct the currency "
        "(review correct) and approve",
        *einvoice_reasons(fields),
    ]


def unread_number_copies(originals: Sequence[object], fields: InvoiceFields) -> list[str]:
    """A page whose number was not read may still be a copy: the originals of the same seller,
    amount and date are named (issue 52), so the person who types the number looks there first.
    The duplicate check itself runs once the number is typed, under its locks."""
    return [
        f"{SUSPECTED_DUPLICATE} of {original}: its number was not read, but the seller, the amount "
        f"{fields.payable_total} {fields.currency or ''} and the date match that invoice; check it is not "
        "a copy before typing its number"
        for original in originals
    ]


def with_default_currency(fields: InvoiceFields, policy: ReviewPolicy) -> InvoiceFields:
    """The org's default currency for a document that names none; the fields unchanged otherwise."""
    if fields.currency or policy.default_currency is None:
        return fields
    source = FieldSource(
        "org policy: default currency",
        1.0,
        f"the document names no currency ({_reason_of(fields, 'currency')}); the org's policy says "
        f"{policy.default_currency}",
    )
    return replace(fields, currency=policy.default_currency, sources={**fields.sources, "currency": source})


def _reason_of(fields: InvoiceFields, name: str) -> str:
    source = fields.sources.get(name)
    return (source.reason or source.source) if source is not None else "not read"


def reason_code(reason: str) -> str:
    """The machine-readable code a reason starts with ('' when it has none)."""
    match = _CODE.match(reason)
    return match.group(0) if match else ""
