from invoice_pipeline.orchestration.resources.deployments import Deployment, deployment
from invoice_pipeline.orchestration.resources.document_reader import DocumentReader
from invoice_pipeline.orchestration.resources.invoice_database import InvoiceDatabase
from invoice_pipeline.orchestration.resources.review_access import ReviewAccess

__all__ = ["Deployment", "DocumentReader", "InvoiceDatabase", "ReviewAccess", "deployment"]
