"""The metrics the results tests parse: the seed log's train and test loss, and an accuracy
(higher is better)."""

from __future__ import annotations

import re

from ci_runner.config.types import MetricSpec

TRAIN = MetricSpec(
    "train_loss", re.compile(r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[^,]+)")
)
TEST = MetricSpec("test_loss", re.compile(r"Testing\. MSE loss: (?P<value>[^,]+)"))
ACC = MetricSpec("accuracy", re.compile(r"acc=(?P<value>\S+)"), goal="max")
