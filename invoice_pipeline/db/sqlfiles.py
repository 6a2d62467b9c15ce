"""Locating the `sql/` contract and loading the named queries in `sql/queries/`."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_NAME_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    """`sql/` inside an installed wheel, else the checkout's top-level `sql/`."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "_sql", package.parent / "sql"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"no sql/ directory next to {package}")


def migration_files(directory: Path | None = None) -> list[Path]:
    return sorted((directory or sql_dir()).glob("*.sql"))


@cache
def queries() -> dict[str, str]:
    """Every named query: each lives under a `-- name: some_name` header."""
    found: dict[str, str] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        text = path.read_text()
        headers = list(_NAME_HEADER.finditer(text))
        for i, header in enumerate(headers):
            end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
            name = header.group(1)
            if name in found:
                raise ValueError(f"query {name!r} is defined twice (second time in {path.name})")
            found[name] = text[header.end() : end].strip().rstrip(";")
    return found


def query(name: str) -> str:
    try:
        return queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries/") from None
