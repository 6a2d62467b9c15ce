"""Business checks on extracted fields, separate from parsing so they apply to every format.

Decisions (documented here because callers rely on them):

* Errors (quarantine): missing invoice number, missing seller (no business key is possible),
  missing payable total, non-finite amounts, a total above `max_total`, an unknown currency
  code, unparseable or impossible dates. These make the *file* unusable.
* Not errors: a negative payable total on an invoice and a due date before the issue date.
  EN 16931 allows both (a negative invoice, a French "avoir" sent as type 380), so they are
  business exceptions for a person, not broken files: `domain/review.py` holds such invoices
  for review (`needs_review`) instead.
* Credit notes may carry a negative *or* positive total: EN 16931 expects positive amounts with
  the type code carrying the sign, but many ERPs export negative ones; both mean the same.
* Warnings (only returned with `include_warnings=True`): net + tax differing from the payable
  total (legitimate with prepayments and rounding lines, e.g. CII example 2 of EN 16931),
  missing currency or issue date. They never block an invoice on their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Literal

from .fields import FieldSource, InvoiceFields

# Active ISO 4217 codes (list maintained by SIX on behalf of ISO), including fund and
# precious-metal codes because they are formally valid. XTS (testing) and XXX (no currency)
# are left out on purpose: neither can be owed on an invoice.
ACTIVE_CURRENCIES: frozenset[str] = frozenset(
    """
    AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP
    BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB
    EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD
    JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP
    MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR
    RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND
    TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB
    XBC XBD XCD XCG XDR XOF XPD XPF XPT XSU XUA YER ZAR ZMW ZWG
    """.split()
)

# Withdrawn recently enough that archived invoices still carry them (HRK until the 2023 euro
# changeover, ANG until XCG in 2025, ...). Re-processing an old invoice must not quarantine it.
RECENTLY_WITHDRAWN: frozenset[str] = frozenset(
    {"HRK", "ANG", "CUC", "SLL", "ZWL", "VEF", "MRO", "STD", "LTL"}
)

KNOWN_CURRENCIES: frozenset[str] = ACTIVE_CURRENCIES | RECENTLY_WITHDRAWN


def is_known_currency(code: str | None) -> bool:
    return code is not None and code in KNOWN_CURRENCIES


# ISO 4217 minor units (decimals) where they are not 2. Fund and precious-metal codes have none
# ("N.A." in ISO 4217): their amounts are not checked. Every other known currency has 2.
_MINOR_UNITS_NOT_2: dict[str, int | None] = {
    **dict.fromkeys("BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF".split(), 0),
    **dict.fromkeys("BHD IQD JOD KWD LYD OMR TND".split(), 3),
    **dict.fromkeys("CLF UYW".split(), 4),
    **dict.fromkeys("XAG XAU XBA XBB XBC XBD XDR XPD XPT XSU XUA".split()),
}


def minor_units(currency: str | None) -> int | None:
    """How many decimals an amount in this currency can have; None: unknown or not applicable."""
    if not is_known_currency(currency):
        return None
    assert currency is not None
    return _MINOR_UNITS_NOT_2.get(currency, 2)


def excess_decimals(amount: Decimal, currency: str | None) -> bool:
    """The amount has more (non-zero) decimals than its currency has: 119.006 EUR, 1100.55 JPY.
    Trailing zeros are no excess (1100.00 JPY is 1100 yen). Never rounded by the pipeline: which
    way to round is the seller's to say, so such an amount is held."""
    units = minor_units(currency)
    if units is None or not amount.is_finite() or amount.is_zero():
        return False
    exponent = amount.normalize().as_tuple().exponent
    return isinstance(exponent, int) and -exponent > units


# FieldSource.reason prefix the extractors use for a value that was present but unreadable,
# so validation can report "bad date" rather than "missing date".
UNPARSEABLE_PREFIX = "unparseable"

EARLIEST_ISSUE_DATE = date(1990, 1, 1)
MAX_FUTURE = timedelta(days=365)
TOTALS_TOLERANCE = Decimal("0.05")

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class ValidationProblem:
    code: str
    field: str | None
    reason: str
    severity: Severity = "error"


def _unparseable(fields: InvoiceFields, name: str) -> FieldSource | None:
    src = fields.sources.get(name)
    if src is not None and src.reason and src.reason.startswith(UNPARSEABLE_PREFIX):
        return src
    return None


def validate_fields(
    fields: InvoiceFields,
    *,
    max_total: Decimal = Decimal("100000000"),
    today: date | None = None,
    include_warnings: bool = False,
) -> list[ValidationProblem]:
    """Problems that stop the invoice, in field order; warnings only when asked for."""
    out = [
        *_identity_problems(fields),
        *_amount_problems(fields, max_total),
        *_currency_problems(fields),
        *_date_problems(fields, today or date.today()),
        *_totals_problems(fields),
    ]
    if include_warnings:
        return sorted(out, key=lambda p: p.severity != "error")
    return [p for p in out if p.severity == "error"]


def _identity_problems(fields: InvoiceFields) -> list[ValidationProblem]:
    """No invoice number (duplicates could not be found), or nothing that names the vendor."""
    out = []
    if not (fields.invoice_number or "").strip():
        out.append(
            ValidationProblem(
                "missing_invoice_number",
                "invoice_number",
                "no invoice number found; it is needed to detect duplicates",
            )
        )
    if not (fields.seller_name or "").strip() and not (fields.seller_vat_id or "").strip():
        out.append(
            ValidationProblem(
                "missing_seller",
                "seller_name",
                "neither seller name nor seller VAT id found; cannot identify the vendor",
            )
        )
    return out


def _amount_problems(fields: InvoiceFields, max_total: Decimal) -> list[ValidationProblem]:
    """Amounts that are not numbers, no payable total, or one beyond the plausibility limit."""
    out = []
    amounts = {
        "net_total": fields.net_total,
        "tax_total": fields.tax_total,
        "payable_total": fields.payable_total,
    }
    for name, value in amounts.items():
        bad = _unparseable(fields, name)
        if bad is not None:
            reason = f"{name} is not a number ({bad.reason}); correct the amount at the source"
            out.append(ValidationProblem("bad_amount", name, reason))
        elif value is not None and not value.is_finite():
            reason = f"{name} is {value}, not a finite amount; correct the amount at the source"
            out.append(ValidationProblem("bad_amount", name, reason))

    payable = fields.payable_total
    if payable is None and _unparseable(fields, "payable_total") is None:
        src = fields.sources.get("payable_total")
        hint = f" ({src.reason})" if src and src.reason else ""
        reason = f"no payable total found{hint}; the amount due is required"
        out.append(ValidationProblem("missing_total", "payable_total", reason))
    elif payable is not None and payable.is_finite() and abs(payable) > max_total:
        reason = f"total {payable} exceeds the plausibility limit {max_total}; check for a misplaced decimal separator"
        out.append(ValidationProblem("amount_too_large", "payable_total", reason))
    return out


# EN 16931's rule for the invoice currency code (BT-5): a code of ISO 4217, the list checked here.
CURRENCY_CODE_LIST_RULE = "BR-CL-04"


def _currency_problems(fields: InvoiceFields) -> list[ValidationProblem]:
    """No currency (a warning), or one that is not ISO 4217."""
    if fields.currency is None:
        return [ValidationProblem("missing_currency", "currency", "no currency code found", "warning")]
    if not is_known_currency(fields.currency):
        reason = (
            f"currency {fields.currency!r} is not an ISO 4217 code (EN 16931 {CURRENCY_CODE_LIST_RULE}); "
            "expected e.g. EUR, USD, GBP"
        )
        return [ValidationProblem("unknown_currency", "currency", reason)]
    return []


def _date_problems(fields: InvoiceFields, today: date) -> list[ValidationProblem]:
    """Dates that are no calendar date, no issue date (a warning), or an implausible one."""
    out = []
    for name in ("issue_date", "due_date"):
        bad = _unparseable(fields, name)
        if bad is not None:
            out.append(
                ValidationProblem("bad_date", name, f"{name} is not a real calendar date ({bad.reason})")
            )
    issue = fields.issue_date
    if issue is None and _unparseable(fields, "issue_date") is None:
        out.append(ValidationProblem("missing_issue_date", "issue_date", "no issue date found", "warning"))
    if issue is not None:
        if issue < EARLIEST_ISSUE_DATE:
            reason = f"issue date {issue} is before {EARLIEST_ISSUE_DATE}; probably mistyped"
            out.append(ValidationProblem("bad_date", "issue_date", reason))
        elif issue > today + MAX_FUTURE:
            reason = f"issue date {issue} is more than a year in the future; probably mistyped"
            out.append(ValidationProblem("bad_date", "issue_date", reason))
    return out


def _totals_problems(fields: InvoiceFields) -> list[ValidationProblem]:
    """Net + tax that differs from the payable total (a warning: prepayments and rounding exist)."""
    net, tax, payable = fields.net_total, fields.tax_total, fields.payable_total
    if (
        net is not None
        and tax is not None
        and payable is not None
        and all(v.is_finite() for v in (net, tax, payable))
        and abs(net + tax - payable) > TOTALS_TOLERANCE
    ):
        reason = (
            f"net {net} + tax {tax} = {net + tax} differs from payable {payable} "
            "(fine when prepayments or rounding apply)"
        )
        return [ValidationProblem("totals_mismatch", "payable_total", reason, "warning")]
    return []


def posting_gaps(fields: InvoiceFields) -> list[str]:
    """What posting needs and these fields lack: checked before an invoice is approved (by the
    pipeline or a person), so that posting never fails for missing data."""
    gaps = []
    if fields.payable_total is None or not fields.payable_total.is_finite():
        gaps.append("a payable total")
    if not fields.currency:
        gaps.append("a currency")
    return gaps
