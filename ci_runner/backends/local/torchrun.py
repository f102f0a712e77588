"""``distributed: torchrun`` on this machine: every rank started by torchrun (``python -m
torch.distributed.run``, PyTorch's elastic launcher) as one standalone node, with the Python of
the requirements' virtualenv. torch is all it needs: no Horovod, no MPI."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Final

from ci_runner.backends.local import pyenv
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind
from ci_runner.backends.torchrun_failure import LOG_READ_BYTES, failure_line
from ci_runner.errors import EnvironmentSetupError
from ci_runner.plan.run_plan import RunPlan
from ci_runner.torchrun_output import TORCHRUN_ENVIRONMENT

TORCH_INSTALL_HINT: Final = (
    "run `make torch`, or scripts/setup-torch.sh <your virtualenv>, or list torch in "
    "train.yaml's requirements"
)
# Whether torch, with its launcher, is importable, without importing it (seconds): exit 0 if so.
_FIND_TORCHRUN: Final = (
    "import importlib.util, os, sys\n"
    "spec = importlib.util.find_spec('torch')\n"
    "origin = spec.origin if spec is not None else None\n"
    "run = os.path.join(os.path.dirname(origin or ''), 'distributed', 'run.py')\n"
    "sys.exit(0 if origin and os.path.isfile(run) else 1)\n"
)


def torchrun_python(base: pyenv.BaseEnvironment, layer_bin: Path | None) -> Path:
    """The Python torchrun runs with: the requirements' virtualenv's, else the base's."""
    return layer_bin / "python" if layer_bin is not None else base.python


def local_torchrun_argv(plan: RunPlan, python: Path, log_dir: Path) -> list[str]:
    """torchrun for every rank on this machine (one standalone node: its own rendezvous on a
    free local port), each rank's stdout and stderr teed (and copied to files in ``log_dir``),
    then the job's command run as it is (``--no-python``: ``python`` is the first one on the
    ranks' PATH). The lines' rank prefix comes from torchrun's environment
    (:func:`torchrun_launch`)."""
    return plan.torchrun_argv(standalone=True, python=str(python), log_dir=str(log_dir))


@contextmanager
def torchrun_launch(
    plan: RunPlan, python: Path, env: Mapping[str, str], run: pyenv.CommandRunner, cache_dir: Path
) -> Iterator[tuple[list[str], dict[str, str]]]:
    """torchrun's argv and environment (the ranks' ``env`` and the prefix of every line it tees,
    ``[3]<std>:``, which torch 2.13 takes from no command-line option), once torch is found.

    torchrun copies every rank's output, unmasked, into a log directory it never removes (by
    default a new ``/tmp/torchelastic_*`` each run): here it is one of ``cache_dir``, removed
    when the block ends.
    """
    _check_torch(python, env, run)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="torchrun-logs-", dir=cache_dir) as logs:
        argv = local_torchrun_argv(plan, python, Path(logs))
        yield argv, {**env, **dict(TORCHRUN_ENVIRONMENT)}


def _check_torch(python: Path, env: Mapping[str, str], run: pyenv.CommandRunner) -> None:
    """Fail with one line unless ``python`` (with the ranks' ``env``) imports torch's launcher."""
    output: list[str] = []
    if run([str(python), "-c", _FIND_TORCHRUN], env, output.append) != 0:
        raise EnvironmentSetupError(
            f"torch is not installed for {python}, and train.yaml's distributed: torchrun starts "
            f"the ranks with its launcher (python -m torch.distributed.run); fix: "
            f"{TORCH_INSTALL_HINT}"
        )


def with_failing_rank(failure: Failure | None, sink: LogSink, code_dir: Path) -> Failure | None:
    """torchrun's exit code with its first failing rank, read back from the saved log's end
    (``code_dir``: the checkout the ranks ran in): ``torchrun exited with code 1: rank 1 raised
    ValueError: boom (train.py:10)``. Another failure (the timeout, a cancel), or a log that shows
    no failed rank, stays as it is."""
    if failure is None or failure.kind is not FailureKind.EXIT_CODE:
        return failure
    # The ranks' paths are as their working directory (the checkout, symlinks resolved) makes them.
    found = failure_line(sink.saved_lines(LOG_READ_BYTES), str(code_dir.resolve()))
    return failure if found is None else replace(failure, message=f"{failure.message}: {found}")
