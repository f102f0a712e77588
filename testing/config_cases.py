"""train.yaml snippets and helpers the tests of ci_runner.config share."""

from __future__ import annotations

import pytest

from ci_runner.config.schema import load_config
from ci_runner.config.types import TrainConfig
from ci_runner.errors import ConfigError

BASE = "name: job\nimage: img\ncommand: python train.py\n"
BASE_WITHOUT_COMMAND = "name: job\nimage: img\n"
RESERVED = "DATA_URI, OUTPUT_URI, PIP_CACHE_DIR, GIT_USERNAME, GIT_PASSWORD and CI_RUNNER_*"


def problems(text: str | bytes, file: str = "train.yaml") -> list[str]:
    """The problem lines load_config reports for ``text`` (it must refuse it)."""
    with pytest.raises(ConfigError) as caught:
        load_config(text, file)
    return caught.value.lines()


def minimal(**changes: object) -> TrainConfig:
    """The TrainConfig of BASE, with ``changes``."""
    config = TrainConfig(name="job", image="img", command=("python", "train.py"))
    return TrainConfig(**{**config.__dict__, **changes})
