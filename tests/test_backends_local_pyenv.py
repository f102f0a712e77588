"""The layered virtualenv: its key, and that it really sees the base environment's packages."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ci_runner.backends.local import pyenv
from ci_runner.clock import ManualClock
from ci_runner.console import Console

BASE = pyenv.BaseEnvironment(
    python=Path("/env/bin/python"),
    version="3.11.7",
    site_packages=("/env/lib/python3.11/site-packages",),
    packages=("pyyaml==6.0.4", "torch==2.13.0"),
)


def test_the_key_changes_with_requirements_python_and_base_packages() -> None:
    key = pyenv.layer_key("scikit-learn\n", BASE)
    assert pyenv.layer_key("scikit-learn\n", BASE) == key
    assert len({
        key,
        pyenv.layer_key("scikit-learn>=1.3\n", BASE),
        pyenv.layer_key("scikit-learn\n", replace(BASE, version="3.12.1")),
        pyenv.layer_key("scikit-learn\n", replace(BASE, packages=("torch==2.14.0",))),
        pyenv.layer_key("scikit-learn\n", replace(BASE, python=Path("/other/bin/python"))),
    }) == 5  # fmt: skip


def test_the_current_environment_lists_its_packages() -> None:
    base = pyenv.current_environment()
    assert any(p.startswith("pyyaml==") for p in base.packages)
    assert base.packages == tuple(sorted(base.packages))


def test_installed_packages_are_read_from_metadata_folder_names(tmp_path: Path) -> None:
    for name in [
        "PyYAML-6.0.2.dist-info",
        "scikit_learn-1.5.0.dist-info",
        "oldstyle-1.0-py3.11.egg-info",
        "torch-2.13.0+cpu.dist-info",
        "yaml",  # a package, not metadata
        "notes.txt",
    ]:
        (tmp_path / name).mkdir()
    assert pyenv.installed_packages([str(tmp_path), str(tmp_path / "gone")]) == (
        "oldstyle==1.0",
        "pyyaml==6.0.2",
        "scikit_learn==1.5.0",
        "torch==2.13.0+cpu",
    )


def test_a_layer_sees_the_base_environment_and_is_reused(tmp_path: Path) -> None:
    base = pyenv.current_environment()
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("PyYAML\n")  # already in the base: nothing to download
    err = io.StringIO()

    def ensure() -> pyenv.Layer:
        return pyenv.ensure_layer(
            requirements,
            base,
            tmp_path / "venvs",
            environ=dict(os.environ),
            run=pyenv.run_command,
            output=lambda text: None,
            console=Console(io.StringIO(), err),
            clock=ManualClock(),
        )

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
    half = tmp_path / "venvs" / f"venv-{pyenv.layer_key('', base)}"
    half.mkdir(parents=True)
    (half / "leftover").write_text("interrupted")

    layer = pyenv.ensure_layer(
        requirements,
        base,
        tmp_path / "venvs",
        environ=dict(os.environ),
        run=pyenv.run_command,
        output=lambda text: None,
        console=Console(io.StringIO(), io.StringIO()),
        clock=ManualClock(),
    )

    assert layer.created and layer.path == half
    assert not (half / "leftover").exists()
    assert (half / pyenv.READY_MARKER).is_file()


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
