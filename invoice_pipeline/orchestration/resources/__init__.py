from invoice_pipeline.orchestration.resources.deployments import Deployment, deployment
from invoice_pipeline.orchestration.resources.document_reader import DocumentReader
from invoice_pipeline.orchestration.resources.invoice_database import InvoiceDatabase

__all__ = ["Deployment", "DocumentReader", "InvoiceDatabase", "deployment"]
