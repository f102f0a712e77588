"""``ci-runner`` through ``cli.main`` in a test: its exit code and output, the environment of a
job and a small train.yaml."""

from __future__ import annotations

import io
import os
from pathlib import Path

from ci_runner import cli
from ci_runner.policy import SETUP_IMAGE_VARIABLE
from testing.plan_cases import SETUP_IMAGE

TRAIN_YAML = """\
name: toy
image: horovod/horovod:0.28.1
command: python train.py
workers: 2
requirements: requirements.txt
outputs: s3://models/{project}/{sha}/{job}/
metrics:
  loss: {pattern: 'loss (?P<value>[0-9.]+) step (?P<step>\\d+)', goal: min}
"""


def run_cli(args: list[str], repo: Path, env: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(args, env=env, cwd=repo, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def environ(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CI_RUNNER_CACHE": str(tmp_path / "c"),
        # train.yaml's outputs are on S3: a closed loopback port keeps the report's listing here.
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "test",
        # The project's setup image for the pods' git fetch, as a maintainer's variable sets it.
        SETUP_IMAGE_VARIABLE: SETUP_IMAGE,
    }
