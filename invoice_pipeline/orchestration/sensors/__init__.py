from invoice_pipeline.orchestration.sensors.new_invoices import new_invoices_sensor, plan_run_requests

__all__ = ["new_invoices_sensor", "plan_run_requests"]
