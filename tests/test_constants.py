"""Module-level constants in ci_runner/: typed Final, and one name means one value everywhere.

``SAMPLE_CHARS`` was once assigned twice in one module (80, then 64 KiB) and the first meaning
silently lost; ``Final`` makes mypy refuse a second assignment, and a name defined in two modules
with two values is the same trap across files.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from testing.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "ci_runner"
# Each command module's entry for the CLI: one per module by design.
PER_MODULE = {"COMMAND"}


def is_constant(name: str) -> bool:
    bare = name.lstrip("_")
    return not name.startswith("__") and bare.isupper()


def constants(path: Path) -> Iterator[tuple[str, int, ast.expr | None, ast.expr]]:
    """(name, line, annotation, value) of each module-level constant in ``path``."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            if isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "TypeVar":
                continue  # a type variable is not a constant
            for target in node.targets:
                if isinstance(target, ast.Name) and is_constant(target.id):
                    yield target.id, node.lineno, None, node.value
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.value is not None
            and is_constant(node.target.id)
        ):
            yield node.target.id, node.lineno, node.annotation, node.value


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(REPO_ROOT)}:{line}"


def test_the_package_has_constants_to_check() -> None:
    names = {name for path in modules() for name, *_ in constants(path)}
    assert {"SAMPLE_CHARS", "SERIES_CAPACITY", "TAIL_LINES", "JSON"} <= names


def test_every_constant_is_final() -> None:
    untyped = [
        f"{where(path, line)}: {name}"
        for path in modules()
        for name, line, annotation, _ in constants(path)
        if annotation is None or not ast.unparse(annotation).startswith(("Final", "TypeAlias"))
    ]
    assert untyped == []


def test_a_name_has_one_value_across_modules() -> None:
    values: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in modules():
        for name, line, _, value in constants(path):
            if name not in PER_MODULE:
                values[name][ast.unparse(value)].append(where(path, line))
    conflicting = {name: dict(by_value) for name, by_value in values.items() if len(by_value) > 1}
    assert conflicting == {}
