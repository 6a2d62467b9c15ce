from invoice_pipeline.resources.document_reader import DocumentReader
from invoice_pipeline.resources.invoice_database import InvoiceDatabase

__all__ = ["DocumentReader", "InvoiceDatabase"]
