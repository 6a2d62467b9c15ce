"""Asking Dagster about a request's owner (engine/request_owner.py): which run storage a
process sees, and which runs an owner names."""

from __future__ import annotations

from dagster import DagsterInstance, RunsFilter

from invoice_pipeline.engine.request_owner import RequestOwner


def instance_scope(instance: DagsterInstance) -> str:
    """A stable id of the instance's run storage: the same for every process that opens it."""
    storage = instance.run_storage
    get_id = getattr(storage, "get_run_storage_id", None)
    # Every SQL run storage (sqlite, postgres, in-memory) has one; anything else gets a name
    # that never matches, so its requests fall back to the request timeout.
    return str(get_id()) if callable(get_id) else f"unscoped-{type(storage).__name__}"


def runs_filter(owner: RequestOwner) -> RunsFilter:
    """The runs that carry the owner's tag."""
    return RunsFilter(tags=owner.tags)
