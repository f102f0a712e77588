"""ci_runner.results.files: report.md, metrics.json and metrics.txt in the output directory."""

from __future__ import annotations

import json
import re
from pathlib import Path

from ci_runner.config.types import MetricSpec
from ci_runner.results.files import write_outputs
from ci_runner.results.metrics import parse_log_file
from ci_runner.results.metrics_file import summary_to_json
from testing.paths import SEED_LOG

TRAIN = MetricSpec(
    "train_loss", re.compile(r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[^,]+)")
)
TEST = MetricSpec("test_loss", re.compile(r"Testing\. MSE loss: (?P<value>[^,]+)"))


def test_write_outputs(tmp_path: Path) -> None:
    summary = parse_log_file(SEED_LOG, [TRAIN, TEST])
    write_outputs(tmp_path / "out", "# report\n", summary)

    assert (tmp_path / "out" / "report.md").read_text() == "# report\n"
    assert (tmp_path / "out" / "metrics.txt").read_text().startswith("train_loss 443.12621")
    data = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert data == json.loads(json.dumps(summary_to_json(summary)))
