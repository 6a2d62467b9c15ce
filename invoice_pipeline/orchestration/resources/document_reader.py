"""The resource that turns stored bytes into text and fields (the expensive, pluggable part).

It wraps the pure functions of `invoice_pipeline.documents`; a deployment can swap in one
with a different OCR engine without touching the pipeline. By default every document is parsed
in a sandbox worker process under CPU, memory and wall-clock limits (`documents.sandbox`), so a
hostile file costs at most those and ends quarantined as `too_complex`.
"""

from dataclasses import replace

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field

from invoice_pipeline.documents import (
    MAX_PDF_PAGES,
    MAX_TEXT_CHARS,
    ExtractedText,
    extract_fields,
    extract_text,
)
from invoice_pipeline.documents.einvoice_rules import STRUCTURED_FORMATS, check_extracted
from invoice_pipeline.documents.sandbox import MemoryKind, Sandbox, SandboxLimits, run_parser, shared_sandbox
from invoice_pipeline.domain.fields import InvoiceFields

_LIMITS = SandboxLimits()


class DocumentReader(ConfigurableResource):
    # The defaults are ~10x what a dense 10-page invoice needs on the reference machine (3.5 s of
    # CPU, ~105 MB resident); a dense 40-page one (15 s) still fits. Above them is a bomb, or not
    # one invoice.
    isolate: bool = Field(
        default=True,
        description="Parse in a sandbox worker process under the limits below (off: in this process, unbounded)",
    )
    parse_timeout_seconds: float = Field(
        default=_LIMITS.wall_seconds, gt=0, description="Wall-clock limit per document and step"
    )
    parse_cpu_seconds: int = Field(
        default=_LIMITS.cpu_seconds, ge=1, description="CPU limit per document and step"
    )
    parse_memory_mb: int = Field(
        # The worker itself needs ~80 MiB of address space before it reads anything.
        default=_LIMITS.memory_mib,
        ge=256,
        description="Address-space limit (MiB) of a sandbox worker",
    )
    parse_ocr_memory_mb: int = Field(
        # ONNX Runtime + OpenCV map ~700 MB before the first page; see SandboxLimits.ocr_memory_mib.
        default=_LIMITS.ocr_memory_mib,
        ge=1024,
        description="Address-space limit (MiB) of a sandbox worker while it OCRs a scan (then it is replaced)",
    )
    max_text_chars: int = Field(
        default=MAX_TEXT_CHARS, ge=1000, description="Longest text a document may produce"
    )
    max_pdf_pages: int = Field(default=MAX_PDF_PAGES, ge=1, description="Most pages a PDF may have")
    validate_einvoices: bool = Field(
        default=True,
        description="Run the EN 16931 / Factur-X Schematron on every structured e-invoice (issue 55); "
        "a fatal failure holds it einvoice_invalid",
    )
    compare_page_with_xml: bool = Field(
        default=True,
        description="Hold a Factur-X/ZUGFeRD PDF whose visible page prints a key field differently "
        "from its XML (page_disagrees_with_xml)",
    )
    validation_memory_mb: int = Field(
        # Saxon's heap for the largest rule set and a large invoice stays well under this.
        default=_LIMITS.memory_mib,
        ge=256,
        description="Data-size limit (MiB) of an e-invoice validator worker (it reserves ~32 GiB of "
        "address space, so that is not what is bounded)",
    )

    def _pool(
        self, memory_mib: int, ocr_memory_mib: int, memory_kind: MemoryKind = "address_space"
    ) -> Sandbox:
        return shared_sandbox(
            SandboxLimits(
                wall_seconds=self.parse_timeout_seconds,
                cpu_seconds=self.parse_cpu_seconds,
                memory_mib=memory_mib,
                ocr_memory_mib=ocr_memory_mib,
                memory_kind=memory_kind,
            )
        )

    @property
    def sandbox(self) -> Sandbox:
        return self._pool(self.parse_memory_mb, max(self.parse_ocr_memory_mb, self.parse_memory_mb))

    @property
    def validator(self) -> Sandbox:
        """The e-invoice validator's workers: the same time bounds, memory bounded by data size."""
        return self._pool(self.validation_memory_mb, self.validation_memory_mb, "data")

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # Start a worker when the run starts: it imports (~0.7 s) while claim does its database
        # work, instead of in front of the first document.
        if self.isolate:
            self.sandbox.prestart()

    def read_text(self, content: bytes, filename: str | None, max_bytes: int) -> ExtractedText:
        if self.isolate:
            return self.sandbox.read_text(
                content,
                filename,
                max_bytes=max_bytes,
                max_text_chars=self.max_text_chars,
                max_pdf_pages=self.max_pdf_pages,
                compare_page=self.compare_page_with_xml,
            )
        return run_parser(
            lambda: extract_text(
                content,
                filename,
                max_bytes=max_bytes,
                max_text_chars=self.max_text_chars,
                max_pdf_pages=self.max_pdf_pages,
            )
        )

    def read_fields(self, extracted: ExtractedText) -> InvoiceFields:
        compare = self.compare_page_with_xml
        if self.isolate:
            fields = self.sandbox.read_fields(extracted, compare_page=compare)
        else:
            fields = run_parser(lambda: extract_fields(extracted, compare_page=compare))
        if not self.validate_einvoices or extracted.format not in STRUCTURED_FORMATS:
            return fields
        if self.isolate:
            check = self.validator.check_einvoice(extracted)
        else:
            check = run_parser(lambda: check_extracted(extracted))
        return replace(fields, einvoice_check=check)
