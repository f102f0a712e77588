"""The shared Jinja2 environment: compiled templates are cached between processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jinja2

from ci_runner.templating import environment
from testing.paths import REPO_ROOT

# Renders the comment template and prints how many times Jinja2 compiled a template.
RENDER = (
    "import jinja2\n"
    "compiled = []\n"
    "compile_source = jinja2.Environment.compile\n"
    "def counting(self, *args, **kwargs):\n"
    "    compiled.append(1)\n"
    "    return compile_source(self, *args, **kwargs)\n"
    "jinja2.Environment.compile = counting\n"
    "from ci_runner.templating import environment\n"
    "environment().get_template('comment.md.j2')\n"
    "print(len(compiled))\n"
)


def test_the_environment_has_a_file_system_bytecode_cache() -> None:
    assert isinstance(environment().bytecode_cache, jinja2.FileSystemBytecodeCache)


def test_compiled_templates_are_cached_between_processes(tmp_path: Path) -> None:
    # Jinja2's default cache directory is in the temp directory: a private one starts cold.
    env = {**os.environ, "TMPDIR": str(tmp_path)}

    def compilations() -> int:
        run = subprocess.run(
            [sys.executable, "-c", RENDER], cwd=REPO_ROOT, env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        return int(run.stdout)

    assert compilations() == 1  # cold: compiled, then stored
    (cache_dir,) = tmp_path.iterdir()
    stored = sorted(name for name in os.listdir(cache_dir) if name.startswith("__jinja2_"))
    assert len(stored) == 1
    assert compilations() == 0  # warm: loaded from the cache
    assert sorted(os.listdir(cache_dir)) == stored
