"""Poll the configured mailboxes (`invoice-pipeline mail mailbox add`): each tick is one pass over
each, done by the engine (engine/mail.py poll_mailboxes). The invoices it stores are planned into
runs by new_invoices_sensor, like the inbox's.

No credential passes through Dagster: the sensor has no config, requests no run, and reads each
mailbox's password from the file its row names, inside the engine. What it logs is the mailbox's
URL (which never holds a password) and counts.
"""

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from invoice_pipeline.engine.mail import MailboxPoll, poll_mailboxes
from invoice_pipeline.orchestration.resources import InvoiceDatabase

MAIL_SENSOR_INTERVAL_SECONDS = 60
# Messages one mailbox gives a tick; the rest wait for the next tick (a tick must stay short).
MESSAGES_PER_TICK = 200


@sensor(
    name="mailbox_intake",
    default_status=DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=MAIL_SENSOR_INTERVAL_SECONDS,
    description="Take new messages from the configured mailboxes: each attachment an invoice, each message once.",
)
def mailbox_intake_sensor(context: SensorEvaluationContext, invoice_db: InvoiceDatabase) -> SkipReason:
    polls = poll_mailboxes(invoice_db.store, max_messages=MESSAGES_PER_TICK)
    for poll in polls:
        _log(context, poll)
    if not polls:
        return SkipReason("no mailbox configured")
    taken = sum(len(p.result.taken) for p in polls if p.result)
    created = sum(p.result.invoices_created for p in polls if p.result)
    failed = sum(1 for p in polls if p.error)
    return SkipReason(
        f"{len(polls)} mailbox(es): {taken} message(s) taken, {created} new invoice(s)"
        + (f", {failed} mailbox(es) failed" if failed else "")
    )


def _log(context: SensorEvaluationContext, poll: MailboxPoll) -> None:
    if poll.error is not None:
        context.log.error(f"mailbox {poll.url} (org {poll.org_id}): {poll.error}")
        return
    done = poll.result
    if done is None:
        return
    context.log.info(
        f"mailbox {poll.url} (org {poll.org_id}): {len(done.taken)} message(s) taken, "
        f"{done.invoices_created} new invoice(s), {done.left_for_next_pass} left for the next tick"
    )
    if done.earlier_uidvalidities:
        context.log.warning(
            f"mailbox {poll.url}: UIDVALIDITY changed to {done.uidvalidity}; every message is read again, "
            "attachments already stored stay the same invoices"
        )
