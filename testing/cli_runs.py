"""``ci-runner`` through ``cli.main`` in a test: its exit code and output, the environment of a
job and a small train.yaml."""

from __future__ import annotations

import io
import os
from pathlib import Path

from ci_runner import cli

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
    }
