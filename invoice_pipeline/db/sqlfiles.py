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


def _parse(path: Path) -> dict[str, str]:
    """The named queries of one file: each lives under a `-- name: some_name` header."""
    text = path.read_text()
    headers = list(_NAME_HEADER.finditer(text))
    found: dict[str, str] = {}
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        name = header.group(1)
        if name in found:
            raise ValueError(f"query {name!r} is defined twice in {path.name}")
        found[name] = text[header.end() : end].strip().rstrip(";")
    return found


@cache
def queries_of(stem: str) -> dict[str, str]:
    """The named queries of `sql/queries/<stem>.sql`."""
    return _parse(sql_dir() / "queries" / f"{stem}.sql")


@cache
def queries() -> dict[str, str]:
    """Every named query of every file; a name is never defined in two files."""
    found: dict[str, str] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        for name, text in queries_of(path.stem).items():
            if name in found:
                raise ValueError(f"query {name!r} is defined twice (second time in {path.name})")
            found[name] = text
    return found


def query(name: str) -> str:
    """A query by name, whichever file holds it (for tools and benchmarks; the store's parts
    each read their own file through QueryFile)."""
    try:
        return queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries/") from None


class QueryFile:
    """The queries of one file in `sql/queries/`, read on first use: `CLAIMS = QueryFile("claims")`,
    then `CLAIMS["acquire_lock"]`. A name the file lacks is a KeyError naming the file."""

    def __init__(self, stem: str) -> None:
        self.stem = stem

    def __getitem__(self, name: str) -> str:
        try:
            return queries_of(self.stem)[name]
        except KeyError:
            raise KeyError(f"no query named {name!r} in sql/queries/{self.stem}.sql") from None

    def names(self) -> set[str]:
        return set(queries_of(self.stem))
