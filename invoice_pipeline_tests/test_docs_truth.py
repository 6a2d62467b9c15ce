"""What README.md and docs/ name exists (issue 59): a docs page cannot drift from the product
silently.

- every `invoice-pipeline` command and flag written in them is one the real parser has
  (`cli.parser.build_parser`, walked subcommand by subcommand);
- every `make` target named is a target of the Makefile, with no option make would refuse;
- every `sql/NNNN` migration named exists (whole paths are test_docs_links.py's);
- every environment variable the code reads appears in docs/configuration.md;
- every function, class or query a how-to names (`Database.write_chunk`, `STAGE_ASSETS`,
  `done_<stage>`'s siblings) is defined in the code or in sql/.

Each check is a function of the text and a root, so the tests below also show that each one
fails on a page naming something removed.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from invoice_pipeline.cli.parser import build_parser
from invoice_pipeline_tests.test_docs_links import (
    FENCE,
    INLINE_CODE,
    ROOT,
    markdown_files,
    without_code_blocks,
)

# -- where the docs write commands ---------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """A command as a page writes it: its words, and where."""

    where: str
    words: tuple[str, ...]


def code_texts(text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every inline code span and every line of every fenced block."""
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start()) + 1
        for i, line in enumerate(block.group(0).splitlines()[1:-1]):
            yield first + 1 + i, line
    prose = without_code_blocks(text)
    for span in INLINE_CODE.finditer(prose):
        yield prose.count("\n", 0, span.start()) + 1, span.group(2)


# Words that end a command written in prose or a shell line.
_COMMAND_END = re.compile(r"\s(?:\||&&|;|>|2>|<|#|-->)\s|[`)\"']|$")
_INVOCATION = re.compile(r"(?:^|[\s(/$])invoice-pipeline\s+(.*)")


def cli_commands(text: str, where: str) -> Iterator[Written]:
    """Every `invoice-pipeline ...` in code, and every command in the first column of a table
    whose first header is "command" (cli.md's and the README's tables leave the name out)."""
    for line, code in code_texts(text):
        for match in _INVOCATION.finditer(code):
            rest = _COMMAND_END.split(match.group(1), maxsplit=1)[0]
            yield Written(f"{where}:{line}", tuple(rest.split()))
    in_table = False
    for number, row in enumerate(text.splitlines(), 1):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip().strip("|"))]
        if not row.lstrip().startswith("|"):
            in_table = False
            continue
        if cells and cells[0].lower() == "command":
            in_table = True
            continue
        if in_table and cells and not set(cells[0]) <= set("-: "):
            for span in INLINE_CODE.finditer(cells[0]):
                for alternative in table_alternatives(span.group(2)):
                    yield Written(f"{where}:{number}", alternative)


def table_alternatives(cell: str) -> Iterator[tuple[str, ...]]:
    """`review list \\| approve \\| reject` is three commands: each alternative after the first
    takes the place of the first one's last word. Brackets (optional parts) are dropped."""
    parts = [p.split() for p in cell.replace("\\|", "|").replace("[", " ").replace("]", " ").split("|")]
    head = parts[0]
    yield tuple(head)
    for words in parts[1:]:
        if words and head:
            yield tuple(head[:-1] + words)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: sub
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, sub in action.choices.items()
    }


def command_problem(parser: argparse.ArgumentParser, words: tuple[str, ...]) -> str | None:
    """Why `invoice-pipeline WORDS` names something the parser lacks, or None. Where the parser
    wants a subcommand, the next word must be one; every `--flag` must be the (sub)command's; a
    lowercase word where a positional with choices stands must be one of them (an uppercase
    word is a placeholder: `ORG`, `INVOICE_ID`)."""
    path = ["invoice-pipeline"]
    positional = 0
    takes_value = False
    for word in words:
        if takes_value:
            takes_value = False
            continue
        subs = _subcommands(parser)
        if word.startswith("--"):
            flag = word.split("=", 1)[0].rstrip(".,:")
            action = _option(parser, flag)
            if action is None:
                return f"`{' '.join(path)}` has no option {flag}"
            takes_value = action.nargs != 0 and "=" not in word
            continue
        name = word.rstrip(".,:")
        if subs:
            if name not in subs:
                return f"`{' '.join(path)}` has no command {name!r} (it has {', '.join(subs)})"
            parser = subs[name]
            path.append(name)
            positional = 0
            continue
        slots = [a for a in parser._actions if not a.option_strings]
        allowed = slots[positional].choices if positional < len(slots) else None
        if allowed is not None and name.islower():
            choices = [str(c) for c in allowed]
            if name not in choices:
                return f"`{' '.join(path)}` takes {' | '.join(choices)} there, not {name!r}"
        positional += 1
    return None


def _option(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((a for a in parser._actions if flag in a.option_strings), None)


# -- make targets --------------------------------------------------------------------------------

_MAKE = re.compile(r"(?:^|[\s(`])make\s+([^|;&`)]*)")
# Options make itself takes that a page may show.
MAKE_OPTIONS = ("-j", "-k", "-n", "-s", "-C")


def make_targets(makefile: Path) -> set[str]:
    targets = set(re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", makefile.read_text(encoding="utf-8"), re.M))
    return targets


def make_problems(text: str, where: str, targets: set[str]) -> Iterator[str]:
    for line, code in code_texts(text):
        for match in _MAKE.finditer(code):
            try:
                words = shlex.split(match.group(1))
            except ValueError:  # an unclosed quote: the words as written
                words = match.group(1).split()
            for word in words:
                if word.startswith("#"):
                    break
                if "=" in word:
                    continue  # VAR=value
                if word.startswith("-"):
                    if not word.startswith(MAKE_OPTIONS):
                        yield f"{where}:{line}: `make {match.group(1).strip()}`: make has no option {word}"
                    continue
                if word not in targets:
                    yield f"{where}:{line}: no make target {word!r}"


# -- migrations named by number -----------------------------------------------------------------

_MIGRATION = re.compile(r"\bsql/(\d{4})(?:_[\w.]*)?\b")


def migration_problems(text: str, where: str, root: Path) -> Iterator[str]:
    numbers = {p.name[:4] for p in (root / "sql").glob("[0-9][0-9][0-9][0-9]_*.sql")}
    for line, code in code_texts(text):
        for match in _MIGRATION.finditer(code):
            if match.group(1) not in numbers:
                yield f"{where}:{line}: no migration {match.group(0)}"


# -- environment variables -----------------------------------------------------------------------

_ENV_NAME = re.compile(r"^(?:INVOICE_PIPELINE|DAGSTER|PG)[A-Z0-9_]*$")


def environment_variables(package: Path) -> set[str]:
    """Every variable the code reads: each `ENV_* = "NAME"` constant, each name read through
    `os.environ[...]`, `os.environ.get`, `os.getenv` or an `env.get` of a mapping of them, and
    each INVOICE_PIPELINE_* string."""
    names: set[str] = set()
    constants: dict[str, str] = {}
    trees = [ast.parse(path.read_text(encoding="utf-8")) for path in sorted(package.rglob("*.py"))]
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id.startswith("ENV_"):
                        constants[target.id] = str(node.value.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value.startswith("INVOICE_PIPELINE_") and _ENV_NAME.match(node.value):
                    names.add(node.value)
    names |= set(constants.values())
    for tree in trees:
        for node in ast.walk(tree):
            key: ast.expr | None = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                reads = node.func.attr == "getenv" or (
                    node.func.attr == "get" and _is_environment(node.func.value)
                )
                key = node.args[0] if reads else None
            elif isinstance(node, ast.Subscript) and _is_environment(node.value):
                key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names.add(key.value)
    return names


def _is_environment(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def undocumented_variables(configuration: str, variables: set[str]) -> list[str]:
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", configuration))
    return sorted(variables - documented)


# -- names the how-tos give ----------------------------------------------------------------------

_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?$")


# Where the how-tos' names are defined: the product, and the chaos scenarios and test support
# they send a contributor to.
CODE_FOLDERS = ("invoice_pipeline", "chaos", "pipeline_support", "benchmarks")


@dataclass(frozen=True)
class Definitions:
    """What the code defines: module-level and class-level names, per class, and SQL query names."""

    names: set[str]
    members: dict[str, set[str]]
    queries: set[str]

    @classmethod
    def of(cls, root: Path) -> Definitions:
        names: set[str] = set()
        members: dict[str, set[str]] = {}
        for path in sorted(p for folder in CODE_FOLDERS for p in (root / folder).rglob("*.py")):
            names.add(path.stem)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                if isinstance(node, ast.ClassDef):
                    members.setdefault(node.name, set()).update(_member_names(node))
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    names.update(t.id for t in targets if isinstance(t, ast.Name))
        queries = set()
        for path in (root / "sql").rglob("*.sql"):
            queries.update(re.findall(r"^-- name: (\w+)", path.read_text(encoding="utf-8"), re.M))
        return cls(names, members, queries)

    def lacks(self, written: str) -> str | None:
        """Why `written` (`name`, `name()`, `Class.member`, `module.name`) is not defined, or None."""
        parts = written.removesuffix("()").split(".")
        *owners, last = parts
        if owners and owners[-1] in self.members:
            if last not in self.members[owners[-1]]:
                return f"class {owners[-1]} has no {last}"
            return None
        if last not in self.names and last not in self.queries:
            return f"{written} is defined nowhere in {', '.join(CODE_FOLDERS)} or sql/"
        return None


def _member_names(node: ast.ClassDef) -> set[str]:
    out = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            out.add(item.target.id)
        elif isinstance(item, ast.Assign):
            out.update(t.id for t in item.targets if isinstance(t, ast.Name))
    return out


def named_code(text: str) -> Iterator[tuple[int, str]]:
    """Inline code that names code: `def`-like names with an underscore, a dot or a call's
    parentheses, or a CamelCase class; plain words (`approve`, `processed`) are values."""
    prose = without_code_blocks(text)
    for span in INLINE_CODE.finditer(prose):
        code = span.group(2).strip()
        if "/" in code or not _IDENTIFIER.match(code) or code.endswith((".py", ".sql", ".md")):
            continue
        if "_" in code or "." in code or code.endswith("()") or re.match(r"^[A-Z][a-z]+[A-Z]", code):
            yield prose.count("\n", 0, span.start()) + 1, code


# What a how-to may write in code that is no definition: values, statuses, outcomes and
# columns the recipes mention by name (each checked elsewhere: statuses by sql/'s CHECKs).
VALUES_NOT_DEFINITIONS = re.compile(r"^(?:%\(\w+\)s|[a-z]+_[a-z_]+_at|step=)$")


def howto_problems(text: str, where: str, defined: Definitions, vocabulary: str) -> Iterator[str]:
    for line, code in named_code(text):
        if VALUES_NOT_DEFINITIONS.match(code):
            continue
        why = defined.lacks(code)
        if why is None:
            continue
        # A value the code or SQL spells (a status, a column, an asset key) is no definition, but
        # it exists; so does a member of a library's class (`DefaultScheduleStatus.RUNNING`). A
        # private name, a call, or a member of one of the project's classes must be defined.
        parts = code.removesuffix("()").split(".")
        spelt = re.search(rf"(?<![\w.]){re.escape(parts[-1])}\b", vocabulary) is not None
        library = len(parts) > 1 and parts[-2] not in defined.members and parts[-2] in vocabulary
        if library or (spelt and len(parts) == 1 and not code.startswith("_") and not code.endswith("()")):
            continue
        yield f"{where}:{line}: `{code}`: {why}"


# -- the checks, on the checkout -----------------------------------------------------------------


def pages(root: Path) -> list[tuple[str, str]]:
    return [(str(p.relative_to(root)), p.read_text(encoding="utf-8")) for p in markdown_files(root)]


def test_every_command_and_flag_the_docs_write_exists() -> None:
    parser = build_parser()
    problems = [
        f"{w.where}: invoice-pipeline {' '.join(w.words)}: {why}"
        for where, text in pages(ROOT)
        for w in cli_commands(text, where)
        if (why := command_problem(parser, w.words))
    ]
    assert problems == []


def test_cli_md_lists_every_command() -> None:
    """docs/cli.md says it has every command: each of the parser's is in its tables."""
    listed = {
        w.words[:1] for w in cli_commands((ROOT / "docs" / "cli.md").read_text(encoding="utf-8"), "cli.md")
    }
    assert sorted(set(_subcommands(build_parser())) - {words[0] for words in listed if words}) == []


def test_every_make_target_and_migration_the_docs_name_exists() -> None:
    targets = make_targets(ROOT / "Makefile")
    problems = [p for where, text in pages(ROOT) for p in make_problems(text, where, targets)]
    problems += [p for where, text in pages(ROOT) for p in migration_problems(text, where, ROOT)]
    assert problems == []


def test_every_environment_variable_the_code_reads_is_in_configuration_md() -> None:
    variables = environment_variables(ROOT / "invoice_pipeline")
    assert "INVOICE_PIPELINE_PG_PORT" in variables and "INVOICE_PIPELINE_CELERY_BROKER" in variables
    configuration = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert undocumented_variables(configuration, variables) == []


def _vocabulary(root: Path) -> str:
    patterns = [f"{folder}/**/*.py" for folder in CODE_FOLDERS] + [
        "sql/**/*.sql",
        "invoice_pipeline/**/*.html",
    ]
    return "\n".join(p.read_text(encoding="utf-8") for pattern in patterns for p in root.glob(pattern))


def test_every_function_a_howto_names_exists() -> None:
    defined = Definitions.of(ROOT)
    vocabulary = _vocabulary(ROOT)
    problems = [
        p
        for path in sorted((ROOT / "docs" / "howto").glob("*.md"))
        for p in howto_problems(path.read_text(encoding="utf-8"), path.name, defined, vocabulary)
    ]
    assert problems == []


# -- each check fails on a page naming something removed -------------------------------------------


@pytest.mark.parametrize(
    "page, expected",
    [
        ("Run `invoice-pipeline orgs` to list them.", "has no command 'orgs'"),
        ("Then `invoice-pipeline review list --since 7d`.", "has no option --since"),
        ("```sh\n.venv/bin/invoice-pipeline dev --review-host 0.0.0.0\n```", "has no option --review-host"),
        (
            "| command | what |\n|---|---|\n| `review list \\| approve \\| undo` | x |",
            "has no command 'undo'",
        ),
        ("| command | what |\n|---|---|\n| `db start` / `gc [--all]` | x |", "has no command 'gc'"),
        ("Stop it with `invoice-pipeline db halt`.", "takes start | stop | status | url there, not 'halt'"),
    ],
)
def test_the_command_check_catches_a_command_or_flag_that_is_not_there(page: str, expected: str) -> None:
    parser = build_parser()
    found = [why for w in cli_commands(page, "page.md") if (why := command_problem(parser, w.words))]
    assert len(found) == 1 and expected in found[0], found


def test_the_command_check_lets_every_real_command_pass() -> None:
    page = (
        "`invoice-pipeline review layouts learn ID`, `invoice-pipeline db start`,\n"
        "```sh\ninvoice-pipeline review list --org acme --limit 5 | head\n```\n"
        "| command | what |\n|---|---|\n| `db start \\| stop \\| status \\| url` | x |\n"
        "| `review-ui [--host H] [--port P]` | x |\n| `dev [--review-port P]` | x |"
    )
    parser = build_parser()
    assert [command_problem(parser, w.words) for w in cli_commands(page, "p.md")] == [None] * 9


def test_the_make_check_catches_a_missing_target_and_an_option_make_refuses() -> None:
    targets = {"bench", "test"}
    page = "`make bench --quick`, `make bench BENCH_ARGS=--quick`, `make benchmark`, `make -j2 test`"
    assert list(make_problems(page, "p.md", targets)) == [
        "p.md:1: `make bench --quick`: make has no option --quick",
        "p.md:1: no make target 'benchmark'",
    ]


def test_the_migration_check_catches_a_number_that_is_not_there() -> None:
    assert list(migration_problems("`sql/0006` and `sql/9999_gone.sql`", "p.md", ROOT)) == [
        "p.md:1: no migration sql/9999_gone.sql"
    ]


def test_the_variable_check_catches_a_variable_the_page_left_out(tmp_path: Path) -> None:
    package = tmp_path / "invoice_pipeline"
    package.mkdir()
    (package / "settings.py").write_text(
        'import os\nENV_X = "INVOICE_PIPELINE_X"\nport = os.environ.get("INVOICE_PIPELINE_Y")\n'
        'host = os.getenv("OTHER_HOST")\n'
    )
    variables = environment_variables(package)
    assert variables == {"INVOICE_PIPELINE_X", "INVOICE_PIPELINE_Y", "OTHER_HOST"}
    assert undocumented_variables("| `INVOICE_PIPELINE_X` | 1 |", variables) == [
        "INVOICE_PIPELINE_Y",
        "OTHER_HOST",
    ]


def test_the_howto_check_catches_a_function_that_moved_or_is_gone() -> None:
    defined = Definitions.of(ROOT)
    vocabulary = _vocabulary(ROOT)
    page = "`Database.write_chunk`, `Database._write_chunk`, `STAGE_ASSETS`, `_write_chunk`, `run_stage`"
    assert list(howto_problems(page, "p.md", defined, vocabulary)) == [
        "p.md:1: `Database._write_chunk`: class Database has no _write_chunk",
        "p.md:1: `_write_chunk`: _write_chunk is defined nowhere in invoice_pipeline, chaos, pipeline_support, benchmarks or sql/",
    ]
