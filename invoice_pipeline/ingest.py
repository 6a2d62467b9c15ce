"""Bringing files in: the original bytes are stored first, before anything can fail on them."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from invoice_pipeline.store import IngestResult, InvoiceStore

DEFAULT_ORG = "default"
INGESTED_DIR = ".ingested"


@dataclass(frozen=True)
class IngestedFile:
    path: Path
    org_id: str
    result: IngestResult


def iter_files(paths: Iterable[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and INGESTED_DIR not in child.parts and not child.name.startswith("."):
                    yield child
        elif path.is_file():
            yield path
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")


def ingest_paths(store: InvoiceStore, paths: Iterable[Path], org_id: str = DEFAULT_ORG) -> list[IngestedFile]:
    """Store each file's bytes and create its invoice; the same bytes twice are one invoice.

    Nothing is parsed here: an unreadable file still becomes an invoice, which the pipeline
    then quarantines with a reason — it is never dropped on the floor.
    """
    return [
        IngestedFile(path, org_id, store.store_document(path.read_bytes(), org_id, path.name))
        for path in iter_files(paths)
    ]


def ingest_inbox(store: InvoiceStore, inbox: Path) -> list[IngestedFile]:
    """Files in `inbox/<org>/...` belong to that org; files directly in the inbox to the default org.

    A stored file moves to `<its folder>/.ingested/` so the next scan skips it; if the move
    fails, the next scan stores the same bytes again, which is a no-op.
    """
    if not inbox.is_dir():
        return []
    done: list[IngestedFile] = []
    for path in iter_files([inbox]):
        relative = path.relative_to(inbox)
        org_id = relative.parts[0] if len(relative.parts) > 1 else DEFAULT_ORG
        result = store.store_document(path.read_bytes(), org_id, path.name)
        target = path.parent / INGESTED_DIR / path.name
        target.parent.mkdir(exist_ok=True)
        os.replace(path, target)
        done.append(IngestedFile(target, org_id, result))
    return done
