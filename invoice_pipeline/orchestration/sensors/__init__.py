from invoice_pipeline.orchestration.sensors.mailboxes import mailbox_intake_sensor
from invoice_pipeline.orchestration.sensors.new_invoices import new_invoices_sensor, plan_run_requests

__all__ = ["mailbox_intake_sensor", "new_invoices_sensor", "plan_run_requests"]
