"""Invented sample invoices (UBL, CII, JSON, PDF, Factur-X) with known expected outcomes."""

from __future__ import annotations

from .generator import MANIFEST_NAME, SampleFile, SampleSet, generate_samples
from .render import SampleInvoice

__all__ = ["MANIFEST_NAME", "SampleFile", "SampleInvoice", "SampleSet", "generate_samples"]
