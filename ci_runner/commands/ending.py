"""How ``train`` and ``cancel`` end: the result reported (report.md, metrics.json, metrics.txt,
the MR comment) and the MLflow run ended with it; and how ``train`` ends when something is
raised before there is a result (its MLflow run ends FAILED).

Imported where it is used: ``validate`` and ``render`` stay light.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ci_runner.backends.result import RunResult
from ci_runner.clock import Clock
from ci_runner.console import StatusOutput
from ci_runner.plan.run_plan import RunPlan
from ci_runner.results.destination import GitLabDestination
from ci_runner.results.metrics import MetricsSummary
from ci_runner.results.publish import finish, masker_for_report
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
    plan: RunPlan,
    result: RunResult,
    tracked: TrackedRun | None,
    *,
    env: Mapping[str, str],
    gitlab: GitLabDestination | None,
    console: StatusOutput,
    clock: Clock,
    metrics: MetricsSummary | None = None,
) -> ReportInput:
    """Report ``result`` (``metrics``: parsed as the log streamed in, else from the saved log)
    and end the MLflow run ``tracked`` with it; the report."""
    report = finish(
        plan,
        result,
        metrics=metrics,
        now=clock.now(),
        env=env,
        gitlab=gitlab,
        masker=masker_for_report(plan.masker, env),
        console=console,
        tracking_url=tracked.url if tracked else None,
    )
    if tracked is not None:
        finish_tracking(tracked, plan, result, report.artifacts, console, clock)
    return report
