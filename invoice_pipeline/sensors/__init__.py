from invoice_pipeline.sensors.new_invoices import new_invoices_sensor, plan_run_requests

__all__ = ["new_invoices_sensor", "plan_run_requests"]
