"""The local backend's tests' shared parts (tests/test_backends_local*.py): the toy job's config,
options for a repository, the screen a run prints to (and one that watches the ranks' pids), a
command runner that remembers, a run with its plan, and the rank scripts they train."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ci_runner.backends.local import pyenv
from ci_runner.backends.local.backend import LocalBackend, LocalOptions, run_local
from ci_runner.backends.local.proctree import process_alive
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import RunResult
from ci_runner.clock import ManualClock
from ci_runner.config.types import TrainConfig
from ci_runner.console import Console
from ci_runner.context import CIContext
from ci_runner.masking import SecretMasker
from ci_runner.plan.run_plan import RunPlan, build_plan
from ci_runner.settings import ProcessEnvironment, read_settings

PROJECT = "group/toy"

GitRepo = Callable[..., tuple[Path, str]]


def config(**changes: object) -> TrainConfig:
    """The toy job (Horovod's, two ranks, ``python train.py``) with ``changes``."""
    values: dict[str, object] = {
        "name": "toy",
        "image": "horovod/horovod:0.28.1",
        "command": ("python", "train.py"),
        "workers": 2,
    }
    values.update(changes)
    return TrainConfig(**values)  # type: ignore[arg-type]


def options(
    repo: Path,
    tmp_path: Path,
    horovodrun: Path | None,
    base: pyenv.BaseEnvironment,
    record: Path | None = None,
    **changes: object,
) -> LocalOptions:
    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    if record is not None:
        environ["FAKE_HOROVODRUN_RECORD"] = str(record)
    opts = LocalOptions(
        repo=repo,
        cache_dir=tmp_path / "cache",
        environ=ProcessEnvironment(environ),
        horovodrun=horovodrun,
        base=base,
        cpu_count=8,
        stop_grace_seconds=5.0,
    )
    return replace(opts, **changes)  # type: ignore[arg-type]


class Screen:
    """What the backend printed: status lines and the training log, in order."""

    def __init__(self) -> None:
        self.text = ""

    def __call__(self, text: str) -> None:
        self.text += text

    def write(self, text: str) -> None:  # a Console's stdout and stderr both
        self(text)

    def flush(self) -> None:
        pass

    @property
    def status(self) -> list[str]:
        return [line for line in self.text.splitlines() if line.startswith("[ci-runner]")]


class RankWatch(Screen):
    """The screen of a run of :data:`SLEEPER`: each rank's pid as it prints it, and ``then()``
    called on every text once ``ranks`` ranks run (the clock moved past the timeout, a cancel)."""

    def __init__(self, ranks: int = 2, then: Callable[[], object] = lambda: None) -> None:
        super().__init__()
        self.pids: list[int] = []
        self.ranks = ranks
        self.then = then

    def __call__(self, text: str) -> None:
        super().__call__(text)
        self.pids.extend(int(p) for p in re.findall(r"pid (\d+)", text))
        if len(self.pids) == self.ranks:
            self.then()

    def alive(self) -> list[int]:
        """The pids of the ranks still running."""
        return [pid for pid in self.pids if process_alive(pid)]


class RecordingRunner:
    """The real command runner, remembering every command it ran."""

    def __init__(self, fail: Callable[[Sequence[str]], int | None] = lambda argv: None) -> None:
        self.calls: list[list[str]] = []
        self._fail = fail

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], output: Callable[[str], None]
    ) -> int:
        self.calls.append(list(argv))
        code = self._fail(argv)
        if code is not None:
            output("ERROR: no matching distribution\n")
            return code
        return pyenv.run_command(argv, env, output)

    def installs(self) -> list[list[str]]:
        return [c for c in self.calls if "venv" in c or "pip" in c]


def plan_for(cfg: TrainConfig, sha: str, opts: LocalOptions, **overrides: Any) -> RunPlan:
    """The plan ``ci-runner train --local`` builds, from the same environment the ranks get."""
    context = CIContext(sha=sha, project_path=PROJECT)
    return build_plan(cfg, context, read_settings(opts.environ), read_secrets=True, **overrides)


def make_backend(
    cfg: TrainConfig,
    sha: str,
    opts: LocalOptions,
    sink: LogSink,
    screen: Screen,
    clock: ManualClock | None = None,
) -> LocalBackend:
    """The backend ``train --local`` runs the plan with, printing to ``screen``."""
    console = Console(screen, screen)
    return LocalBackend(plan_for(cfg, sha, opts), opts, sink, console, clock or ManualClock())


def run(
    cfg: TrainConfig,
    sha: str,
    opts: LocalOptions,
    tmp_path: Path,
    runner: pyenv.CommandRunner = pyenv.run_command,
    clock: ManualClock | None = None,
    masker: SecretMasker | None = None,
    **overrides: str,
) -> tuple[RunResult, Screen]:
    screen = Screen()
    console = Console(screen, screen)
    plan = plan_for(cfg, sha, opts, **overrides)
    with LogSink(tmp_path / "logs" / "train.log", console.echo, masker) as sink:
        result = run_local(
            plan, opts, sink=sink, console=console, run=runner, clock=clock or ManualClock()
        )
    return result, screen


FAILING = """\
import sys
print("step 1", flush=True)
print("step 2", flush=True)
print("boom: loss is nan", file=sys.stderr, flush=True)
sys.exit(3)
"""


PRINT_PREFIX = "import sys\nprint(sys.prefix, flush=True)\n"


SLEEPER = """\
import os, time
print(f"pid {os.getpid()}", flush=True)
time.sleep(600)
"""
