"""Argument types, refused by argparse (exit 2) before anything runs; the org check every
command that takes `--org` makes before any SQL; `--batch-size`, which two commands take."""

from __future__ import annotations

import argparse
import uuid
from datetime import timedelta
from decimal import Decimal, InvalidOperation

from invoice_pipeline.config import ConfigError
from invoice_pipeline.domain.validation import is_known_currency
from invoice_pipeline.engine.review import check_reason_code, parse_age


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def port_number(text: str) -> int:
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port (1-65535), got {value}")
    return value


def invoice_id_arg(text: str) -> str:
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"invoice_id must be a UUID, got {text!r}") from None


def age_arg(text: str) -> timedelta:
    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def reason_code_arg(text: str) -> str:
    try:
        return check_reason_code(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def amount_or_none(text: str) -> Decimal | None:
    if text.strip().lower() == "none":
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise argparse.ArgumentTypeError(
            f"must be an amount such as 5000.00, or none, got {text!r}"
        ) from None
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative amount, or none, got {text!r}")
    return value


def currency_or_none(text: str) -> str | None:
    if text.strip().lower() == "none":
        return None
    if not is_known_currency(text):
        raise argparse.ArgumentTypeError(f"must be an ISO 4217 code such as EUR, or none, got {text!r}")
    return text


def yes_or_no(text: str) -> bool:
    answer = text.strip().lower()
    if answer not in ("yes", "no"):
        raise argparse.ArgumentTypeError(f"must be yes or no, got {text!r}")
    return answer == "yes"


def einvoice_country_or_none(text: str) -> str | None:
    if text.strip().lower() == "none":
        return None
    if text.strip().upper() != "DE":
        raise argparse.ArgumentTypeError(f"must be DE (the German e-invoicing rules) or none, got {text!r}")
    return "DE"


def days_or_none(text: str) -> int | None:
    return None if text.strip().lower() == "none" else positive_int(text)


def checked_org(org: str) -> str:
    """`org` as given, or a ConfigError (exit 2) saying what is wrong with it."""
    from invoice_pipeline.engine.ingest import org_problem

    if (problem := org_problem(org)) is not None:
        raise ConfigError(f"--org: {problem}")
    return org


def add_batch_size_argument(parser: argparse.ArgumentParser) -> None:
    """`--batch-size`, for the commands that process (process, demo)."""
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="invoices per run (default: INVOICE_PIPELINE_BATCH_SIZE)",
    )
