"""After a run, or before it: what ci-runner tells people.

Metrics (parsed as the log streamed in, or from the saved log), model links from storage, the
target branch's baseline, the report written to the output directory and kept up to date as one
comment per merge request. GitLab or S3 failing never changes the training result: each becomes
one warning line in the CI log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ci_runner.backends.result import Outcome, QueueWait, RunResult
from ci_runner.clock import Clock
from ci_runner.config.types import JOB_KINDS, TrainConfig
from ci_runner.console import StatusOutput
from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.gitlab.notes import note_body
from ci_runner.masking import SecretMasker
from ci_runner.plan.run_plan import RunPlan
from ci_runner.results.annotations import add_links
from ci_runner.results.annotations import output_links as annotation_links
from ci_runner.results.artifacts import DEFAULT_EXPIRY_SECONDS, output_links
from ci_runner.results.baseline import Baseline, target_baseline
from ci_runner.results.destination import GitLabDestination
from ci_runner.results.files import REPORT_NAME, write_outputs
from ci_runner.results.metrics import MetricsSummary, parse_log_file
from ci_runner.results.report import ReportInput
from ci_runner.results.report_markdown import (
    marker,
    render_comment,
    render_reply,
    render_report,
    reply_marker,
)
from ci_runner.settings import AwsSettings, Settings


def post(
    gitlab: GitLabDestination | None,
    report: ReportInput,
    masker: SecretMasker,
    console: StatusOutput,
    targets: Sequence[Any] | None = None,
) -> None:
    """Create or edit this config's comment on ``targets`` (default: every target of
    ``gitlab``), and for a run that ended, post the result as a new note once per CI job
    (:func:`ci_runner.gitlab.comments.reply_once`: GitLab notifies of new notes only); a
    failure is only a warning."""
    if gitlab is None or gitlab.out_of_time:
        return
    from ci_runner.gitlab.comments import Action, publish, reply_once

    def render(previous: str | None) -> str:
        return masker.mask(render_comment(report, previous))

    chosen = gitlab.targets if targets is None else targets
    try:
        posted = publish(gitlab.project, chosen, marker(report.config_name), render)
    except GitLabError as error:
        console.warning(f"the comment was not posted: {error}")
        return
    for comment in posted:
        if comment.action in (Action.CREATED, Action.UPDATED):
            console.status(f"comment {comment.action.value}: {comment.url}")
    tag = reply_marker(report.context.job_id)
    if not gitlab.notify or tag is None or report.outcome is Outcome.RUNNING:
        return
    for comment in posted:
        body = masker.mask(render_reply(report, tag, comment.url))
        try:
            replied = reply_once(gitlab.project, comment, tag, body)
        except GitLabError as error:
            console.warning(f"the result's note was not posted: {error}")
            return
        if replied is not None and replied.action is Action.CREATED:
            console.status(f"result posted: {replied.url}")


def announce(
    gitlab: GitLabDestination | None,
    plan: RunPlan,
    masker: SecretMasker,
    console: StatusOutput,
    tracking_url: str | None = None,
    queued: QueueWait | None = None,
) -> None:
    """Post "training started" with the job's name, to be edited with the result later;
    ``queued``: Kueue keeps it waiting in its queue."""
    config = plan.config
    report = ReportInput(
        outcome=Outcome.RUNNING,
        config_name=config.name,
        context=plan.context,
        mpijob_name=plan.mpijob_name,
        job_kind=JOB_KINDS[config.distributed],
        workers=config.workers,
        slots_per_worker=config.slots_per_worker,
        gpus_per_worker=config.resources.gpu,
        tracking_url=tracking_url,
        queued=queued,
    )
    post(gitlab, report, masker, console)


@dataclass(frozen=True)
class RunRecord:
    """A run that ended, as its report tells it: its plan and result, the metrics parsed while
    its log streamed in (``train``; None: parsed from the saved log, as ``cancel`` does, in
    another process), and its MLflow run's page."""

    plan: RunPlan
    result: RunResult
    metrics: MetricsSummary | None = None
    tracking_url: str | None = None


class ReportRuntime(Protocol):
    """What reporting needs of the outside world (``commands.common.Runtime`` is one): the
    settings (S3's credentials, for the links), where to print, and the clock."""

    @property
    def settings(self) -> Settings: ...

    @property
    def console(self) -> StatusOutput: ...

    @property
    def clock(self) -> Clock: ...


def finish(
    runtime: ReportRuntime,
    record: RunRecord,
    gitlab: GitLabDestination | None,
    *,
    link_expiry_seconds: int = DEFAULT_EXPIRY_SECONDS,
) -> ReportInput:
    """Metrics, links, baseline → report.md / metrics.json / metrics.txt (in the plan's output
    directory) and the MR comment, masked as the plan's log is (less what links carry: see
    :func:`masker_for_report`); links to the files under the plan's output URI."""
    plan, result, console = record.plan, record.result, runtime.console
    masker = masker_for_report(plan.masker, runtime.settings.aws)
    config, ctx, paths = plan.config, plan.context, plan.outputs
    if paths is None:
        raise ValueError("a run plan without output paths has nowhere to write the report")
    if gitlab is not None:
        gitlab.next_phase()
        gitlab = gitlab.found_again(ctx, console)
    summary = record.metrics
    if summary is None:
        summary = _metrics(config, result, console)
    artifacts = None
    if result.succeeded and plan.output_uri:
        artifacts = output_links(
            plan.output_uri,
            runtime.settings.aws,
            runtime.clock.now(),
            link_expiry_seconds,
            started=result.started_at,
        )
    by_branch = _targets_by_baseline(gitlab, ctx)
    baselines = _baselines(gitlab, ctx, by_branch, paths.artifacts_path, console)

    def report_for(branch: str | None) -> ReportInput:
        baseline = baselines.get(branch)
        return ReportInput.from_run(
            config,
            ctx,
            result,
            metrics=summary,
            baseline=baseline.values if baseline else None,
            baseline_ref=branch if gitlab is not None else None,
            baseline_pipeline=baseline.pipeline if baseline else None,
            artifacts=artifacts,
            tracking_url=record.tracking_url,
        )

    # report.md compares with the first target's branch (the MR's, in an MR pipeline).
    report = report_for(next(iter(by_branch)))
    report_md = note_body(masker.mask(render_report(report))) + "\n"
    write_outputs(paths.out_dir, report_md, summary)
    if links := annotation_links(artifacts):
        add_links(paths.out_dir, links)
    console.status(f"report: {paths.out_dir / REPORT_NAME}")
    for branch, targets in by_branch.items():
        if targets:
            post(gitlab, report_for(branch), masker, console, targets)
    return report


def _baselines(
    gitlab: GitLabDestination | None,
    ctx: CIContext,
    branches: Iterable[str | None],
    artifacts_path: str,
    console: StatusOutput,
) -> dict[str | None, Baseline | None]:
    """Each target branch's baseline, one download per branch; None for each when there is no
    GitLab to ask, or no time left."""
    baselines: dict[str | None, Baseline | None] = {}
    for branch in branches:
        baselines[branch] = None
        if gitlab is not None and not gitlab.out_of_time:
            baselines[branch] = target_baseline(
                gitlab.project, ctx, branch, artifacts_path, console
            )
    return baselines


def _targets_by_baseline(
    gitlab: GitLabDestination | None, ctx: CIContext
) -> dict[str | None, list[Any]]:
    """The targets grouped by the branch their baseline comes from, in target order; without
    targets, the pipeline's own branch and none."""
    from ci_runner.gitlab.comments import baseline_branch

    groups: dict[str | None, list[Any]] = {}
    for target in gitlab.targets if gitlab is not None else ():
        groups.setdefault(baseline_branch(target, ctx), []).append(target)
    return groups or {baseline_branch(None, ctx): []}


def _metrics(
    config: TrainConfig, result: RunResult, console: StatusOutput
) -> MetricsSummary | None:
    if not result.log_path.is_file():
        if result.outcome is not Outcome.CANCELLED:
            console.warning(f"no training log at {result.log_path}: the report has no metrics")
        return None
    return parse_log_file(result.log_path, config.metrics)


def masker_for_report(masker: SecretMasker, aws: AwsSettings) -> SecretMasker:
    """The log's masker, minus AWS_SESSION_TOKEN: presigned links carry it (useless without the
    secret key, which they never carry), and masking it would break every link."""
    token = aws.session_token
    if not token:
        return masker
    return SecretMasker(v for v in masker.values if v != token)
