"""The files a run leaves in its output directory (next to the training log), which the CI job
keeps as artifacts: ``report.md``, ``metrics.json`` (the next runs' baseline) and ``metrics.txt``
(GitLab's metrics report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from ci_runner.results.metrics import MetricsSummary
from ci_runner.results.metrics_file import summary_to_json, summary_to_openmetrics

REPORT_NAME: Final = "report.md"
METRICS_NAME: Final = "metrics.json"
OPENMETRICS_NAME: Final = "metrics.txt"


def write_outputs(out_dir: Path, report_md: str, summary: MetricsSummary | None) -> None:
    """``report.md``, ``metrics.json`` and ``metrics.txt`` (GitLab's metrics report)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / REPORT_NAME).write_text(report_md, encoding="utf-8")
    if summary is None:
        summary = MetricsSummary(metrics=(), lines=0)
    (out_dir / METRICS_NAME).write_text(
        json.dumps(summary_to_json(summary), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    (out_dir / OPENMETRICS_NAME).write_text(summary_to_openmetrics(summary), encoding="utf-8")
