"""The shared Jinja2 environment: compiled templates are cached between processes."""

from __future__ import annotations

import os
import subprocess
import sys

import jinja2

from ci_runner.templating import environment
from tests.conftest import REPO_ROOT

RENDER = (
    "from ci_runner.templating import environment\n"
    "print(environment().get_template('comment.md.j2').filename)\n"
)


def test_compiled_templates_are_cached_between_processes() -> None:
    cache = environment().bytecode_cache
    assert isinstance(cache, jinja2.FileSystemBytecodeCache)
    for _ in range(2):  # the first may compile and store, the second loads
        run = subprocess.run(
            [sys.executable, "-c", RENDER], cwd=REPO_ROOT, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip().endswith("comment.md.j2")
    assert any(name.startswith("__jinja2_") for name in os.listdir(cache.directory))
