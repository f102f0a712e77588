"""``distributed: torchrun`` on this machine: every rank started by torchrun (``python -m
torch.distributed.run``, PyTorch's elastic launcher) as one standalone node, with the Python of
the requirements' virtualenv. torch is all it needs: no Horovod, no MPI."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

from ci_runner.backends.local import pyenv
from ci_runner.errors import EnvironmentSetupError
from ci_runner.plan.run_plan import RunPlan
from ci_runner.torchrun_output import TEE_BOTH, TORCHRUN_PREFIX_TEMPLATE

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


def check_torch(python: Path, env: Mapping[str, str], run: pyenv.CommandRunner) -> None:
    """Fail with one line unless ``python`` (with the ranks' ``env``) imports torch's launcher."""
    output: list[str] = []
    if run([str(python), "-c", _FIND_TORCHRUN], env, output.append) != 0:
        raise EnvironmentSetupError(
            f"torch is not installed for {python}, and train.yaml's distributed: torchrun starts "
            f"the ranks with its launcher (python -m torch.distributed.run); fix: "
            f"{TORCH_INSTALL_HINT}"
        )


def local_torchrun_argv(plan: RunPlan, python: Path) -> list[str]:
    """torchrun for every rank on this machine (one standalone node: its own rendezvous on a
    free local port), each rank's stdout and stderr teed with its global rank, then the job's
    command run as it is (``--no-python``: ``python`` is the first one on the ranks' PATH)."""
    return [
        str(python),
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(plan.config.ranks),
        "--tee",
        TEE_BOTH,
        "--log-line-prefix-template",
        TORCHRUN_PREFIX_TEMPLATE,
        "--no-python",
        "--",
        *plan.config.command,
    ]
