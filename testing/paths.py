"""Where the repository and the data the tests read are."""

from __future__ import annotations

import os
from pathlib import Path

from ci_runner import context

REPO_ROOT = Path(__file__).resolve().parent.parent
# Upstream and seed files the tests read, vendored with their source and licence (README.md).
TEST_DATA = REPO_ROOT / "tests" / "data"
GOLDEN_DIR = REPO_ROOT / "tests" / "golden"
SEED_LOG = TEST_DATA / "seed" / "horovod-on-kubernetes.log"
FAKE_HOROVODRUN = Path(__file__).resolve().with_name("fake_horovodrun.py")
EXAMPLE = "examples/simple_ml"


def example_configs() -> list[Path]:
    """Every example's train.yaml and its variants beside it (``train-ddp.yaml``: the same job
    with ``distributed: torchrun``)."""
    return sorted((REPO_ROOT / "examples").glob("*/train*.yaml"))


def cache_dir() -> Path:
    """ci-runner's cache (:func:`ci_runner.context.cache_dir` of this environment), where
    ``make`` leaves what tests read."""
    return context.cache_dir(os.environ)
