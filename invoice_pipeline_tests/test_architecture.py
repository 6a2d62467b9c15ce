"""The import rules that keep the layers apart, checked on the source of every module.

    domain/, documents/   pure: no database, no engine, no Dagster
    db/                   the database: no engine, no Dagster
    engine/               Dagster-free: it never imports Dagster nor the adapter that drives it
    orchestration/        the Dagster adapter: neither the review page nor the CLI
    review_ui/            the review page, an adapter over the engine: no Dagster, no CLI
    cli/                  the command line: the only importer of review_ui/

Each module's syntax tree is walked, so an import inside a function counts, a relative import
is resolved to the module it names, and `importlib.import_module("...")` / `__import__("...")`
with a literal name count too.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import invoice_pipeline
from invoice_pipeline.orchestration import run_requests

PACKAGE_DIR = Path(invoice_pipeline.__file__).resolve().parent

DAGSTER = ("dagster", "dagster_*")
DATABASE = ("psycopg", "psycopg_*", "invoice_pipeline.db", "invoice_pipeline.engine")
ADAPTER = ("invoice_pipeline.orchestration",)
REVIEW_UI = ("invoice_pipeline.review_ui",)
CLI = ("invoice_pipeline.cli",)


@dataclass(frozen=True)
class Rule:
    layer: str  # a folder of invoice_pipeline/
    forbidden: tuple[str, ...]  # module names; "x_*" is any top-level package starting with "x_"
    why: str


RULES = (
    Rule("engine", DAGSTER + ADAPTER, "the engine is Dagster-free; the adapter drives it, not the reverse"),
    Rule("db", DAGSTER + ADAPTER + ("invoice_pipeline.engine",), "the database layer sits below the engine"),
    Rule("domain", DAGSTER + DATABASE + ADAPTER + ("invoice_pipeline.documents",), "the domain is pure"),
    Rule("documents", DAGSTER + DATABASE + ADAPTER, "documents are pure: bytes in, words and fields out"),
    Rule(
        "orchestration",
        REVIEW_UI + CLI,
        "the Dagster adapter and the review page are two doors onto the engine: neither imports the other",
    ),
    Rule(
        "review_ui",
        DAGSTER + ADAPTER + CLI,
        "the review page is an adapter over the engine; the CLI starts it",
    ),
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, module: str, *, is_package: bool = False) -> set[str]:
    """Every module `source` (the text of `module`) imports, as absolute dotted names."""
    names: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            # `from pkg import sub` may import the submodule pkg.sub
            names.update(f"{prefix}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                names.add(node.args[0].value)
    return names


def matches(name: str, pattern: str) -> bool:
    if pattern.endswith("_*"):
        return name.split(".")[0].startswith(pattern[:-1])
    return name == pattern or name.startswith(pattern + ".")


def violations(source: str, module: str, rule: Rule, *, is_package: bool = False) -> list[str]:
    return sorted(
        f"{module} imports {name} ({rule.why})"
        for name in imported_names(source, module, is_package=is_package)
        if any(matches(name, pattern) for pattern in rule.forbidden)
    )


def modules_of(layer: str) -> list[Path]:
    return sorted((PACKAGE_DIR / layer).rglob("*.py"))


def violations_in(paths: list[Path], rule: Rule) -> list[str]:
    return [
        problem
        for path in paths
        for problem in violations(
            path.read_text(), module_name(path), rule, is_package=path.name == "__init__.py"
        )
    ]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.layer)
def test_layer_imports_follow_the_rules(rule: Rule) -> None:
    paths = modules_of(rule.layer)
    assert paths, f"no modules under invoice_pipeline/{rule.layer}"
    assert violations_in(paths, rule) == []


ENGINE = next(r for r in RULES if r.layer == "engine")
DOMAIN = next(r for r in RULES if r.layer == "domain")
# Only the CLI imports the review page (issue 57): every module of the package but the CLI's and
# the page's own, the top-level ones (config.py, forked.py ...) included.
ONLY_THE_CLI = Rule("*", REVIEW_UI, "only the CLI starts the review page")


def outside_the_cli_and_the_page(path: Path) -> bool:
    return path.relative_to(PACKAGE_DIR).parts[0] not in ("cli", "review_ui")


def test_only_the_cli_imports_the_review_page() -> None:
    paths = [path for path in sorted(PACKAGE_DIR.rglob("*.py")) if outside_the_cli_and_the_page(path)]
    assert any(path.parent == PACKAGE_DIR for path in paths)  # the top-level modules are checked too
    assert violations_in(paths, ONLY_THE_CLI) == []


@pytest.mark.parametrize(
    ("source", "module", "rule"),
    [
        ("from dagster import op", "invoice_pipeline.engine.stages", ENGINE),
        ("import dagster", "invoice_pipeline.engine.stages", ENGINE),
        ("import dagster_postgres.utils as u", "invoice_pipeline.engine.stages", ENGINE),
        ("def f():\n    from dagster import RunsFilter\n", "invoice_pipeline.engine.maintenance", ENGINE),
        ("import importlib\nimportlib.import_module('dagster')", "invoice_pipeline.engine.runs", ENGINE),
        ("from invoice_pipeline.orchestration import ops", "invoice_pipeline.engine.stages", ENGINE),
        ("from ..orchestration.resources import InvoiceDatabase", "invoice_pipeline.engine.stages", ENGINE),
        ("import psycopg", "invoice_pipeline.domain.keys", DOMAIN),
        ("from psycopg_pool import ConnectionPool", "invoice_pipeline.domain.keys", DOMAIN),
        ("from invoice_pipeline.db.sqlfiles import query", "invoice_pipeline.domain.keys", DOMAIN),
        ("from ..db import connection", "invoice_pipeline.domain.keys", DOMAIN),
        ("from invoice_pipeline.engine.store import InvoiceStore", "invoice_pipeline.domain.review", DOMAIN),
        ("from invoice_pipeline.engine import store", "invoice_pipeline.domain.review", DOMAIN),
        (
            "from invoice_pipeline.review_ui.auth import load_users",
            "invoice_pipeline.orchestration.jobs",
            ONLY_THE_CLI,
        ),
        (
            "def f():\n    from ..review_ui.pages import sandboxed\n",
            "invoice_pipeline.documents.sandbox_worker",
            ONLY_THE_CLI,
        ),
        ("import invoice_pipeline.review_ui.app", "invoice_pipeline.config", ONLY_THE_CLI),
    ],
)
def test_the_rules_catch_an_offending_import(source: str, module: str, rule: Rule) -> None:
    assert violations(source, module, rule), f"{source!r} in {module} was not caught"


@pytest.mark.parametrize(
    ("source", "module", "rule"),
    [
        (
            "from invoice_pipeline.domain.fields import InvoiceFields",
            "invoice_pipeline.engine.stages",
            ENGINE,
        ),
        ("from .records import Lease", "invoice_pipeline.engine.stages", ENGINE),
        ("from ..domain.fields import Box", "invoice_pipeline.domain.keys", DOMAIN),
        ("x = 'dagster'", "invoice_pipeline.engine.runs", ENGINE),
        ("import dagsterish", "invoice_pipeline.engine.runs", ENGINE),
    ],
)
def test_the_rules_let_an_allowed_import_pass(source: str, module: str, rule: Rule) -> None:
    assert violations(source, module, rule) == []


# Dagster's vocabulary, which only the adapter speaks: anything naming Dagster (its tags such as
# "dagster/run_key", a run's lease owner "dagster-run:<id>"), the run config's "ops" key and the
# processing jobs' names. The engine sees plain values and opaque owners. (Asset names are left
# out: they are the tables' names too, which the engine rightly says.)
DAGSTER_WORDS = frozenset({"ops", run_requests.PROCESS_INVOICE, run_requests.PROCESS_INVOICE_BATCH})


def dagster_vocabulary(source: str) -> list[str]:
    """The string literals of `source` (docstrings aside) that are Dagster's vocabulary."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and ("dagster" in node.value.lower() or node.value in DAGSTER_WORDS)
    ]


def test_the_engine_speaks_no_dagster() -> None:
    found = [
        f"{module_name(path)}: {word!r}"
        for path in modules_of("engine")
        for word in dagster_vocabulary(path.read_text())
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        'RUN_KEY_TAG = "dagster/run_key"',
        'def owner(run_id):\n    return f"dagster-run:{run_id}"',
        'config = {"ops": {"fan_out": {"config": {}}}}',
        'JOB = "process_invoice_batch"',
    ],
)
def test_the_vocabulary_check_catches_dagster_words(source: str) -> None:
    assert dagster_vocabulary(source), f"{source!r} was not caught"


def test_the_vocabulary_check_lets_docstrings_and_plain_values_pass() -> None:
    source = '"""Driven by Dagster (orchestration/)."""\n\ndef f():\n    """The Dagster run."""\n    return "extract_text"\n'
    assert dagster_vocabulary(source) == []


# -- no circles, no private reach (issue 39) ------------------------------------------------------

# No circles and no private reach anywhere: the product, and everything beside it that imports it
# (the reliability suite, the benchmarks, the development support) (issues 39 and 57).
ROOTS = (PACKAGE_DIR, *(PACKAGE_DIR.parent / name for name in ("chaos", "benchmarks", "pipeline_support")))


def module_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Who imports whom among `sources` (module -> (text, is_package)), imports inside
    functions included; a module's import of its own enclosing packages is not an edge (running
    a package's __init__ first is how Python imports a submodule, not a dependency)."""
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        found = {name for name in imported_names(source, module, is_package=is_package) if name in sources}
        graph[module] = {name for name in found if name != module and not module.startswith(name + ".")}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def private_reaches(source: str, module: str, modules: set[str], *, is_package: bool = False) -> list[str]:
    """`from other import _name` where `other` is another module of ours: a private name used
    across a module boundary."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)] if node.level else []
        target = ".".join(base + ([node.module] if node.module else []))
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and target in modules and target != module:
                found.append(f"{module} imports {target}.{alias.name}")
    return found


def our_sources(roots: tuple[Path, ...] = ROOTS) -> dict[str, tuple[str, bool]]:
    sources = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            sources[module_name(path)] = (path.read_text(), path.name == "__init__.py")
    return sources


def test_the_circle_and_private_checks_read_every_folder_of_ours() -> None:
    packages = {module.split(".")[0] for module in our_sources()}
    assert packages == {"invoice_pipeline", "chaos", "benchmarks", "pipeline_support"}


def test_no_module_imports_in_a_circle() -> None:
    assert circles(module_graph(our_sources())) == []


def test_no_module_imports_another_modules_private_name() -> None:
    sources = our_sources()
    found = [
        problem
        for module, (source, is_package) in sources.items()
        for problem in private_reaches(source, module, set(sources), is_package=is_package)
    ]
    assert found == []


def test_the_circle_and_private_checks_catch_what_they_name() -> None:
    sources = {
        "pkg": ("", True),
        "pkg.a": ("def f():\n    from pkg.b import g\n", False),
        "pkg.b": ("from pkg import c\n", False),
        "pkg.c": ("from .a import _helper\n", False),
        "pkg.d": ("import pkg\n", False),
    }
    assert circles(module_graph(sources)) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert private_reaches(*sources["pkg.c"][:1], "pkg.c", set(sources)) == ["pkg.c imports pkg.a._helper"]


# A function a newcomer reads in one screen (issue 39), a class and a module read in one sitting
# (issue 57): everywhere in the product, so no part, page or reader grows back into one block.
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 300
MAX_MODULE_LINES = 600


def too_long(source: str, module: str) -> list[str]:
    found = []
    if len(source.splitlines()) > MAX_MODULE_LINES:
        found.append(f"{module}: {len(source.splitlines())} lines")
    for node in ast.walk(ast.parse(source)):
        length = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and length > MAX_FUNCTION_LINES:
            found.append(f"{module}.{node.name}: {length} lines")
        if isinstance(node, ast.ClassDef) and length > MAX_CLASS_LINES:
            found.append(f"{module}.{node.name}: {length} lines")
    return found


def test_no_product_module_is_over_600_lines_no_class_over_300_no_function_over_80() -> None:
    found = [
        problem
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for problem in too_long(path.read_text(), module_name(path))
    ]
    assert found == []


def test_the_length_check_catches_a_long_function_class_and_module() -> None:
    long_function = "def f():\n" + "    x = 1\n" * MAX_FUNCTION_LINES
    assert too_long(long_function, "invoice_pipeline.engine.stages") == [
        "invoice_pipeline.engine.stages.f: 81 lines"
    ]
    long_class = "class Part:\n" + "".join(f"    def m{i}(self):\n        pass\n" for i in range(150))
    assert too_long(long_class, "invoice_pipeline.review_ui.app") == [
        "invoice_pipeline.review_ui.app.Part: 301 lines"
    ]
    long_module = "".join(f"X{i} = {i}\n" for i in range(MAX_MODULE_LINES + 1))
    assert too_long(long_module, "invoice_pipeline.samples.twins") == [
        "invoice_pipeline.samples.twins: 601 lines"
    ]
    assert too_long(long_module[: -len("X600 = 600\n")], "invoice_pipeline.samples.twins") == []


# -- settings are read once, at the edge (issue 57) --------------------------------------------
#
# Only config.py reads the environment for settings (`Settings.from_env`), and only the edges
# call it: the CLI's parser and a code location as it loads. Everything below them is given the
# settings (the store its lease TTL, the Dagster resource its configuration), so nothing reads
# a setting lazily, at first use, in whatever process happens to get there. A write
# (`os.environ[X] = ...`: what a process exports for its children) is no read.
SETTINGS_MODULE = "invoice_pipeline.config"
READS_THE_ENVIRONMENT = {
    "invoice_pipeline.child_python": "passes this process's environment on to the Python children it "
    "starts (PYTHONSAFEPATH added); each child reads its settings at its own edge",
    "invoice_pipeline.db.embedded": "PGPASSFILE is libpq's variable, which the project sets for itself "
    "and its children and reads back to merge a file the user set; INVOICE_PIPELINE_SERVER_ROOT is "
    "read where root's server is found, also by the servers the tests, chaos and benchmarks make "
    "without Settings",
    "invoice_pipeline.documents.ocr": "sets defaults for the OCR libraries' thread counts "
    "(OMP_NUM_THREADS ...) inside the sandboxed child: the native libraries read them, not the project",
    "invoice_pipeline.orchestration.celery_jobs": "a celery worker host's own environment: its broker, "
    "backend and host label are the worker's, read in the process celery starts there, not the "
    "code location's settings",
}
CALLS_FROM_ENV = {
    "invoice_pipeline.cli.parser": "the CLI's edge: each command is given the settings",
    "invoice_pipeline.orchestration.resources.deployments": "a code location's edge, as it loads",
    "invoice_pipeline.orchestration.celery_jobs": "the celery worker's edge (see above)",
}


def environment_reads(source: str) -> list[int]:
    """The lines where `source` reads the environment: `os.environ` (or a bare `environ`) used
    any way but as the target of an assignment or a `del`, and `os.getenv`; plus `from_env(`
    calls, reported as negative line numbers."""
    tree = ast.parse(source)
    written = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store | ast.Del)
    }
    lines = []
    for node in ast.walk(tree):
        environ = (isinstance(node, ast.Attribute) and node.attr == "environ") or (
            isinstance(node, ast.Name) and node.id == "environ"
        )
        if (environ and id(node) not in written) or (
            isinstance(node, ast.Attribute) and node.attr == "getenv"
        ):
            lines.append(node.lineno)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "from_env"
        ):
            lines.append(-node.lineno)
    return sorted(lines)


def test_only_the_settings_module_reads_the_environment_and_only_the_edges_read_settings() -> None:
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = module_name(path)
        if module == SETTINGS_MODULE:
            continue
        for line in environment_reads(path.read_text()):
            if line > 0 and module not in READS_THE_ENVIRONMENT:
                found.append(f"{module}:{line} reads the environment (only {SETTINGS_MODULE} does)")
            if line < 0 and module not in CALLS_FROM_ENV:
                found.append(
                    f"{module}:{-line} reads the settings (only the edges do: {sorted(CALLS_FROM_ENV)})"
                )
    assert found == []
    # Every exception is still needed: one whose module stopped reading goes off the list.
    reading = {
        module_name(p)
        for p in PACKAGE_DIR.rglob("*.py")
        if any(n > 0 for n in environment_reads(p.read_text()))
    }
    calling = {
        module_name(p)
        for p in PACKAGE_DIR.rglob("*.py")
        if any(n < 0 for n in environment_reads(p.read_text()))
    }
    assert set(READS_THE_ENVIRONMENT) <= reading and set(CALLS_FROM_ENV) <= calling


@pytest.mark.parametrize(
    ("source", "reads"),
    [
        ("import os\nurl = os.environ.get('X')\n", [2]),
        ("import os\nenv = dict(os.environ)\n", [2]),
        ("from os import environ\nx = environ['X']\n", [2]),
        ("import os\nx = os.getenv('X')\n", [2]),
        ("import os\nos.environ.setdefault('X', '1')\n", [2]),
        # The lazy read issue 57 removed from shared_store: settings read at first use.
        ("def store():\n    return prepare_database(Settings.from_env())\n", [-2]),
        ("import os\nos.environ['DAGSTER_HOME'] = '/h'\n", []),
        ("import os\ndel os.environ['X']\n", []),
    ],
)
def test_the_environment_check_catches_reads_and_lets_writes_pass(source: str, reads: list[int]) -> None:
    assert environment_reads(source) == reads
