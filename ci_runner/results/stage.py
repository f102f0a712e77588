"""After a run, or before it: what ci-runner tells people.

Metrics from the saved log, model links from storage, the target branch's baseline, the report
written to the output directory and kept up to date as one comment per merge request. GitLab or
S3 failing never changes the training result: each becomes one warning line in the CI log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ci_runner.backends.result import Outcome, RunResult
from ci_runner.clock import Clock, SystemClock
from ci_runner.console import StatusOutput
from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.gitlab.notes import note_body
from ci_runner.masking import SecretMasker
from ci_runner.plan.run_plan import RunPlan
from ci_runner.results.artifacts import ArtifactListing, list_artifacts, make_s3_client
from ci_runner.results.metrics import MetricsSummary, parse_log_file
from ci_runner.results.metrics_file import MetricsFileError, load_baseline
from ci_runner.results.report import (
    ReportInput,
    marker,
    render_comment,
    render_report,
    write_outputs,
)
from ci_runner.spec.types import TrainConfig

REPORT_NAME: Final = "report.md"
METRICS_NAME: Final = "metrics.json"
LINK_EXPIRY_SECONDS: Final = 7 * 24 * 3600  # how long the report's links to model files stay valid


@dataclass(frozen=True)
class GitLabDestination:
    """Where the comment goes: the project, and its MRs (or the commit); ``session`` carries the
    time budget of the current phase (:meth:`next_phase` starts the one after training)."""

    project: Any  # gitlab.v4.objects.Project
    targets: tuple[Any, ...]  # ci_runner.gitlab.comments.Target
    session: Any  # ci_runner.gitlab.transport.BoundedSession

    def next_phase(self) -> None:
        """A fresh budget of the same length for the GitLab work after training."""
        from ci_runner.gitlab.transport import Budget

        old = self.session.budget
        self.session.budget = Budget(old.clock, old.seconds)

    @property
    def out_of_time(self) -> bool:
        """The phase's budget ran out (and was warned about): GitLab is left alone."""
        return bool(self.session.budget.spent)


def open_gitlab(
    ctx: CIContext,
    env: Mapping[str, str],
    console: StatusOutput,
    clock: Clock | None = None,
) -> GitLabDestination | None:
    """The merge requests to comment on, or None (with one warning) when we cannot post.

    Outside GitLab CI nothing is posted and nothing is said. All of it takes at most
    ``CI_RUNNER_GITLAB_TIMEOUT`` seconds (default 20) on ``clock``.
    """
    if not ctx.in_ci or not ctx.server_url:
        return None
    from ci_runner.gitlab.client import connect, open_project, token_from_env
    from ci_runner.gitlab.comments import find_targets, report_project_id
    from ci_runner.gitlab.transport import BoundedSession, Budget, budget_seconds

    session = BoundedSession(Budget(clock or SystemClock(), budget_seconds(env)))
    try:
        gl = connect(ctx.server_url, token_from_env(env), session=session)
        project = open_project(gl, report_project_id(ctx))
        targets = find_targets(project, ctx)
    except GitLabError as error:
        console.warning(f"not commenting on GitLab: {error}")
        return None
    return GitLabDestination(project, tuple(targets), session)


def post(
    gitlab: GitLabDestination | None,
    report: ReportInput,
    masker: SecretMasker,
    console: StatusOutput,
) -> None:
    """Create or edit this config's comment on every target; a failure is only a warning."""
    if gitlab is None or gitlab.out_of_time:
        return
    from ci_runner.gitlab.comments import Action, publish

    def render(previous: str | None) -> str:
        return masker.mask(render_comment(report, previous))

    try:
        posted = publish(gitlab.project, gitlab.targets, marker(report.config_name), render)
    except GitLabError as error:
        console.warning(f"the comment was not posted: {error}")
        return
    for comment in posted:
        if comment.action in (Action.CREATED, Action.UPDATED):
            console.status(f"comment {comment.action.value}: {comment.url}")


def announce(
    gitlab: GitLabDestination | None,
    plan: RunPlan,
    masker: SecretMasker,
    console: StatusOutput,
    tracking_url: str | None = None,
) -> None:
    """Post "training started" with the job's name, to be edited with the result later."""
    config = plan.config
    report = ReportInput(
        outcome=Outcome.RUNNING,
        config_name=config.name,
        context=plan.context,
        job_name=plan.job_name,
        workers=config.workers,
        slots_per_worker=config.slots_per_worker,
        gpus_per_worker=config.resources.gpu,
        tracking_url=tracking_url,
    )
    post(gitlab, report, masker, console)


def finish(
    plan: RunPlan,
    result: RunResult,
    *,
    now: datetime,
    env: Mapping[str, str],
    gitlab: GitLabDestination | None,
    masker: SecretMasker,
    console: StatusOutput,
    link_expiry_seconds: int = LINK_EXPIRY_SECONDS,
    tracking_url: str | None = None,
) -> ReportInput:
    """Metrics, links, baseline → report.md / metrics.json / metrics.txt (in the plan's output
    directory) and the MR comment; links to the files under the plan's output URI."""
    config, ctx, paths = plan.config, plan.context, plan.outputs
    if paths is None:
        raise ValueError("a run plan without output paths has nowhere to write the report")
    if gitlab is not None:
        gitlab.next_phase()
    summary = _metrics(config, result, console)
    artifacts = None
    if result.succeeded and plan.output_uri:
        artifacts = _artifacts(plan.output_uri, env, now, link_expiry_seconds)
    baseline_ref = ctx.mr_target_branch or ctx.default_branch
    baseline = _baseline(gitlab, ctx, baseline_ref, paths.artifacts_path, console)
    report = ReportInput.from_run(
        config,
        ctx,
        result,
        metrics=summary,
        baseline=baseline.values if baseline else None,
        baseline_ref=baseline_ref if gitlab is not None else None,
        baseline_pipeline=baseline.pipeline if baseline else None,
        artifacts=artifacts,
        tracking_url=tracking_url,
    )
    report_md = note_body(masker.mask(render_report(report))) + "\n"
    write_outputs(paths.out_dir, report_md, summary)
    console.status(f"report: {paths.out_dir / REPORT_NAME}")
    post(gitlab, report, masker, console)
    return report


def _metrics(
    config: TrainConfig, result: RunResult, console: StatusOutput
) -> MetricsSummary | None:
    if not result.log_path.is_file():
        if result.outcome is not Outcome.CANCELLED:
            console.warning(f"no training log at {result.log_path}: the report has no metrics")
        return None
    return parse_log_file(result.log_path, config.metrics)


def _artifacts(
    uri: str, env: Mapping[str, str], now: datetime, expires_in: int
) -> ArtifactListing | None:
    client = make_s3_client(env) if uri.startswith("s3://") else None
    return list_artifacts(uri, s3_client=client, now=now, expires_in=expires_in)


@dataclass(frozen=True)
class Baseline:
    """Final value by metric name, and the pipeline (``#id`` and URL) they came from."""

    values: dict[str, float]
    pipeline: tuple[int, str | None]


def _baseline(
    gitlab: GitLabDestination | None,
    ctx: CIContext,
    ref: str | None,
    artifacts_path: str,
    console: StatusOutput,
) -> Baseline | None:
    if gitlab is None or gitlab.out_of_time or not ref or not ctx.ci_job_name:
        return None
    path = f"{artifacts_path.strip('/')}/{METRICS_NAME}"
    try:
        return load_target_baseline(gitlab.project, ref, ctx.ci_job_name, path)
    except (GitLabError, MetricsFileError) as error:
        console.warning(f"no baseline from {ref}: {error}")
        return None


def masker_for_report(masker: SecretMasker, env: Mapping[str, str]) -> SecretMasker:
    """The log's masker, minus AWS_SESSION_TOKEN: presigned links carry it (useless without the
    secret key, which they never carry), and masking it would break every link."""
    token = env.get("AWS_SESSION_TOKEN")
    if not token:
        return masker
    return SecretMasker(v for v in masker.values if v != token)


def load_target_baseline(
    project: Any, ref: str, job_name: str, path: str = METRICS_NAME
) -> Baseline | None:
    """Final value by metric name from the target branch's ``metrics.json`` of the newest
    successful pipeline that has one; None without one.

    Raises :class:`GitLabError` when GitLab fails and ``MetricsFileError`` when the file is not
    one ci-runner wrote.
    """
    from ci_runner.gitlab.baseline import fetch_baseline

    found = fetch_baseline(project, ref, job_name, path)
    if found is None:
        return None
    return Baseline(load_baseline(found.data), (found.pipeline_id, found.pipeline_url))
