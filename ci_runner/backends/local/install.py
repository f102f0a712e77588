"""What a local run needs before it starts: a Horovod built with PyTorch and Gloo, and the job's
requirements installed into a layered virtualenv (:mod:`ci_runner.backends.local.pyenv`)."""

from __future__ import annotations

import hashlib
from collections import deque
from pathlib import Path
from typing import Final

from ci_runner.backends.local import pyenv
from ci_runner.backends.logsink import LogSink
from ci_runner.clock import Clock
from ci_runner.console import StatusOutput, ToolOutput, status_line
from ci_runner.errors import EnvironmentSetupError
from ci_runner.settings import ProcessEnvironment

INSTALL_HINT: Final = "run `make demo`, or scripts/setup-horovod.sh <your virtualenv>"
PIP_TAIL_LINES: Final = 30


def check_horovod(
    horovodrun: Path | None,
    environ: ProcessEnvironment,
    run: pyenv.CommandRunner,
    cache_dir: Path,
    console: StatusOutput,
) -> None:
    """Fail with one line unless ``horovodrun`` exists and Horovod has PyTorch and Gloo.

    ``horovodrun --check-build`` takes seconds (a process per framework), so a passing answer is
    remembered for this exact ``horovodrun`` file; reinstalling Horovod rewrites it.
    """
    if horovodrun is None or not horovodrun.is_file():
        raise EnvironmentSetupError(
            f"horovodrun is not installed; fix: {INSTALL_HINT} (builds Horovod with PyTorch "
            "and Gloo)"
        )
    info = horovodrun.stat()
    key = f"{horovodrun.resolve()}\n{info.st_size}\n{info.st_mtime_ns}"
    passed = cache_dir / "checks" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if passed.is_file():
        return
    console.status("checking the Horovod build (horovodrun --check-build, once) ...")
    chunks: list[str] = []
    code = run([str(horovodrun), "--check-build"], environ, chunks.append)
    report = "".join(chunks)
    missing = [name for name in ("PyTorch", "Gloo") if f"[X] {name}" not in report]
    if code != 0 or missing:
        what = f"without {' and '.join(missing)} support" if missing else "broken"
        raise EnvironmentSetupError(
            f"Horovod at {horovodrun} is {what} (horovodrun --check-build); fix: {INSTALL_HINT}, "
            "which rebuilds it with HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1"
        )
    passed.parent.mkdir(parents=True, exist_ok=True)
    passed.write_text(report, encoding="utf-8")


def install_requirements(
    requirements: Path,
    base: pyenv.BaseEnvironment,
    venvs: Path,
    *,
    environ: ProcessEnvironment,
    run: pyenv.CommandRunner,
    sink: LogSink,
    console: ToolOutput,
    clock: Clock,
) -> Path:
    """The ``bin`` directory of the virtualenv layer holding ``requirements``.

    pip talks to the console; when it fails, its last words and the reason go into the training
    log (``sink``) before :class:`~ci_runner.backends.local.pyenv.RequirementsInstallError` is
    raised again.
    """
    pip_tail: deque[str] = deque(maxlen=PIP_TAIL_LINES)

    def pip_output(text: str) -> None:
        # pip expands ${VARIABLES} in requirements files and may quote a line back.
        masked = sink.mask(text)
        console.relay(masked)
        pip_tail.append(masked)

    try:
        layer = pyenv.ensure_layer(
            requirements,
            base,
            venvs,
            environ=environ,
            run=run,
            output=pip_output,
            console=console,
            clock=clock,
        )
    except pyenv.RequirementsInstallError as exc:
        sink.feed("".join(pip_tail))
        sink.feed(status_line(str(exc)))  # the log says why the training never started
        raise
    return layer.bin_dir
