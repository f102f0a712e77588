"""Where a run keeps its files: the output directory the CI job saves as artifacts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from ci_runner.backends.logsink import tail_lines
from ci_runner.commands.common import Runtime

DEFAULT_OUTPUT_DIR = "ci-runner-out"
LOG_NAME = "train.log"


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        default=DEFAULT_OUTPUT_DIR,
        help="where the training log (train.log), report.md, metrics.json and metrics.txt go; "
        f"keep it as the CI job's artifacts (default: {DEFAULT_OUTPUT_DIR})",
    )


@dataclass(frozen=True)
class OutputSettings:
    out_dir: Path  # absolute
    artifacts_path: str  # as given: relative to the project directory in CI

    @property
    def log_path(self) -> Path:
        return self.out_dir / LOG_NAME

    def saved_log_tail(self) -> tuple[str, ...]:
        """As much of the end of the log a previous ``ci-runner train`` saved here as the report
        shows (none: empty)."""
        from ci_runner.results.report import TAIL_LINES  # the report's modules load on use

        return tail_lines(self.log_path, TAIL_LINES)


def output_settings(args: argparse.Namespace, runtime: Runtime) -> OutputSettings:
    """``--output-dir``, resolved against the working directory."""
    given = Path(args.output_dir)
    out_dir = given if given.is_absolute() else runtime.cwd / given
    return OutputSettings(out_dir=out_dir, artifacts_path=args.output_dir)
