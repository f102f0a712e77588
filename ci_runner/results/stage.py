"""After a run, or before it: what ci-runner tells people.

Metrics from the saved log, model links from storage, the target branch's baseline, the report
written to the output directory and kept up to date as one comment per merge request. GitLab or
S3 failing never changes the training result: each becomes one warning line in the CI log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ci_runner.backends.result import Outcome, RunResult
from ci_runner.clock import Clock, SystemClock
from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.gitlab.notes import note_body
from ci_runner.masking import SecretMasker
from ci_runner.results.artifacts import ArtifactListing, list_artifacts, make_s3_client
from ci_runner.results.metrics import (
    MetricsFileError,
    MetricsSummary,
    load_baseline,
    parse_log_file,
)
from ci_runner.results.report import (
    ReportInput,
    marker,
    render_comment,
    render_report,
    write_outputs,
)
from ci_runner.spec.types import TrainConfig

REPORT_NAME = "report.md"
METRICS_NAME = "metrics.json"


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
    warn: Callable[[str], None],
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
        warn(f"warning: not commenting on GitLab: {error}")
        return None
    return GitLabDestination(project, tuple(targets), session)


def post(
    gitlab: GitLabDestination | None,
    report: ReportInput,
    masker: SecretMasker,
    warn: Callable[[str], None],
    echo: Callable[[str], None],
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
        warn(f"warning: the comment was not posted: {error}")
        return
    for comment in posted:
        if comment.action in (Action.CREATED, Action.UPDATED):
            echo(f"comment {comment.action.value}: {comment.url}")


def announce(
    gitlab: GitLabDestination | None,
    config: TrainConfig,
    ctx: CIContext,
    job_name: str,
    masker: SecretMasker,
    warn: Callable[[str], None],
    echo: Callable[[str], None],
) -> None:
    """Post "training started" with the job's name, to be edited with the result later."""
    report = ReportInput(
        outcome=Outcome.RUNNING,
        config_name=config.name,
        context=ctx,
        job_name=job_name,
        workers=config.workers,
        slots_per_worker=config.slots_per_worker,
        gpus_per_worker=config.resources.gpu,
    )
    post(gitlab, report, masker, warn, echo)


@dataclass(frozen=True)
class ReportSettings:
    """The run's facts that the report needs beyond the result."""

    out_dir: Path  # where report.md, metrics.json and metrics.txt go
    artifacts_path: str  # out_dir as the CI job's artifacts name it (relative to the project)
    output_uri: str | None  # where the job wrote its model (expanded)
    now: datetime
    link_expiry_seconds: int = 7 * 24 * 3600


def finish(
    config: TrainConfig,
    ctx: CIContext,
    result: RunResult,
    settings: ReportSettings,
    *,
    env: Mapping[str, str],
    gitlab: GitLabDestination | None,
    masker: SecretMasker,
    warn: Callable[[str], None],
    echo: Callable[[str], None],
) -> ReportInput:
    """Metrics, links, baseline → report.md / metrics.json / metrics.txt and the MR comment."""
    if gitlab is not None:
        gitlab.next_phase()
    summary = _metrics(config, result, warn)
    artifacts = _artifacts(result, settings, env) if result.succeeded else None
    baseline_ref = ctx.mr_target_branch or ctx.default_branch
    baseline = _baseline(gitlab, ctx, baseline_ref, settings, warn)
    report = ReportInput.from_run(
        config,
        ctx,
        result,
        metrics=summary,
        baseline=baseline.values if baseline else None,
        baseline_ref=baseline_ref if gitlab is not None else None,
        baseline_pipeline=baseline.pipeline if baseline else None,
        artifacts=artifacts,
    )
    report_md = note_body(masker.mask(render_report(report))) + "\n"
    write_outputs(settings.out_dir, report_md, summary)
    echo(f"report: {settings.out_dir / REPORT_NAME}")
    post(gitlab, report, masker, warn, echo)
    return report


def _metrics(
    config: TrainConfig, result: RunResult, warn: Callable[[str], None]
) -> MetricsSummary | None:
    if not result.log_path.is_file():
        if result.outcome is not Outcome.CANCELLED:
            warn(f"warning: no training log at {result.log_path}: the report has no metrics")
        return None
    return parse_log_file(result.log_path, config.metrics)


def _artifacts(
    result: RunResult, settings: ReportSettings, env: Mapping[str, str]
) -> ArtifactListing | None:
    uri = settings.output_uri
    if not uri:
        return None
    client = make_s3_client(env) if uri.startswith("s3://") else None
    return list_artifacts(
        uri, s3_client=client, now=settings.now, expires_in=settings.link_expiry_seconds
    )


@dataclass(frozen=True)
class Baseline:
    """Final value by metric name, and the pipeline (``#id`` and URL) they came from."""

    values: dict[str, float]
    pipeline: tuple[int, str | None]


def _baseline(
    gitlab: GitLabDestination | None,
    ctx: CIContext,
    ref: str | None,
    settings: ReportSettings,
    warn: Callable[[str], None],
) -> Baseline | None:
    if gitlab is None or gitlab.out_of_time or not ref or not ctx.ci_job_name:
        return None
    path = f"{settings.artifacts_path.strip('/')}/{METRICS_NAME}"
    try:
        return load_target_baseline(gitlab.project, ref, ctx.ci_job_name, path)
    except (GitLabError, MetricsFileError) as error:
        warn(f"warning: no baseline from {ref}: {error}")
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
