"""How ``train`` and ``cancel`` end: the result reported (report.md, metrics.json, metrics.txt,
the MR comment) and the MLflow run ended with it; and how ``train`` ends when something is
raised before there is a result (its MLflow run ends FAILED).

Imported where it is used: ``validate`` and ``render`` stay light.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from ci_runner.clock import Clock
from ci_runner.commands.common import Runtime
from ci_runner.console import StatusOutput
from ci_runner.results.destination import GitLabDestination
from ci_runner.results.publish import RunRecord, finish
from ci_runner.results.report import ReportInput
from ci_runner.tracking.stage import TrackedRun, end_failed, finish_tracking


@contextmanager
def run_failed_on_error(
    tracked: TrackedRun | None, clock: Clock, console: StatusOutput
) -> Iterator[None]:
    """Whatever the block raises ends the MLflow run ``tracked`` FAILED first, then goes on."""
    try:
        yield
    except BaseException:
        if tracked is not None:
            end_failed(tracked, clock, console)
        raise


def report_result(
    runtime: Runtime,
    record: RunRecord,
    tracked: TrackedRun | None = None,
    gitlab: GitLabDestination | None = None,
) -> ReportInput:
    """Report the run ``record`` tells of and end the MLflow run ``tracked`` with it; the
    report."""
    if tracked is not None:
        record = replace(record, tracking_url=tracked.url)
    report = finish(runtime, record, gitlab)
    if tracked is not None:
        console, clock = runtime.console, runtime.clock
        finish_tracking(tracked, record.plan, record.result, report.artifacts, console, clock)
    return report
