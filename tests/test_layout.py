"""The package reads as the flow: each layer imports only the layers below it, and no cycle.

The layers, lowest first, as docs/developing.md draws them. A module may import
its own layer and any lower one, at module level or inside a function; a new module must be
given a layer here.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "ci_runner"

LAYERS: tuple[tuple[str, ...], ...] = (
    # the ground everything stands on
    (
        "errors",
        "variables",
        "clock",
        "masking",
        "templating",
        "console",
        "http_policy",
        "venv_layer",
        "uv_install",
        "torchrun_output",
        "kueue_names",
    ),
    # CI environment + train.yaml at the SHA -> validated config
    ("gitrepo", "context", "settings", "policy", "config"),
    # -> one plan of the run
    ("plan",),
    # -> the job (the MPIJob, or torchrun's Indexed Job), and its YAML
    ("render", "kube_yaml", "torchrun_job", "render_job"),
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


def _outside_functions(node: ast.AST) -> Iterator[ast.AST]:
    """``node``'s statements that run when the module is imported or type-checked: those under
    ``if TYPE_CHECKING:`` (mypy follows them, so they close a cycle as any import does), in
    ``try``, in a class body; never a function's body."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        yield child
        yield from _outside_functions(child)


def _imports(module: str, top_level_only: bool, source: str | None = None) -> Iterator[str]:
    """The ci_runner modules ``module`` imports (``from X import y`` may name a submodule);
    ``top_level_only``: those outside functions, ``if TYPE_CHECKING:`` included."""
    text = _path(module).read_text(encoding="utf-8") if source is None else source
    tree = ast.parse(text)
    nodes = list(_outside_functions(tree)) if top_level_only else list(ast.walk(tree))
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
    _assert_no_cycle(graph)


def _assert_no_cycle(graph: dict[str, set[str]]) -> None:
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


def test_an_import_under_type_checking_closes_a_cycle() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ci_runner.plan.run_plan import RunPlan\n"
        "def f():\n"
        "    from ci_runner.plan import deadline\n"
    )
    imported = set(_imports("ci_runner.plan.tracking", top_level_only=True, source=source))
    assert imported == {"ci_runner.plan.run_plan"}
    graph = {
        "ci_runner.plan.tracking": imported,
        "ci_runner.plan.run_plan": {"ci_runner.plan.tracking"},
    }
    with pytest.raises(AssertionError) as raised:
        _assert_no_cycle(graph)
    assert str(raised.value) == (
        "import cycle: ci_runner.plan.run_plan -> ci_runner.plan.tracking"
        " -> ci_runner.plan.run_plan"
    )


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


TESTING = REPO / "testing"


def _testing_part(path: Path) -> str:
    """The part of testing/ ``path`` belongs to: its subpackage, or its own module's name."""
    return path.relative_to(TESTING).parts[0].removesuffix(".py")


def _testing_graph() -> dict[str, set[str]]:
    """Which parts of testing/ (subpackages and top-level modules) each part imports, inside
    functions too: a lazy import still ties the two together."""
    graph: dict[str, set[str]] = {}
    for path in TESTING.rglob("*.py"):
        part = _testing_part(path)
        imported = graph.setdefault(part, set())
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module == "testing":
                names = [f"testing.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            imported |= {n.split(".")[1] for n in names if n.startswith("testing.")} - {part}
    return graph


def test_no_import_cycle_between_the_parts_of_testing() -> None:
    """A subpackage of testing/ (control_plane, scripted_cluster, emulated_cluster, ...) or a
    module beside them never imports one that imports it back, even through others."""
    _assert_no_cycle(_testing_graph())


def test_a_cycle_through_a_module_beside_the_subpackages_is_found() -> None:
    graph = {"scripted_cluster": {"backend_harness"}, "backend_harness": {"scripted_cluster"}}
    cycle = "backend_harness -> scripted_cluster -> backend_harness"
    with pytest.raises(AssertionError, match=cycle):
        _assert_no_cycle(graph)


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


# Each environment variable's name is written once, in ci_runner/variables.py: every other module
# names a variable through it (issue "seams"). A string that is exactly such a name is one.
NAMES_MODULE = "ci_runner/variables.py"
_VARIABLE_NAME = re.compile(r"(CI|AWS|MLFLOW|GITLAB|KUBE|KUBERNETES|RUNNER)_[A-Z0-9_]*|KUBECONFIG")
NOT_VARIABLES = {
    "CI_RUNNER_METRIC": "the prefix of a metric line in the training log, not a variable",
}


def _variable_names(name: str, text: str) -> Iterator[str]:
    """Each string constant of ``text`` that is a variable's name, as ``name:line NAME``."""
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if _VARIABLE_NAME.fullmatch(node.value) and node.value not in NOT_VARIABLES:
            yield f"{name}:{node.lineno} {node.value}"


def test_each_variable_name_is_written_in_one_module() -> None:
    found = [
        problem
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE.parent)) != NAMES_MODULE
        for problem in _variable_names(
            str(path.relative_to(PACKAGE.parent)), path.read_text(encoding="utf-8")
        )
    ]
    assert found == []


def test_a_variable_name_written_outside_the_names_module_is_found() -> None:
    source = 'A = "CI_JOB_TOKEN"\nB = f"{A}"\nC = "CI_RUNNER_METRIC"\nD = "see CI_JOB_ID"\n'
    assert list(_variable_names("m.py", source)) == ["m.py:1 CI_JOB_TOKEN"]
    assert list(_variable_names("m.py", 'env.get("KUBECONFIG")')) == ["m.py:1 KUBECONFIG"]


# The environment is read at one edge, into typed fields (ci_runner.settings.Settings); no
# function deeper takes the environment as a mapping (issue "seams").
EDGE_MODULES = {
    "ci_runner/cli.py": "main: the process's environment, read once into the Runtime's settings",
    "ci_runner/settings.py": "read_settings: every variable of ci-runner's own, into Settings",
    "ci_runner/context.py": "from_environment: GitLab's predefined variables, into CIContext",
    "ci_runner/policy.py": "project_policy: the maintainers' variables, into ProjectPolicy",
}
TAKES_AN_ENVIRONMENT = {
    "ci_runner/venv_layer.py venv_key(environ)": "stdlib only: the pods run it over their own "
    "process's environment (the PIP_* settings are part of the key)",
    "ci_runner/uv_install.py uv_settings(environ)": "stdlib only: the pods run it over their "
    "own process's environment (pip's settings, translated for uv)",
    "ci_runner/uv_install.py pip_config_file(environ)": "stdlib only: the pods run it over "
    "their own process's environment (where pip finds its files)",
    "ci_runner/uv_install.py uv_environment(environ)": "stdlib only: the environment uv runs "
    "with, the pod process's own less the image's UV_* settings",
    "ci_runner/uv_install.py why_not(environ)": "stdlib only: the pods run it over their own "
    "process's environment",
    "ci_runner/uv_install.py install(environ)": "stdlib only: the pods run it over their own "
    "process's environment",
    "ci_runner/backends/local/pyenv.py run_command(env)": "the environment a child process "
    "(pip, horovodrun --check-build) starts with, as built for it",
    "ci_runner/backends/local/supervise.py launch_process(env)": "the environment the ranks "
    "start with, as rank_environment built it",
    "ci_runner/backends/local/torchrun.py torchrun_launch(env)": "the environment torchrun and "
    "the ranks start with, as rank_environment built it, plus torchrun's own setting",
    "ci_runner/backends/local/torchrun.py _check_torch(env)": "the environment torchrun will "
    "start with, as rank_environment built it: torch must be importable there",
}
_ENVIRONMENT_PARAMETER = re.compile(r"(env|environ|environment)")
_MAPPING = re.compile(r"(Mapping|dict|MutableMapping)\[str, str\]")


def _environment_parameters(name: str, text: str) -> Iterator[str]:
    """Each parameter of a function of ``text`` that takes the environment as a mapping: named
    like it and annotated ``Mapping[str, str]`` (or a dict), as ``name function(parameter)``."""
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        arguments = node.args
        for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
            annotation = ast.unparse(argument.annotation) if argument.annotation else ""
            if _ENVIRONMENT_PARAMETER.fullmatch(argument.arg) and _MAPPING.search(annotation):
                yield f"{name} {node.name}({argument.arg})"


def test_no_function_outside_the_edge_takes_the_environment() -> None:
    found = [
        problem
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE.parent)) not in EDGE_MODULES
        for problem in _environment_parameters(
            str(path.relative_to(PACKAGE.parent)), path.read_text(encoding="utf-8")
        )
        if problem not in TAKES_AN_ENVIRONMENT
    ]
    assert found == []


def test_a_function_taking_the_environment_is_found() -> None:
    source = (
        "def f(env: Mapping[str, str], n: int) -> None: ...\n"
        "def g(*, environ: Mapping[str, str] | None = None) -> None: ...\n"
        "def h(settings: Settings, data: Mapping[str, str]) -> None: ...\n"
    )
    assert list(_environment_parameters("m.py", source)) == ["m.py f(env)", "m.py g(environ)"]
