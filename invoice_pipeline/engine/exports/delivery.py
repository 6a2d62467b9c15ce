"""The delivery loop, once for the CLI and Dagster (docs/exports.md).

sweep stale export leases -> for each target with rows due: claim a batch (export_jobs locks)
-> the process's LeaseKeeper heartbeats the leases -> send (a DATEV file, or a request per
posting) -> record every outcome behind the fence in one transaction -> next batch.

At least once, accepted once: a crash after the send and before the commit leaves the rows due
with their lease; the sweep releases it after the TTL and the next claim delivers the same batch
again, with the same idempotency keys (webhook) or the same file name and bytes (DATEV). A
deliverer that was swept (a zombie) records nothing: the fence refuses it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from invoice_pipeline.engine.export_records import Batch, Delivery, ExportTarget, Recorded
from invoice_pipeline.engine.exports import datev
from invoice_pipeline.engine.exports.webhook import Webhook, WebhookSettings, read_secret
from invoice_pipeline.engine.leases import LeaseKeeper
from invoice_pipeline.engine.store import InvoiceStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CrashPoints:
    """Where a crash test stops a deliverer (each is called, then the deliverer goes on):
    after a webhook request was answered, after a DATEV file's rename; both before the commit."""

    after_send: Callable[[], None] | None = None
    after_rename: Callable[[], None] | None = None


@dataclass
class DeliveryReport:
    batches: int = 0
    delivered: int = 0
    retried: int = 0
    dead: int = 0
    lost: int = 0
    swept: int = 0
    by_target: dict[str, int] = field(default_factory=dict)

    def add(self, target: ExportTarget, recorded: Recorded) -> None:
        self.batches += 1
        self.delivered += recorded.delivered
        self.retried += recorded.retried
        self.dead += recorded.dead
        self.lost += recorded.lost
        key = f"{target.org_id}/{target.name}"
        self.by_target[key] = self.by_target.get(key, 0) + recorded.delivered


def send_batch(batch: Batch, keeper: LeaseKeeper, crash: CrashPoints = CrashPoints()) -> list[Delivery]:
    """Deliver what this claim holds of the batch; one outcome per held row."""
    held = batch.held_items()
    if batch.target.kind == "datev":
        try:
            path = datev.write_batch(batch, crash.after_rename)
        except OSError as exc:
            return [Delivery(i.export_id, "retry", f"file not written: {exc}") for i in held]
        return [Delivery(i.export_id, "delivered", f"written to {path}") for i in held]
    settings = WebhookSettings.of(batch.target.settings)
    try:
        secret = read_secret(settings.secret_file)
    except (OSError, ValueError) as exc:
        return [Delivery(i.export_id, "retry", f"no secret: {exc}") for i in held]
    jobs = {lease.export_id: lease.job_id for lease in batch.leases}
    webhook = Webhook(settings)
    deliveries = []
    try:
        for item in held:
            if not keeper.may_hold(jobs[item.export_id]):
                # The lease may be swept any moment: stop sending; whoever claims it next will.
                break
            deliveries.append(webhook.send(item, secret))
            if crash.after_send is not None:
                crash.after_send()
    finally:
        webhook.close()
    return deliveries


def deliver(
    store: InvoiceStore,
    owner: str,
    *,
    max_batches: int | None = None,
    crash: CrashPoints = CrashPoints(),
) -> DeliveryReport:
    """Deliver what is due now, target by target, a batch at a time, until nothing is due (or
    `max_batches`). Rows a failure makes due again later are left for the next call."""
    report = DeliveryReport()
    report.swept = store.exports.release_stale()
    keeper = LeaseKeeper(store.exports.heartbeat_many, store.lock_ttl / 3, store.lock_ttl)
    exhausted: set[int] = set()
    try:
        while max_batches is None or report.batches < max_batches:
            targets = [t for t in store.exports.targets_due() if t.enabled and t.id not in exhausted]
            if not targets:
                break
            for target in targets:
                batch = store.exports.claim_batch(target, owner)
                if batch is None:
                    exhausted.add(target.id)  # what is due is held by another deliverer
                    continue
                report.add(target, _deliver_one(store, batch, keeper, crash))
    finally:
        keeper.stop()
    return report


def _deliver_one(store: InvoiceStore, batch: Batch, keeper: LeaseKeeper, crash: CrashPoints) -> Recorded:
    for lease in batch.leases:
        keeper.hold(lease.job_id)
    try:
        deliveries = send_batch(batch, keeper, crash)
        sent = {d.export_id for d in deliveries}
        # Rows not sent (the lease was about to lapse): due again, if the lease still holds.
        deliveries += [
            Delivery(lease.export_id, "retry", "not sent: the lease was about to lapse")
            for lease in batch.leases
            if lease.export_id not in sent
        ]
        recorded = store.exports.record(batch.leases, deliveries)
    finally:
        for lease in batch.leases:
            keeper.drop(lease.job_id)
    if recorded.lost:
        log.warning(
            "batch %s of %s: %d row(s) lost to the sweep; delivered again by the next claim",
            batch.batch_id,
            batch.target.name,
            recorded.lost,
        )
    return recorded
