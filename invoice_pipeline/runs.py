"""Conventions that tie a lease to the Dagster run holding it. No Dagster import: the CLI uses it."""

from __future__ import annotations

RUN_OWNER_PREFIX = "dagster-run:"


def run_owner(run_id: str) -> str:
    """The owner a run's leases carry, so a sweep can tell Dagster which run died."""
    return f"{RUN_OWNER_PREFIX}{run_id}"


def run_id_of(owner: str | None) -> str | None:
    """The Dagster run that held a lease, when a run did (a bare acquire names a host and pid)."""
    return owner.removeprefix(RUN_OWNER_PREFIX) if owner and owner.startswith(RUN_OWNER_PREFIX) else None
