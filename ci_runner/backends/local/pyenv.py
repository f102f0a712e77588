"""A job's ``requirements`` in a virtualenv layered over ci-runner's own environment, reused.

The base environment (the one running ci-runner, with torch and Horovod) plays the part of the
image. A job's requirements go into a virtualenv that still sees every base package, so it only
installs what the base lacks. One layer exists per key, the pods' (:mod:`ci_runner.venv_layer`:
the requirements files, the base Python and its distributions, the PIP_* settings); later runs
with the same key reuse it without running pip at all, unless the requirements name a local path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ci_runner import venv_layer
from ci_runner.clock import Clock
from ci_runner.console import StatusOutput
from ci_runner.errors import EnvironmentSetupError
from ci_runner.settings import ProcessEnvironment

READY_MARKER: Final = ".ci-runner-ready"
BASE_PTH: Final = "_ci_runner_base.pth"

# Runs argv with env, passing each chunk of its combined output on; returns the exit code.
CommandRunner = Callable[[Sequence[str], Mapping[str, str], Callable[[str], None]], int]


def run_command(argv: Sequence[str], env: Mapping[str, str], output: Callable[[str], None]) -> int:
    """The real :data:`CommandRunner`: a subprocess whose output is streamed line by line."""
    with subprocess.Popen(
        list(argv),
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None  # stdout=PIPE
        try:
            for line in proc.stdout:
                output(line)
        except BaseException:  # Ctrl-C / SIGTERM: stop it instead of waiting for it
            proc.kill()
            raise
        return proc.wait()


class RequirementsInstallError(EnvironmentSetupError):
    """pip could not install a job's requirements (the job's own set-up failed, not ci-runner)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.pip_exit_code = exit_code


@dataclass(frozen=True)
class BaseEnvironment:
    """The Python environment a layer is built over."""

    python: Path  # its interpreter
    interpreter: tuple[str, ...]  # its version, executable, prefix, platform (venv_layer's)
    paths: tuple[str, ...]  # its sys.path but ci-runner's own directory: what a layer sees


def current_environment() -> BaseEnvironment:
    """The environment running ci-runner."""
    return BaseEnvironment(
        python=Path(sys.executable),
        interpreter=tuple(venv_layer.interpreter()),
        paths=tuple(venv_layer.base_paths()),
    )


def layer_key(
    requirements: Path, base: BaseEnvironment, environ: ProcessEnvironment
) -> tuple[str, str | None]:
    """The name of the layer for ``requirements`` over ``base``, keyed as the pods key their
    cache (:mod:`ci_runner.venv_layer`: the files it includes too, the base's distributions, the
    PIP_* settings), and why the layer is never reused (the local path it names), if so."""
    read = venv_layer.read_requirements(requirements.name, str(requirements.parent))
    return venv_layer.venv_key(read.files, base.interpreter, base.paths, environ), read.uncached


@dataclass(frozen=True)
class Layer:
    """A ready virtualenv; ``created`` is False when an earlier run's layer was reused."""

    path: Path
    created: bool

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"


def ensure_layer(
    requirements: Path,
    base: BaseEnvironment,
    root: Path,
    *,
    environ: ProcessEnvironment,
    run: CommandRunner,
    output: Callable[[str], None],
    console: StatusOutput,
    clock: Clock,
) -> Layer:
    """The layer for ``requirements`` under ``root``, created (venv + pip install) if missing.

    pip's output goes to ``output``; progress lines to ``console``. A failed install raises
    :class:`RequirementsInstallError` and leaves no layer behind to be reused.
    """
    key, uncached = layer_key(requirements, base, environ)
    path = root / f"venv-{key}"
    if uncached:
        console.status(f"the virtualenv is not reused: {requirements.name} names {uncached}")
    elif (path / READY_MARKER).is_file():
        console.status(f"requirements already installed: reusing {path}")
        return Layer(path, created=False)
    if path.exists():  # not reused, or an earlier attempt stopped half-way
        shutil.rmtree(path)
    root.mkdir(parents=True, exist_ok=True)
    console.status(f"installing {requirements.name} into a new virtualenv {path} ...")
    started = clock.monotonic()
    # pip comes from the base environment (it is visible through the layer), so none is copied in.
    venv = [str(base.python), "-m", "venv", "--system-site-packages", "--without-pip", str(path)]
    code = run(venv, environ, output)
    if code != 0:
        raise RequirementsInstallError(
            f"could not create a virtualenv at {path} (python -m venv exited with code {code}); "
            f"fix: check that {root} is writable and has free space",
            code,
        )
    _see_base_packages(path, base)
    pip = [
        str(path / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "-r",
        str(requirements),
    ]
    code = run(pip, {**environ, "VIRTUAL_ENV": str(path)}, output)
    if code != 0:
        shutil.rmtree(path, ignore_errors=True)
        raise RequirementsInstallError(
            f"pip could not install {requirements.name} (exit code {code}); fix: correct the "
            "requirements (pip's message is in the log above) and commit again",
            code,
        )
    if not uncached:
        (path / READY_MARKER).touch()
    console.status(f"requirements installed in {clock.monotonic() - started:.0f}s")
    return Layer(path, created=True)


def _see_base_packages(layer: Path, base: BaseEnvironment) -> None:
    # `--system-site-packages` only reaches the interpreter's own installation: when the base is
    # itself a virtualenv (ci-runner's .venv), its packages need this .pth to be visible, as the
    # image's do in a pod. They come after the layer's own site-packages: what it installs wins.
    for site_packages in layer.glob("lib/python*/site-packages"):
        (site_packages / BASE_PTH).write_text(
            venv_layer.site_pth(base.paths, seen=()), encoding="utf-8"
        )
