"""A job's ``requirements`` in a virtualenv layered over ci-runner's own environment, reused.

The base environment (the one running ci-runner, with torch and Horovod) plays the part of the
image. A job's requirements go into a virtualenv that still sees every base package, so it only
installs what the base lacks. One layer exists per (requirements text, Python, base environment);
later runs with the same key reuse it without running pip at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import site
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ci_runner.clock import Clock
from ci_runner.console import StatusOutput
from ci_runner.errors import EnvironmentSetupError

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
    version: str  # e.g. "3.11.7"
    site_packages: tuple[str, ...]  # made visible inside every layer
    packages: tuple[str, ...]  # sorted "name==version" of what is installed there

    @property
    def identity(self) -> str:
        """Changes whenever the interpreter, its location or its installed packages change."""
        text = "\n".join((str(self.python), self.version, *self.site_packages, *self.packages))
        return hashlib.sha256(text.encode()).hexdigest()


# An installed distribution's metadata folder: "PyYAML-6.0.2.dist-info", "foo-1.0-py3.11.egg-info".
_METADATA_DIR: Final = re.compile(
    r"(?P<name>[^-]+)-(?P<version>[^-]+?)(?:-py[^-]*)?\.(?:dist|egg)-info"
)


def current_environment() -> BaseEnvironment:
    """The environment running ci-runner."""
    return BaseEnvironment(
        python=Path(sys.executable),
        version=".".join(str(part) for part in sys.version_info[:3]),
        site_packages=tuple(site.getsitepackages()),
        packages=installed_packages(sys.path),
    )


def installed_packages(paths: Sequence[str]) -> tuple[str, ...]:
    """Sorted "name==version" (lower case) of the distributions installed on ``paths``.

    Read from the names of their metadata folders, as ``importlib.metadata`` finds them:
    parsing every METADATA file instead took a quarter of a second per run.
    """
    found = set()
    for path in paths:
        try:
            names = os.listdir(path or ".")
        except OSError:
            continue  # a zip file or a folder that is gone
        for name in names:
            if match := _METADATA_DIR.fullmatch(name):
                found.add(f"{match['name']}=={match['version']}".lower())
    return tuple(sorted(found))


def layer_key(requirements_text: str, base: BaseEnvironment) -> str:
    """The name of the layer for these requirements over ``base``."""
    text = "\n".join((base.version, base.identity, requirements_text))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
    environ: Mapping[str, str],
    run: CommandRunner,
    output: Callable[[str], None],
    console: StatusOutput,
    clock: Clock,
) -> Layer:
    """The layer for ``requirements`` under ``root``, created (venv + pip install) if missing.

    pip's output goes to ``output``; progress lines to ``console``. A failed install raises
    :class:`RequirementsInstallError` and leaves no layer behind to be reused.
    """
    text = requirements.read_text(encoding="utf-8")
    path = root / f"venv-{layer_key(text, base)}"
    if (path / READY_MARKER).is_file():
        console.status(f"requirements already installed: reusing {path}")
        return Layer(path, created=False)
    if path.exists():  # an earlier attempt stopped half-way
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
    (path / READY_MARKER).write_text(text, encoding="utf-8")
    console.status(f"requirements installed in {clock.monotonic() - started:.0f}s")
    return Layer(path, created=True)


def _see_base_packages(layer: Path, base: BaseEnvironment) -> None:
    # `--system-site-packages` only reaches the interpreter's own installation: when the base is
    # itself a virtualenv (ci-runner's .venv), its packages need this .pth to be visible. Entries
    # are appended after the layer's own site-packages, so what the layer installs wins.
    for site_packages in layer.glob("lib/python*/site-packages"):
        (site_packages / BASE_PTH).write_text(
            "".join(f"{entry}\n" for entry in base.site_packages), encoding="utf-8"
        )
