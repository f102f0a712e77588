"""The package reads as the flow: each layer imports only the layers below it, and no cycle.

The layers, lowest first, as docs/developing.md draws them. A module may import
its own layer and any lower one, at module level or inside a function; a new module must be
given a layer here.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ci_runner"

LAYERS: tuple[tuple[str, ...], ...] = (
    # the ground everything stands on
    ("errors", "clock", "masking", "templating", "console", "http_policy", "venv_layer"),
    # CI environment + train.yaml at the SHA -> validated config
    ("gitrepo", "context", "config"),
    # -> one plan of the run
    ("plan",),
    # -> the MPIJob, and its YAML
    ("render", "kube_yaml"),
    # -> a backend runs it and yields status and log lines
    ("backends",),
    # GitLab's API (the comment, the baseline's bytes)
    ("gitlab",),
    # -> metrics, outputs, the report, posted
    ("results",),
    # -> the run in MLflow / GitLab's model experiments
    ("tracking",),
    # the subcommands, then the command line
    ("commands",),
    ("cli", "__main__"),
)


@functools.cache
def _modules() -> tuple[str, ...]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(("ci_runner", *parts)))
    return tuple(names)


def _path(module: str) -> Path:
    parts = module.split(".")[1:]
    candidate = PACKAGE.joinpath(*parts).with_suffix(".py")
    return candidate if candidate.is_file() else PACKAGE.joinpath(*parts, "__init__.py")


def _layer(module: str) -> int:
    first = module.split(".")[1] if "." in module else ""
    for index, names in enumerate(LAYERS):
        if first in names:
            return index
    raise AssertionError(f"{module} has no layer: add it to LAYERS in tests/test_layout.py")


def _imports(module: str, top_level_only: bool, source: str | None = None) -> Iterator[str]:
    """The ci_runner modules ``module`` imports (``from X import y`` may name a submodule)."""
    text = _path(module).read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text)
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    known = set(_modules())
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("ci_runner."))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith("ci_runner"):
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield sub if sub in known else node.module


def _upward(module: str, source: str | None = None) -> list[str]:
    own = _layer(module)
    imported = _imports(module, top_level_only=False, source=source)
    return sorted({m for m in imported if m != "ci_runner" and _layer(m) > own})


@pytest.mark.parametrize("module", [m for m in _modules() if m != "ci_runner"])
def test_no_layer_imports_upward(module: str) -> None:
    assert _upward(module) == [], f"{module} (layer {_layer(module)}) imports a higher layer"


def test_no_import_cycle_at_module_level() -> None:
    graph = {m: set(_imports(m, top_level_only=True)) - {m} for m in _modules()}
    done: set[str] = set()

    def visit(module: str, trail: tuple[str, ...]) -> None:
        if module in trail:
            cycle = " -> ".join((*trail[trail.index(module) :], module))
            raise AssertionError(f"import cycle: {cycle}")
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, (*trail, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


def test_an_upward_import_is_found_even_inside_a_function() -> None:
    source = (
        "from ci_runner.render import manifest_yaml\n"
        "def f():\n"
        "    from ci_runner.results import publish\n"
        "    import ci_runner.cli\n"
    )
    assert _upward("ci_runner.backends.local.backend", source) == [
        "ci_runner.cli",
        "ci_runner.results.publish",
    ]
    with pytest.raises(AssertionError, match="has no layer"):
        _layer("ci_runner.somewhere_new")


# Small modules with one job, and functions that fit on a screen (issue 36).
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60  # from ``def`` to the last line of its body


def _too_long(name: str, text: str) -> Iterator[str]:
    """``name`` when ``text`` is over :data:`MAX_MODULE_LINES` lines, and each function of it
    (methods and nested functions too) over :data:`MAX_FUNCTION_LINES`."""
    lines = len(text.splitlines())
    if lines > MAX_MODULE_LINES:
        yield f"{name}: {lines} lines"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                yield f"{name}:{node.lineno} {node.name}: {length} lines"


def test_no_module_over_500_lines_and_no_function_over_60() -> None:
    found = [
        problem
        for path in sorted(PACKAGE.rglob("*.py"))
        for problem in _too_long(
            str(path.relative_to(PACKAGE.parent)), path.read_text(encoding="utf-8")
        )
    ]
    assert found == []


def test_a_long_module_and_a_long_method_are_found() -> None:
    body = "".join(f"        x = {n}\n" for n in range(59))
    method = f"class C:\n    def f(self) -> None:\n{body}"
    assert list(_too_long("m.py", method)) == []
    assert list(_too_long("m.py", method + "        x = 59\n")) == ["m.py:2 f: 61 lines"]
    assert list(_too_long("m.py", "x = 1\n" * 501)) == ["m.py: 501 lines"]


REPO = PACKAGE.parent
# What may import what across the repository's packages: the product imports neither the test
# infrastructure nor the tests; the test infrastructure (which the tests, the benchmarks and the
# demo import) never imports the tests; no test module imports another (what several share is
# in testing/, their shared fixtures in tests/conftest.py).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "ci_runner": ("testing", "tests", "bench"),
    "testing": ("tests", "bench"),
    "bench": ("tests",),
    "tests": ("tests",),
}


def _top_level_imports(path: Path) -> Iterator[str]:
    """The top-level package of every import in ``path``, inside functions too (a relative
    import's is the package ``path`` is in)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            yield path.relative_to(REPO).parts[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module.split(".")[0]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_package_imports_what_it_must_not(package: str) -> None:
    wrong = sorted(
        f"{path.relative_to(REPO)} imports {name}"
        for path in (REPO / package).rglob("*.py")
        for name in set(_top_level_imports(path))
        if name in FORBIDDEN[package]
    )
    assert wrong == []


def test_nothing_that_ships_talks_about_our_benchmarks() -> None:
    """The package and the templates reach users (every manifest holds the pod scripts): a
    figure's reason is said in their words, never as a benchmark's number they cannot see."""
    root = Path(__file__).resolve().parent.parent
    shipped = [*(root / "ci_runner").rglob("*.py"), *(root / "templates").rglob("*")]
    found = [
        f"{path.relative_to(root)}:{number}"
        for path in shipped
        if path.is_file()
        for number, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if "bench" in line.lower()
    ]
    assert found == []
