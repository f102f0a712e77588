"""The example trained through ``ci-runner train --local`` with this environment's real
horovodrun, or torchrun for its DDP version: where its commands are, whether Horovod and torch are
there, the example's configs, data and the lines its ranks print."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from testing.paths import EXAMPLE

BIN = Path(sys.executable).parent
HOROVOD_MISSING = importlib.util.find_spec("horovod") is None or not (BIN / "horovodrun").exists()
TORCH_MISSING = importlib.util.find_spec("torch") is None
CONFIG = f"{EXAMPLE}/train.yaml"
DDP_CONFIG = f"{EXAMPLE}/train-ddp.yaml"
TRAIN_LINE = re.compile(
    r"\[(\d)\]<stdout>:Training\. Epoch (\d+), MSE loss: ([-+0-9.eE]+), Worker: (\d)$"
)
TEST_LINE = re.compile(r"\[(\d)\]<stdout>:Testing\. MSE loss: ([-+0-9.eE]+), Worker: (\d)$")
# torchrun tees both streams with the prefix template ci-runner gives it: [rank]<std>:
DDP_TRAIN_LINE = re.compile(TRAIN_LINE.pattern.replace("<stdout>", "<std>"))
DDP_TEST_LINE = re.compile(TEST_LINE.pattern.replace("<stdout>", "<std>"))


def base_env(cache: Path, **extra: str) -> dict[str, str]:
    """This process's environment without CI, GitLab and AWS variables, ``BIN`` first on PATH,
    ``cache`` as ci-runner's cache, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_", "GITLAB_", "AWS_"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", CI_RUNNER_CACHE=str(cache))
    env.update(extra)
    return env


def prepare_data(repo: Path, uri: str, env: dict[str, str]) -> None:
    """The example's data written to ``uri`` by its prepare_data.py, run in ``repo``."""
    subprocess.run(
        [sys.executable, f"{EXAMPLE}/prepare_data.py", uri],
        cwd=repo,
        env=env,
        check=True,
        capture_output=True,
    )
