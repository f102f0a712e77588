"""The layered virtualenv: its key, and that it really sees the base environment's packages."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ci_runner.backends.local import pyenv
from ci_runner.clock import ManualClock
from ci_runner.console import Console
from ci_runner.settings import ProcessEnvironment

BASE = pyenv.BaseEnvironment(
    python=Path("/env/bin/python"),
    interpreter=("3.11.7 (main)", "/env/bin/python", "/env", "linux-x86_64"),
    paths=("/env/lib/python3.11/site-packages",),
)


def test_the_key_changes_with_requirements_included_files_python_and_pip_settings(
    tmp_path: Path,
) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("-r base.txt\n")
    (tmp_path / "base.txt").write_text("scikit-learn\n")
    key = pyenv.layer_key(requirements, BASE, ProcessEnvironment({}))
    assert pyenv.layer_key(requirements, BASE, ProcessEnvironment({})) == key
    other_python = replace(BASE, interpreter=("3.12.1", "/other/bin/python", "/other", "linux"))
    keys = {
        key,
        pyenv.layer_key(requirements, other_python, ProcessEnvironment({})),
        pyenv.layer_key(
            requirements, replace(BASE, paths=(str(tmp_path),)), ProcessEnvironment({})
        ),
        pyenv.layer_key(
            requirements,
            BASE,
            ProcessEnvironment({"PIP_INDEX_URL": "https://pypi.example.com/simple"}),
        ),
    }
    # Only the file it includes changes: another layer (it once reused the stale one).
    (tmp_path / "base.txt").write_text("scikit-learn>=1.3\n")
    keys.add(pyenv.layer_key(requirements, BASE, ProcessEnvironment({})))
    assert len(keys) == 5
    assert {uncached for _, uncached in keys} == {None}


def test_the_current_environment_is_the_python_running_ci_runner() -> None:
    base = pyenv.current_environment()
    assert base.python == Path(sys.executable)
    assert base.interpreter[:3] == (sys.version, sys.executable, sys.prefix)
    assert base.paths == tuple(sys.path[1:])  # not ci-runner's own directory


def _ensure(requirements: Path, root: Path, err: io.StringIO) -> pyenv.Layer:
    return pyenv.ensure_layer(
        requirements,
        pyenv.current_environment(),
        root,
        environ=ProcessEnvironment(dict(os.environ)),
        run=pyenv.run_command,
        output=lambda text: None,
        console=Console(io.StringIO(), err),
        clock=ManualClock(),
    )


def test_a_layer_sees_the_base_environment_and_is_reused(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("PyYAML\n")  # already in the base: nothing to download
    err = io.StringIO()

    def ensure() -> pyenv.Layer:
        return _ensure(requirements, tmp_path / "venvs", err)

    layer = ensure()
    found = subprocess.run(
        [str(layer.bin_dir / "python"), "-c", "import sys, yaml; print(sys.prefix)"],
        capture_output=True,
        text=True,
        check=True,
    )
    again = ensure()

    assert found.stdout.strip() == str(layer.path)
    assert layer.created and not again.created
    assert again.path == layer.path
    assert err.getvalue().splitlines(keepends=True) == [
        f"[ci-runner] installing requirements.txt into a new virtualenv {layer.path} ...\n",
        "[ci-runner] requirements installed in 0s\n",
        f"[ci-runner] requirements already installed: reusing {layer.path}\n",
    ]


def test_a_half_made_layer_is_rebuilt(tmp_path: Path) -> None:
    base = pyenv.current_environment()
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("")
    key, _ = pyenv.layer_key(requirements, base, ProcessEnvironment(dict(os.environ)))
    half = tmp_path / "venvs" / f"venv-{key}"
    half.mkdir(parents=True)
    (half / "leftover").write_text("interrupted")

    layer = _ensure(requirements, tmp_path / "venvs", io.StringIO())

    assert layer.created and layer.path == half
    assert not (half / "leftover").exists()
    assert (half / pyenv.READY_MARKER).is_file()


def test_a_layer_whose_requirements_name_a_local_path_is_never_reused(tmp_path: Path) -> None:
    # As in the pods: ./libs/pkg may change with any commit.
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("-r base.txt\n")
    (tmp_path / "base.txt").write_text("-e ./libs/pkg  # ours\n")
    (tmp_path / "libs" / "pkg").mkdir(parents=True)
    err = io.StringIO()
    made: list[str] = []

    def pip(argv: Sequence[str], env: Mapping[str, str], output: Callable[[str], None]) -> int:
        if argv[1:3] == ["-m", "pip"]:
            made.append(str(Path(argv[0]).parent.parent))
            return 0
        return pyenv.run_command(argv, env, output)

    def ensure() -> pyenv.Layer:
        return pyenv.ensure_layer(
            requirements,
            pyenv.current_environment(),
            tmp_path / "venvs",
            environ=ProcessEnvironment(dict(os.environ)),
            run=pip,
            output=lambda text: None,
            console=Console(io.StringIO(), err),
            clock=ManualClock(),
        )

    first, second = ensure(), ensure()

    assert first.created and second.created and made == [str(first.path)] * 2
    assert not (second.path / pyenv.READY_MARKER).exists()
    why = "[ci-runner] the virtualenv is not reused: requirements.txt names -e ./libs/pkg  # ours"
    assert (
        err.getvalue().splitlines()
        == [
            why,
            f"[ci-runner] installing requirements.txt into a new virtualenv {first.path} ...",
            "[ci-runner] requirements installed in 0s",
        ]
        * 2
    )


def test_an_interrupted_command_is_killed_not_awaited(monkeypatch: pytest.MonkeyPatch) -> None:
    script = "import time; print('started', flush=True); time.sleep(600)"
    seen: list[str] = []
    started: list[subprocess.Popen[str]] = []
    popen = subprocess.Popen

    def recorded(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        started.append(popen(*args, **kwargs))
        return started[-1]

    def interrupt(text: str) -> None:
        seen.append(text)
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "Popen", recorded)
    with pytest.raises(KeyboardInterrupt):
        pyenv.run_command([sys.executable, "-c", script], dict(os.environ), interrupt)

    assert seen == ["started\n"]
    # Killed, not awaited for its 600 s (a command that ended by itself would have exited 0).
    assert [process.returncode for process in started] == [-signal.SIGKILL]
