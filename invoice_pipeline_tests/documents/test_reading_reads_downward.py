"""documents/reading/ reads downward: nothing in it imports the modules of documents/ above it
(text_fields.py, which puts a page's fields together from reading/, nor ocr.py, pdf.py, ...).

It may use the few plain modules below both (values, errors, extracted, json_schema), which
import nothing of documents/ themselves. Imports inside functions count (`imported_names`
walks the whole syntax tree).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from invoice_pipeline_tests.test_architecture import PACKAGE_DIR, imported_names, module_name

DOCUMENTS = "invoice_pipeline.documents"
READING = f"{DOCUMENTS}.reading"
# Plain modules of documents/ that reading/ may use: they import nothing of documents/.
BELOW_READING = frozenset(f"{DOCUMENTS}.{name}" for name in ("values", "errors", "extracted", "json_schema"))


def _below_reading(name: str) -> bool:
    return any(name == below or name.startswith(f"{below}.") for below in BELOW_READING)


def upward_imports(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """The modules of documents/ above reading/ that `source` (the text of `module`) imports."""
    return sorted(
        name
        for name in imported_names(source, module, is_package=is_package)
        if name.startswith(f"{DOCUMENTS}.") and not name.startswith(f"{READING}") and not _below_reading(name)
    )


def _modules(paths: list[Path]) -> dict[str, list[str]]:
    return {
        module_name(path): upward_imports(
            path.read_text(), module_name(path), is_package=path.name == "__init__.py"
        )
        for path in paths
    }


def test_reading_imports_nothing_above_it() -> None:
    found = _modules(sorted((PACKAGE_DIR / "documents" / "reading").rglob("*.py")))
    assert found, "no modules under documents/reading/"
    assert {module: names for module, names in found.items() if names} == {}


def test_the_modules_below_reading_import_nothing_of_documents() -> None:
    paths = [PACKAGE_DIR / "documents" / f"{name.rpartition('.')[2]}.py" for name in sorted(BELOW_READING)]
    found = {
        module_name(path): sorted(
            name
            for name in imported_names(path.read_text(), module_name(path))
            if name.startswith(f"{DOCUMENTS}.") and not _below_reading(name)
        )
        for path in paths
    }
    assert {module: names for module, names in found.items() if names} == {}


@pytest.mark.parametrize(
    "source",
    [
        "from .. import text_fields as tf",
        "from ..ocr import MIN_FIELD_CONFIDENCE, OcrLayout",
        "from ..text_fields import find_dates",
        "def f():\n    from ..pdf import text_layer\n",
        "from invoice_pipeline.documents import fields_from_text",
    ],
)
def test_the_check_catches_an_upward_import(source: str) -> None:
    assert upward_imports(source, f"{READING}.layouts"), f"{source!r} was not caught"


@pytest.mark.parametrize(
    "source",
    [
        "from .words import Segment",
        "from ..values import strict_decimal",
        "from ..extracted import ExtractedText",
        "from ...domain.fields import FieldSource",
    ],
)
def test_the_check_lets_a_downward_import_pass(source: str) -> None:
    assert upward_imports(source, f"{READING}.layouts") == []
