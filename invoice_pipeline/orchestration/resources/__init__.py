from invoice_pipeline.orchestration.resources.document_reader import DocumentReader
from invoice_pipeline.orchestration.resources.invoice_database import InvoiceDatabase

__all__ = ["DocumentReader", "InvoiceDatabase"]
