"""Who a request for an invoice is waiting for: a Dagster run, named by a tag, on one instance;
and asking Dagster about it (which run storage a process sees, which runs an owner names).

A request (`invoices.requested_at`) used to say only *when* an invoice was handed to a run. A
run killed after that, before claiming, left the invoice untouched for the whole request
timeout. Now the request also records its owner (`invoices.requested_by`), so the sweep can ask
Dagster about that very run and release the request as soon as the run has ended or was found
dead. The engine stores and hands back the owner as an opaque string (`RequestOwner.text`);
only this module reads it.

The owner names the run by a tag rather than by run id, because the requester does not know
the id yet: the sensor's runs are created by the daemon after the tick (they carry
`dagster/run_key`), and `invoice-pipeline process` claims before `execute_job` creates its run
(it tags the run with `invoice_pipeline/request`). It is scoped to the Dagster instance's run
storage, because two deployments can share one invoice database with separate instances: a
sweep judges only requests whose runs it can see, and leaves the others to their own sweep
(or, failing that, to the request timeout).
"""

from __future__ import annotations

from dataclasses import dataclass

from dagster import DagsterInstance, RunsFilter

# The tag Dagster puts on every run a sensor requests with a run key.
RUN_KEY_TAG = "dagster/run_key"
# The tag `invoice-pipeline process` puts on each batch run it executes itself.
REQUEST_TAG = "invoice_pipeline/request"
_PREFIX = "dagster:"


@dataclass(frozen=True)
class RequestOwner:
    instance_id: str
    tag: str
    value: str

    # `scope` is instance_scope(instance): asked once per tick or batch, it costs a query.
    @classmethod
    def run_key(cls, scope: str, run_key: str) -> RequestOwner:
        return cls(scope, RUN_KEY_TAG, run_key)

    @classmethod
    def tagged(cls, scope: str, token: str) -> RequestOwner:
        return cls(scope, REQUEST_TAG, token)

    @property
    def text(self) -> str:
        return f"{_PREFIX}{self.instance_id}:{self.tag}={self.value}"

    @classmethod
    def parse(cls, text: str) -> RequestOwner | None:
        """The owner a `text` names; None for anything else (then only the request timeout applies)."""
        if not text.startswith(_PREFIX):
            return None
        instance_id, sep, rest = text[len(_PREFIX) :].partition(":")
        tag, eq, value = rest.partition("=")
        if not (instance_id and sep and tag and eq and value):
            return None
        return cls(instance_id, tag, value)

    @property
    def burns_a_run_key(self) -> bool:
        """Dagster never runs a sensor's run key twice, failures included, so releasing such a
        request must count an attempt: the retry is requested under the next attempt's key."""
        return self.tag == RUN_KEY_TAG

    @property
    def tags(self) -> dict[str, str]:
        """The tag the owner's runs carry (runs_filter finds them by it)."""
        return {self.tag: self.value}


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
