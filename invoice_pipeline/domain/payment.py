"""The payment decision: may this invoice be paid, to whom, into which account. Pure: no database.

Dedupe answers "was this paid before?" in one transaction under advisory locks on the keys of
its match rule. This module answers "whom do we pay?" the same way: `decide_payment` is called
in the fenced transaction that posts (engine/store/payments.py), under advisory locks on the
invoice's identity keys (`identity_lock_id`), with the registry and the org's own identity as
they are at that moment (`PaymentFacts`). The approval stage and a person's approval call the
same function earlier, to hold sooner and to show a person the reasons; only the posting
decides.

Every reason has a code, a subject and a text. The subject is what a person vouches for when
they approve: the IBAN of `bank_details_changed`, the identity of `vendor_unconfirmed`, the
vendors of `possible_impersonation`. A person's approval is recorded as the (code, subject)
pairs they were shown (`vouch`); at posting, any reason of that moment that is not among them
holds the invoice again, with the reason of now. Some reasons can never be vouched for
(`NOT_VOUCHABLE`): the org's own identity as the seller, an IBAN that fails its check digits, a
document that claims nothing or corrects another, an impossible amount or currency.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from .corrected_invoices import CorrectionChoice
from .fields import InvoiceFields
from .identity import (
    BANK_DETAILS_CHANGED,
    VENDOR_UNCONFIRMED,
    Identifier,
    IdentifierKind,
    OrgProfile,
    Vendor,
    iban_valid,
    normalise,
)
from .keys import hash64
from .review import (
    AMOUNT_PRECISION,
    CORRECTION,
    CURRENCY_MISMATCH,
    NOT_A_CLAIM,
    SUSPECTED_DUPLICATE,
    ReviewPolicy,
    reason_code,
    review_reasons,
)

POSSIBLE_IMPERSONATION = "possible_impersonation"
OWN_IDENTITY_AS_SELLER = "own_identity_as_seller"
VENDOR_IDENTITY_CONFLICT = "vendor_identity_conflict"
IBAN_INVALID = "iban_invalid"
DUPLICATE_UNDECIDED = "duplicate_undecided"

# A person cannot vouch for these: paying the org itself, into an account number that cannot
# exist, an amount with more decimals than its currency has or in another currency than the
# document's, a document that claims nothing, or a correction on top of the invoice it corrects
# (issue 58: whether it replaces or reverses the original is not decided by a plain approval)
# is wrong whoever approves it. The person corrects the field or rejects the invoice.
NOT_VOUCHABLE = frozenset(
    {OWN_IDENTITY_AS_SELLER, IBAN_INVALID, NOT_A_CLAIM, CORRECTION, AMOUNT_PRECISION, CURRENCY_MISMATCH}
)

# The codes of this module, listed beside domain/review.REASON_CODES where a person is told the codes.
PAYMENT_REASON_CODES: tuple[str, ...] = (
    POSSIBLE_IMPERSONATION,
    OWN_IDENTITY_AS_SELLER,
    VENDOR_IDENTITY_CONFLICT,
    IBAN_INVALID,
    DUPLICATE_UNDECIDED,
)

_US = "\x1f"


@dataclass(frozen=True)
class Reason:
    """Why the invoice is not paid now: `text` starts with `code`; `subject` is what vouching for
    it covers ('' for a business exception, which is about the invoice as a whole)."""

    code: str
    subject: str
    text: str

    @property
    def voucher(self) -> str:
        return f"{self.code}{_US}{self.subject}"

    @property
    def vouchable(self) -> bool:
        return self.code not in NOT_VOUCHABLE


@dataclass(frozen=True)
class PaymentFacts:
    """Everything the decision depends on, as read at one moment (inside the posting's
    transaction, under the identity locks, for the decision that counts)."""

    org_id: str
    fields: InvoiceFields
    # The org's vendors owning any of the invoice's identifiers or sharing its seller's name.
    registry: tuple[Vendor, ...]
    profile: OrgProfile
    policy: ReviewPolicy
    duplicate_status: str | None
    duplicate_of: UUID | None = None
    # The person who approved it (None: the pipeline's own approval) and what they vouched for.
    approver: str | None = None
    vouched: frozenset[str] = frozenset()
    # A corrected invoice's approval says whether it replaces or reverses the invoice it corrects
    # (domain/corrected_invoices.py): that choice, not a voucher, decides its `correction` reason.
    correction_choice: CorrectionChoice | None = None


@dataclass(frozen=True)
class Registration:
    """What posting teaches the registry: the vendor (new, or the one owning the identifiers)
    and the identifiers a structured e-invoice or a person vouched for."""

    name: str
    identifiers: tuple[Identifier, ...]
    source: Literal["e-invoice", "approval"]
    actor: str


@dataclass(frozen=True)
class PaymentDecision:
    """Post (to `vendor`, or to what `registration` registers) into `iban`, or hold for `held`."""

    held: tuple[Reason, ...]
    vendor: Vendor | None = None
    registration: Registration | None = None
    iban: str | None = None

    @property
    def posts(self) -> bool:
        return not self.held


def _valid(kind: IdentifierKind, value: str | None) -> Identifier | None:
    if not value:
        return None
    try:
        return Identifier(kind, normalise(kind, value), value)
    except ValueError:
        return None


def seller_identifiers(fields: InvoiceFields) -> list[Identifier]:
    """The valid identifiers the invoice gives in the seller's position: its VAT id, then the IBAN
    it asks to be paid into. An identifier that fails its check digits is none."""
    found = [_valid("vat", fields.seller_vat_id), _valid("iban", fields.payee_iban)]
    return [i for i in found if i is not None]


def seller_name_key(fields: InvoiceFields) -> Identifier | None:
    return _valid("name", fields.seller_name)


def identity_keys(fields: InvoiceFields) -> list[Identifier]:
    """What the payment decision depends on in the registry: each identifier and the name."""
    name = seller_name_key(fields)
    return [*seller_identifiers(fields), *([name] if name else [])]


def identity_lock_id(org_id: str, ident: Identifier) -> int:
    """One identity key's advisory lock: taken by every transaction that reads or writes who owns
    it (the posting, a person's approval, a registration, an import, the org profile). Signed
    64 bits, as the dedupe keys' (domain/keys.hash64)."""
    return hash64(_US.join(("identity", org_id, ident.kind, ident.value)))


def _identity_text(fields: InvoiceFields) -> str:
    shown = [f"{i.kind} {i.shown}" for i in seller_identifiers(fields)]
    return f"{fields.seller_name or 'name not read'}; {', '.join(shown) or 'no valid VAT id or IBAN'}"


def _identity_subject(fields: InvoiceFields) -> str:
    return "|".join(sorted(f"{i.kind}:{i.value}" for i in identity_keys(fields)))


def _vendor_text(vendor: Vendor) -> str:
    vats = ", ".join(vendor.of_kind("vat")) or "no VAT id"
    ibans = ", ".join(vendor.of_kind("iban")) or "no IBAN"
    return f"vendor {vendor.name} (#{vendor.vendor_id}; {vats}; accounts {ibans})"


def own_identity_reasons(fields: InvoiceFields, profile: OrgProfile) -> list[Reason]:
    """The seller is the org itself (by VAT id, IBAN or name): never paid, never a vendor."""
    hits = [i for i in identity_keys(fields) if profile.has(i.kind, i.shown)]
    if not hits:
        return []
    shown = ", ".join(f"{i.kind} {i.shown}" for i in hits)
    return [
        Reason(
            OWN_IDENTITY_AS_SELLER,
            "|".join(f"{i.kind}:{i.value}" for i in hits),
            f"{OWN_IDENTITY_AS_SELLER}: the seller's {shown} is the org's own identity; an org does not pay "
            "itself: reject it, or, if the org profile is wrong, remove that identifier from it "
            "(invoice-pipeline org profile ... remove) and requeue",
        )
    ]


def identifier_reasons(fields: InvoiceFields) -> list[Reason]:
    """An account that cannot exist: an IBAN whose check digits fail is never paid into. (A VAT
    id that fails its check digits, or holds letters that only look Latin, is simply no
    identifier: it confirms, registers and names nobody, and the vendor must be confirmed by
    another; a sender's sample data often carries one, so it is not a reason of its own.)"""
    if fields.payee_iban and not iban_valid(fields.payee_iban):
        return [
            Reason(
                IBAN_INVALID,
                fields.payee_iban,
                f"{IBAN_INVALID}: the IBAN to pay, {fields.payee_iban}, fails its check digits (ISO 13616): "
                "correct it from the document, or ask the vendor by a channel you already know",
            )
        ]
    return []


def duplicate_reasons(facts: PaymentFacts) -> list[Reason]:
    status = facts.duplicate_status
    if status == "original":
        return []
    if status == "suspected":
        return [
            Reason(
                SUSPECTED_DUPLICATE,
                str(facts.duplicate_of),
                f"{SUSPECTED_DUPLICATE} of {facts.duplicate_of}: decide with not-duplicate or confirm-duplicate",
            )
        ]
    return [
        Reason(
            DUPLICATE_UNDECIDED,
            status or "",
            f"{DUPLICATE_UNDECIDED}: the duplicate check's decision is {status or 'missing'}, so whether it was "
            "paid before is not known: correct the fields it needs and requeue",
        )
    ]


@dataclass(frozen=True)
class _WhoIsPaid:
    reasons: tuple[Reason, ...]
    vendor: Vendor | None
    registers: bool  # a structured e-invoice's first invoice registers its vendor
    namesakes: tuple[Vendor, ...] = ()  # registered vendors of the seller's name, none of its identifiers


def owners_of(identifiers: Iterable[Identifier], registry: Sequence[Vendor]) -> list[Vendor]:
    """The vendors owning any of the identifiers, in the identifiers' order."""
    out: list[Vendor] = []
    for ident in identifiers:
        for vendor in registry:
            if vendor.has(ident.kind, ident.value) and vendor not in out:
                out.append(vendor)
    return out


def _owners(fields: InvoiceFields, registry: Sequence[Vendor]) -> list[Vendor]:
    """The vendors owning the invoice's identifiers, strongest identifier first."""
    return owners_of(seller_identifiers(fields), registry)


def confirmed_vendor(
    identifiers: Iterable[Identifier], registry: Sequence[Vendor], profile: OrgProfile
) -> Vendor | None:
    """The vendor these identifiers confirm, as `who_is_paid` confirms one: the identifiers that
    are not the org's own belong to exactly one of its vendors. None when they belong to none or to
    several (a page printing two vendors' identifiers says nothing about which one sent it)."""
    theirs = [i for i in identifiers if i.kind in ("vat", "iban") and not profile.has(i.kind, i.shown)]
    owners = owners_of(theirs, registry)
    return owners[0] if len(owners) == 1 else None


def _confirmed_reasons(fields: InvoiceFields, vendor: Vendor) -> list[Reason]:
    """A vendor confirmed by an identifier: does the rest of the invoice's identity agree?"""
    reasons: list[Reason] = []
    vat = _valid("vat", fields.seller_vat_id)
    if vat is not None and vendor.of_kind("vat") and not vendor.has("vat", vat.value):
        reasons.append(
            Reason(
                VENDOR_IDENTITY_CONFLICT,
                f"{vendor.vendor_id}|vat:{vat.value}",
                f"{VENDOR_IDENTITY_CONFLICT}: the document names {_vendor_text(vendor)} by its account, but "
                f"prints the seller's VAT id {vat.shown}, which is not that vendor's: it names another party; "
                "check who sent it before approving",
            )
        )
    iban = _valid("iban", fields.payee_iban)
    if iban is not None and not vendor.has("iban", iban.value):
        known = ", ".join(vendor.of_kind("iban")) or "none on record"
        reasons.append(
            Reason(
                BANK_DETAILS_CHANGED,
                f"{vendor.vendor_id}|iban:{iban.value}",
                f"{BANK_DETAILS_CHANGED}: the invoice asks to be paid into {fields.payee_iban}, which is not "
                f"an account of vendor {vendor.name} (#{vendor.vendor_id}; known: {known}); confirm the "
                "change with the vendor by a channel you already know before approving",
            )
        )
    return reasons


def _unconfirmed(facts: PaymentFacts) -> _WhoIsPaid:
    """No vendor owns the invoice's identifiers: a namesake, a first e-invoice, or nobody.

    A registered vendor bearing the seller's name is a possible impersonation when anything could
    tell the two apart and does not: the vendor has a VAT id or an account on record, or the
    invoice asks to be paid into an account, or several vendors bear the name. A vendor known by
    its name alone (a vendor master without identifiers, a seller that prints none), named by an
    invoice that asks for no account, is that vendor: nothing is paid into an account nobody
    confirmed."""
    fields, identity = facts.fields, _identity_text(facts.fields)
    name = seller_name_key(fields)
    namesakes = tuple(v for v in facts.registry if name is not None and v.has("name", name.shown))
    known = [v for v in namesakes if v.of_kind("vat") or v.of_kind("iban")]
    asks_an_account = _valid("iban", fields.payee_iban) is not None
    if namesakes and (known or asks_an_account or len(namesakes) > 1):
        reason = Reason(
            POSSIBLE_IMPERSONATION,
            ",".join(str(v.vendor_id) for v in namesakes) + "|" + _identity_subject(fields),
            f"{POSSIBLE_IMPERSONATION}: the seller ({identity}) has the name of "
            f"{'; '.join(_vendor_text(v) for v in namesakes)}, but none of its identifiers: its VAT "
            "id is missing, invalid or another one's, or it asks to be paid into an account nobody "
            "confirmed; call the vendor on a number you already know before approving (approving "
            "registers a new vendor; one that gives no identifier at all is paid as that vendor)",
        )
        return _WhoIsPaid((reason,), None, False, namesakes)
    if (
        not fields.read_from_page
        and facts.policy.register_einvoice_vendors
        and (fields.seller_vat_id or fields.seller_name)
    ):
        return _WhoIsPaid((), None, True, namesakes)
    reason = Reason(
        VENDOR_UNCONFIRMED,
        _identity_subject(fields),
        f"{VENDOR_UNCONFIRMED}: the seller ({identity}) is not a registered vendor of the org; check "
        "who sent it, then approve to register the vendor, or reject it",
    )
    return _WhoIsPaid((reason,), None, False, namesakes)


def who_is_paid(facts: PaymentFacts) -> _WhoIsPaid:
    """The vendor the invoice's identifiers confirm, and why that is not enough when it is not."""
    fields = facts.fields
    owners = _owners(fields, facts.registry)
    if len(owners) > 1:
        # Vouched for, the money goes where the account is: the vendor that owns the IBAN to pay
        # is the one paid (and recorded), whoever the VAT id names.
        iban = _valid("iban", fields.payee_iban)
        paid = next((v for v in owners if iban is not None and v.has("iban", iban.value)), owners[0])
        reason = Reason(
            VENDOR_IDENTITY_CONFLICT,
            ",".join(str(v.vendor_id) for v in owners) + "|" + _identity_subject(fields),
            f"{VENDOR_IDENTITY_CONFLICT}: the seller's identifiers ({_identity_text(fields)}) belong to "
            f"different vendors: {'; '.join(_vendor_text(v) for v in owners)}; find out who sent it before "
            f"approving (approving pays {paid.name} #{paid.vendor_id}, the owner of the account to pay)",
        )
        return _WhoIsPaid((reason,), paid, False)
    if owners:
        return _WhoIsPaid(tuple(_confirmed_reasons(fields, owners[0])), owners[0], False)
    return _unconfirmed(facts)


def business_reasons(fields: InvoiceFields, policy: ReviewPolicy) -> list[Reason]:
    """The org's business exceptions and the money checks (domain/review.py), as reasons about the
    invoice as a whole."""
    return [Reason(reason_code(text), "", text) for text in review_reasons(fields, policy)]


def _payee(facts: PaymentFacts) -> tuple[list[Reason], _WhoIsPaid, bool]:
    """Who is paid, assessed once: the reasons, the registry's answer, and whether the seller is the
    org itself (then the registry is not asked to confirm anyone)."""
    own = own_identity_reasons(facts.fields, facts.profile)
    paid = who_is_paid(facts)
    return [*own, *identifier_reasons(facts.fields), *(paid.reasons if not own else ())], paid, bool(own)


def payee_reasons(facts: PaymentFacts) -> list[Reason]:
    """Why whom the invoice pays is not confirmed: the org itself as the seller, impossible
    identifiers, and the registry's word (`who_is_paid`)."""
    return _payee(facts)[0]


def _all_reasons(facts: PaymentFacts, payee: list[Reason]) -> list[Reason]:
    # The approval stage's order, so a person sees the same texts in the same order.
    business = [
        r
        for r in business_reasons(facts.fields, facts.policy)
        if not (r.code == CORRECTION and facts.correction_choice is not None)
    ]
    return [*duplicate_reasons(facts), *business, *payee]


def payment_reasons(facts: PaymentFacts) -> list[Reason]:
    """Every reason of this moment not to pay the invoice, vouched for or not: the duplicate
    decision, the business exceptions and money checks, then who is paid."""
    return _all_reasons(facts, payee_reasons(facts))


def vouch(reasons: Iterable[Reason]) -> frozenset[str]:
    """What approving an invoice shown these reasons vouches for."""
    return frozenset(r.voucher for r in reasons if r.vouchable)


def decide_payment(facts: PaymentFacts) -> PaymentDecision:
    """Post or hold, from the facts of this moment.

    Held: every reason a person has not vouched for, with its text of now. Posted: to the vendor
    the identifiers confirm, or, when none does, to the vendor the posting registers (a
    structured e-invoice's first invoice, under the org's policy; or the one a person vouched
    for). A person who vouched for a changed IBAN or an unconfirmed vendor also teaches the
    registry that IBAN or vendor, in the same transaction.
    """
    fields = facts.fields
    payee, paid, own = _payee(facts)
    reasons = _all_reasons(facts, payee)
    held = tuple(r for r in reasons if r.voucher not in facts.vouched or not r.vouchable)
    if held:
        return PaymentDecision(held, paid.vendor)
    vouched_codes = {r.code for r in reasons}
    registration = None
    vendor = paid.vendor
    teaches = {VENDOR_UNCONFIRMED, BANK_DETAILS_CHANGED, POSSIBLE_IMPERSONATION} & vouched_codes
    if vendor is None and len(paid.namesakes) == 1:
        namesake = paid.namesakes[0]
        if not (namesake.of_kind("vat") or namesake.of_kind("iban")) or not seller_identifiers(fields):
            # Nothing tells the seller from its namesake (a vendor known by name alone, or an
            # invoice without identifiers): it is that vendor, taught what was vouched for, not
            # a second vendor of the same name.
            vendor = namesake
    if not own and (paid.registers or (facts.approver is not None and teaches)):
        name = fields.seller_name or (vendor.name if vendor else None)
        idents = tuple(seller_identifiers(fields))
        registration = Registration(
            name or (idents[0].shown if idents else "unnamed vendor"),
            idents,
            "approval" if facts.approver is not None else "e-invoice",
            facts.approver or "pipeline (structured e-invoice)",
        )
    iban = _valid("iban", fields.payee_iban)
    paid_into = iban.value if iban else None
    if paid_into is None and vendor is not None and len(vendor.of_kind("iban")) == 1:
        paid_into = normalise("iban", vendor.of_kind("iban")[0])
    return PaymentDecision((), vendor, registration, paid_into)
