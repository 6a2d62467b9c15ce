"""The README and docs/ point at things that exist (issue 20).

Every relative link in `README.md` and `docs/**/*.md` must name an existing file or folder and,
with a `#anchor`, a heading of that file (GitHub's slugs). Every repo path written in backticks
(`invoice_pipeline/engine/stages.py`, `sql/0006_review_queue.sql`, `benchmarks/results/ocr/`)
must exist, so a file that moves takes its documentation with it. The README stays a front
door, and every docs page can be reached from it.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 155  # a front door: about 150 lines (issue 59); figures live in docs/performance.md

# Folders at the top of the checkout: a backticked path starting with one of them is a repo path.
REPO_DIRS = (
    "invoice_pipeline",
    "invoice_pipeline_tests",
    "sql",
    "chaos",
    "benchmarks",
    "pipeline_support",
    "deploy",
    "docs",
)

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.M)
# A path with a file suffix, or a folder written with its trailing slash; no globs or placeholders.
_DIRS = "|".join(re.escape(d) for d in REPO_DIRS)
REPO_PATH = re.compile(rf"^(?:{_DIRS})/(?:[\w.-]+/)*(?:[\w-][\w.-]*\.[A-Za-z0-9]+|)$")


def markdown_files(root: Path) -> list[Path]:
    files = [root / "README.md"] if (root / "README.md").exists() else []
    return files + sorted((root / "docs").rglob("*.md"))


def without_code_blocks(text: str) -> str:
    """Fenced blocks blanked (line count kept): their brackets and backticks are not links."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped except hyphens, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: Counter[str] = Counter()
    out = set()
    for match in HEADING.finditer(without_code_blocks(path.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        out.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return out


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def link_problems(root: Path) -> list[str]:
    """Every broken relative link, bad anchor and missing backticked repo path under `root`."""
    problems = []
    for md in markdown_files(root):
        text = without_code_blocks(md.read_text(encoding="utf-8"))
        where = md.relative_to(root)
        prose = INLINE_CODE.sub(lambda m: " " * len(m.group(0)), text)
        for match in LINK.finditer(prose):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md
            at = f"{where}:{_line(text, match.start())}"
            if not dest.exists():
                problems.append(f"{at}: link to {target}: no such file")
            elif anchor and (dest.is_dir() or dest.suffix != ".md"):
                problems.append(f"{at}: link to {target}: an anchor into something that is not a page")
            elif anchor and anchor not in anchors(dest):
                problems.append(f"{at}: link to {target}: {dest.name} has no heading #{anchor}")
        for match in INLINE_CODE.finditer(text):
            code = match.group(2).strip()
            if REPO_PATH.match(code) and not (root / code).exists():
                problems.append(f"{where}:{_line(text, match.start())}: `{code}` does not exist")
    return problems


def unreachable_pages(root: Path) -> list[str]:
    """docs pages no link leads to, starting from the README."""
    todo, seen = [root / "README.md"], set()
    while todo:
        page = todo.pop().resolve()
        if page in seen or not page.exists():
            continue
        seen.add(page)
        prose = INLINE_CODE.sub("", without_code_blocks(page.read_text(encoding="utf-8")))
        for match in LINK.finditer(prose):
            file_part = match.group(1).partition("#")[0]
            if file_part.endswith(".md") and not re.match(r"^[a-z]+:", file_part):
                todo.append(page.parent / file_part)
    return [
        str(p.relative_to(root)) for p in sorted((root / "docs").rglob("*.md")) if p.resolve() not in seen
    ]


def test_every_link_and_path_in_the_docs_exists() -> None:
    problems = link_problems(ROOT)
    assert not problems, "broken references in README.md / docs/:\n" + "\n".join(problems)


def test_every_docs_page_is_reachable_from_the_readme() -> None:
    assert (ROOT / "docs").is_dir()
    assert unreachable_pages(ROOT) == []


def test_the_readme_is_a_front_door() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; move reference into docs/"
    # CI and the tests rely on this being the README's test command.
    assert any(line.startswith("make test ") for line in lines)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("A run, stage by stage", "a-run-stage-by-stage"),
        ("Retries, dead letters and dead runs", "retries-dead-letters-and-dead-runs"),
        ("Reading from the page: money fails closed", "reading-from-the-page-money-fails-closed"),
        ("`make dev`", "make-dev"),
        ("Scanned invoices (OCR)", "scanned-invoices-ocr"),
        ("Stages in chunks — 2026", "stages-in-chunks--2026"),
    ],
)
def test_slugs_follow_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_the_check_catches_broken_references(tmp_path: Path) -> None:
    """A small tree with one of each mistake: every one is reported, and nothing else."""
    (tmp_path / "docs" / "howto").mkdir(parents=True)
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "0001_schema.sql").write_text("-- schema\n")
    (tmp_path / "README.md").write_text(
        "# Project\n\n"
        "[fine](docs/a.md) [fine too](docs/a.md#two-words) [same page](#project)\n"
        "[gone](docs/missing.md) [bad anchor](docs/a.md#nowhere)\n"
        "`sql/0001_schema.sql` exists, `sql/0002_locks.sql` does not, `sql/*.sql` is a glob.\n"
        "```\n[inside a code block](nowhere.md) `sql/never.sql`\n```\n"
        "[web](https://example.com/x.md)\n"
    )
    (tmp_path / "docs" / "a.md").write_text(
        "# A\n\n## Two words\n\n[up](../README.md#project) [sibling](howto/b.md#b)\n"
        "[wrong level](howto/../../docs/nope.md) `invoice_pipeline/engine/stages.py`\n"
    )
    (tmp_path / "docs" / "howto" / "b.md").write_text("# B\n\n[back](../a.md#a)\n")
    (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n")

    problems = link_problems(tmp_path)
    assert len(problems) == 5, problems
    assert any("docs/missing.md: no such file" in p for p in problems)
    assert any("has no heading #nowhere" in p for p in problems)
    assert any("`sql/0002_locks.sql` does not exist" in p for p in problems)
    assert any("docs/nope.md: no such file" in p for p in problems)
    assert any("`invoice_pipeline/engine/stages.py` does not exist" in p for p in problems)
    assert unreachable_pages(tmp_path) == ["docs/orphan.md"]
