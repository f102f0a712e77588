"""Where a run keeps its files: ``--output-dir``, the directory the CI job saves as artifacts."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Final

from ci_runner.backends.logsink import tail_lines
from ci_runner.commands.common import Runtime
from ci_runner.plan.run_plan import OutputPaths

DEFAULT_OUTPUT_DIR: Final = "ci-runner-out"


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        default=DEFAULT_OUTPUT_DIR,
        help="where the training log (train.log), report.md, metrics.json and metrics.txt go; "
        f"keep it as the CI job's artifacts (default: {DEFAULT_OUTPUT_DIR})",
    )


def output_settings(args: argparse.Namespace, runtime: Runtime) -> OutputPaths:
    """``--output-dir``, resolved against the working directory."""
    given = Path(args.output_dir)
    out_dir = given if given.is_absolute() else runtime.cwd / given
    return OutputPaths(out_dir=out_dir, artifacts_path=args.output_dir)


def saved_log_tail(paths: OutputPaths) -> tuple[str, ...]:
    """As much of the end of the log a previous ``ci-runner train`` saved there as the report
    shows (none: empty)."""
    from ci_runner.results.report_markdown import TAIL_LINES  # the report's modules load on use

    return tail_lines(paths.log_path, TAIL_LINES)
