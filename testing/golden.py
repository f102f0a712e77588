"""Golden files: rendered text compared with a file in tests/golden/.

Without ``--update-golden`` a difference fails the test with the unified diff; with it, the diff
is printed and the golden file rewritten (the test then passes). Nothing else writes them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

import pytest

UPDATE_OPTION = "--update-golden"


def golden_diff(path: Path, text: str, label: str) -> str:
    """The unified diff from the file at ``path`` (none: /dev/null) to ``text``; "" if equal."""
    exists = path.is_file()
    old = path.read_text(encoding="utf-8") if exists else ""
    if exists and old == text:
        return ""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        text.splitlines(keepends=True),
        fromfile=f"a/{label}" if exists else "/dev/null",
        tofile=f"b/{label}",
    )
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


class Golden:
    """Checks rendered text against the golden files in ``directory``."""

    def __init__(self, directory: Path, update: bool, show: Callable[[str], None]) -> None:
        self.directory = directory
        self.update = update
        self.show = show

    def check(self, name: str, text: str) -> None:
        """Fail with the diff when ``text`` differs from golden file ``name`` (or update it)."""
        path = self.directory / name
        label = f"{self.directory.name}/{name}"
        diff = golden_diff(path, text, label)
        if not diff:
            return
        if self.update:
            self.show(f"{UPDATE_OPTION}: rewriting {label}\n{diff}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            return
        pytest.fail(
            f"{label} differs from the rendered text (if the change is meant, accept it with "
            f"pytest {UPDATE_OPTION}):\n{diff}",
            pytrace=False,
        )
