"""What every command and every document sandbox pays at start: the PDF and JSON-schema
libraries (0.4 s of imports) only when a PDF or a JSON invoice is read, and no scrypt hash at
import. Each check runs in a fresh interpreter, as a command or a sandbox worker starts."""

from __future__ import annotations

import subprocess
import textwrap

from invoice_pipeline.child_python import child_environment, python_command
from invoice_pipeline.samples.drawing import InvoiceDrawer
from invoice_pipeline.samples.render import ubl_xml

HEAVY = ("pdfplumber", "pypdf", "pdfminer", "jsonschema")


def loaded_after(code: str) -> set[str]:
    """The HEAVY modules (and whether scrypt ran) in a fresh interpreter after `code`."""
    script = textwrap.dedent(code) + textwrap.dedent(
        f"""
        import sys
        print(" ".join(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    done = subprocess.run(
        python_command("-c", script), capture_output=True, text=True, env=child_environment(), timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(done.stdout.split())


def test_the_sandbox_worker_and_the_command_line_start_without_the_pdf_and_json_libraries() -> None:
    assert loaded_after("import invoice_pipeline.documents.sandbox_worker") == set()
    assert loaded_after("import invoice_pipeline.cli") == set()


def test_an_xml_invoice_is_read_without_them_and_a_pdf_or_json_one_loads_what_it_needs(tmp_path) -> None:
    xml = tmp_path / "invoice.xml"
    xml.write_bytes(ubl_xml(InvoiceDrawer(7).invoice()))
    read_xml = f"""
        from pathlib import Path
        from invoice_pipeline.documents import extract_fields, extract_text
        fields = extract_fields(extract_text(Path({str(xml)!r}).read_bytes(), "invoice.xml"))
        assert fields.payable_total is not None
        """
    assert loaded_after(read_xml) == set()
    read_json = """
        from invoice_pipeline.documents import BadDocument, extract_text
        try:
            extract_text(b'{"invoice_number": 1}', "invoice.json")
        except BadDocument as exc:
            assert exc.code == "json_schema", exc
        """
    assert "jsonschema" in loaded_after(read_json)
    read_pdf = """
        from invoice_pipeline.documents import BadDocument, extract_text
        try:
            extract_text(b"%PDF-1.4 not really", "invoice.pdf")
        except BadDocument:
            pass
        """
    assert {"pdfplumber", "pypdf"} <= loaded_after(read_pdf)


def test_no_scrypt_hash_is_made_at_import() -> None:
    counted = """
        import hashlib
        calls = []
        real = hashlib.scrypt
        hashlib.scrypt = lambda *a, **k: calls.append(1) or real(*a, **k)
        import invoice_pipeline.cli
        import invoice_pipeline.review_ui.auth as auth
        assert calls == [], "an import hashed a password"
        auth.unknown_user_hash()
        assert calls == [1]
        """
    assert loaded_after(counted) == set()
