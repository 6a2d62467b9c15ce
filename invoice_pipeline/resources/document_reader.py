"""The resource that turns stored bytes into text and fields (the expensive, pluggable part).

It wraps the pure functions of `invoice_pipeline.documents`; a deployment can swap in one
with a different OCR engine without touching the pipeline.
"""

from dagster import ConfigurableResource

from invoice_pipeline.documents import ExtractedText, extract_fields, extract_text
from invoice_pipeline.domain.fields import InvoiceFields


class DocumentReader(ConfigurableResource):
    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        return extract_text(content, filename, max_bytes=max_bytes)

    def read_fields(self, extracted: ExtractedText) -> InvoiceFields:
        return extract_fields(extracted)
