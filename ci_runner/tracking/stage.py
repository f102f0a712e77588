"""Tracking a job's run, before and after training; the tracking server failing never changes
the job's result: each failure is one warning line naming MLflow, and costs at most
``CI_RUNNER_TRACKING_TIMEOUT`` seconds (default 30) before training and again after it.

Before: the experiment (found by name, else created), the run (the CI job's name, MLflow's system
tags, GitLab's links) and train.yaml's params; with train.yaml's ``tracking.ranks_log`` its id
and the ranks' own token go to every rank (:func:`ranks_join`), and ``annotations.json`` links
the job page to it. After: the status the job ended with, every step of every metric the log
has, the outputs, and on the default branch a model version when train.yaml asks for one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ci_runner.backends.result import Outcome, RunResult
from ci_runner.clock import Clock
from ci_runner.console import StatusOutput
from ci_runner.context import CIContext
from ci_runner.errors import GitError, TrackingError
from ci_runner.gitlab.transport import BoundedSession, Budget
from ci_runner.gitrepo import git
from ci_runner.plan.run_plan import RunPlan, with_tracking
from ci_runner.plan.tracking import RankTracking
from ci_runner.results.annotations import add_links
from ci_runner.results.artifacts import ArtifactListing
from ci_runner.results.metrics import parse_log_file
from ci_runner.settings import Settings
from ci_runner.tracking import payloads
from ci_runner.tracking.client import MlflowApi
from ci_runner.tracking.target import RankSignIn, Target, find_target, rank_sign_in

RUN_FILE_NAME: Final = "mlflow-run.json"  # the run's ids, for `ci-runner cancel`
NOT_FOUND: Final = "RESOURCE_DOES_NOT_EXIST"
EXISTS: Final = "RESOURCE_ALREADY_EXISTS"


@dataclass
class TrackedRun:
    """A run that was created: where, its ids and its page."""

    api: MlflowApi
    experiment_id: str
    run_id: str
    url: str
    budget_seconds: float
    ranks: RankSignIn | None = None  # how the ranks sign in; None: they do not join the run

    @property
    def target(self) -> Target:
        return self.api.target

    def for_ranks(self) -> RankTracking | None:
        """What every rank gets to join this run; None unless train.yaml's
        ``tracking.ranks_log`` asks for it."""
        if self.ranks is None:
            return None
        target = self.target
        return RankTracking(
            uri=target.uri,
            run_id=self.run_id,
            experiment_id=self.experiment_id,
            insecure_tls=target.insecure_tls,
            username=self.ranks.username,
            credentials=self.ranks.credentials,
        )


def ranks_join(plan: RunPlan, run: TrackedRun | None) -> RunPlan:
    """``plan`` whose ranks join ``run`` with their own sign-in (``tracking.ranks_log``); else
    ``plan`` as it is: no MLflow variable, no token in any rank or in the job's Secret."""
    ranks = run.for_ranks() if run is not None else None
    return plan if ranks is None else with_tracking(plan, ranks)


def start_tracking(
    plan: RunPlan,
    settings: Settings,
    console: StatusOutput,
    clock: Clock,
    repo: Path | None = None,
) -> TrackedRun | None:
    """Create the job's run, or None: nothing to track at, or (one warning) the server failed.
    Raises ConfigError when ``tracking.ranks_log`` has no token for the ranks."""
    target = find_target(plan.config, plan.context, settings)
    if target is None:
        return None
    ranks = rank_sign_in(plan.config, target, settings)  # ConfigError: before the run is created
    if target.kind == "gitlab" and not target.token:
        console.warning(
            f"not tracking this run in MLflow: tracking: gitlab needs a token; fix: store a "
            f"project access token with the api scope and the Developer role in the masked "
            f"CI/CD variable {target.token_variable}"
        )
        return None
    seconds = settings.tracking_budget
    api = MlflowApi(target, BoundedSession(Budget(clock, seconds)))
    mask = plan.masker.mask
    name = plan.config.tracking.experiment or plan.config.name
    run_name = plan.context.ci_job_name or plan.mpijob_name
    now = _ms(clock)
    try:
        experiment_id = _experiment(api, name)
        job_link = on_this_gitlab(target, plan.context)
        tags = [(k, mask(v)) for k, v in payloads.run_tags(plan, job_link=job_link)]
        body = payloads.create_run(experiment_id, run_name, now, tags)
        info = api.call("POST", "runs/create", "create the run", body)["run"]["info"]
        run_id = str(info["run_id"])
    except TrackingError as error:
        console.warning(f"not tracking this run in MLflow: {error}")
        return None
    except (KeyError, TypeError):
        console.warning(
            f"not tracking this run in MLflow: {target.label} answered without the ids MLflow's "
            "API returns; fix: set MLFLOW_TRACKING_URI to an MLflow tracking server"
        )
        return None
    url = payloads.run_url(target.kind, target.uri, plan.context.project_url, experiment_id, run_id)
    run = TrackedRun(api, experiment_id, run_id, url, seconds, ranks)
    console.status(f"MLflow run: {run.url}")
    if plan.outputs is not None:
        write_annotations(plan.outputs.out_dir, run.url)
        ids = {"run_id": run.run_id, "experiment_id": experiment_id, "url": run.url}
        (plan.outputs.out_dir / RUN_FILE_NAME).write_text(json.dumps(ids) + "\n", "utf-8")
    params = [(k, mask(v)) for k, v in payloads.run_params(plan, _requirements_hash(plan, repo))]
    try:
        for batch in payloads.batches(run.run_id, params=params):
            api.call("POST", "runs/log-batch", "log the params", batch)
    except TrackingError as error:
        console.warning(f"the MLflow run has no params: {error}")
    return run


def on_this_gitlab(target: Target, ctx: CIContext) -> bool:
    """Whether ``target`` is the MLflow API of the GitLab instance this CI job runs on:
    ``tracking: gitlab``, or ``MLFLOW_TRACKING_URI`` under this job's ``CI_API_V4_URL`` (as
    GitLab's docs set it)."""
    if target.kind == "gitlab":
        return True
    api = (ctx.api_url or "").strip().rstrip("/")
    return (
        bool(api)
        and target.uri.startswith(f"{api}/projects/")
        and target.uri.endswith("/ml/mlflow")
    )


def finish_tracking(
    run: TrackedRun,
    plan: RunPlan,
    result: RunResult,
    artifacts: ArtifactListing | None,
    console: StatusOutput,
    clock: Clock,
) -> None:
    """Status, metrics, outputs and the model version; a failure is one warning line."""
    api = run.api
    api.session.budget = Budget(clock, run.budget_seconds)
    end = _ms(clock)
    try:
        api.call(
            "POST",
            "runs/update",
            "record how the run ended",
            payloads.update_run(run.run_id, result.outcome, end),
        )
        points = payloads.MetricPoints(per_rank=plan.config.tracking.per_rank)
        if result.log_path.is_file():
            parse_log_file(result.log_path, plan.config.metrics, points.add)
        tags = payloads.output_tags(artifacts) if result.succeeded else []
        for batch in payloads.batches(run.run_id, metrics=points.metrics(end), tags=tags):
            api.call("POST", "runs/log-batch", "log the metrics", batch)
        if points.dropped:
            console.warning(
                f"MLflow run: {points.dropped} metric points past the first "
                f"{payloads.MAX_POINTS} were not logged"
            )
        _register_model(run, plan, result, console)
    except TrackingError as error:
        console.warning(f"the MLflow run is incomplete: {error}")
        return
    status = payloads.STATUS[result.outcome]
    noun = "metric point" if points.count == 1 else "metric points"
    console.status(f"MLflow run {status}, {points.count} {noun}: {run.url}")


def resume_tracking(plan: RunPlan, settings: Settings, clock: Clock) -> TrackedRun | None:
    """The run ``train`` created in this CI job (its ids in the output directory), for
    ``ci-runner cancel``; None when there is none or it cannot be read."""
    target = find_target(plan.config, plan.context, settings)
    if target is None or plan.outputs is None:
        return None
    try:
        ids = json.loads((plan.outputs.out_dir / RUN_FILE_NAME).read_text("utf-8"))
        run_id, experiment_id, url = (str(ids[k]) for k in ("run_id", "experiment_id", "url"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    seconds = settings.tracking_budget
    api = MlflowApi(target, BoundedSession(Budget(clock, seconds)))
    return TrackedRun(api, experiment_id, run_id, url, seconds)


def end_failed(run: TrackedRun, clock: Clock, console: StatusOutput) -> None:
    """The job stopped with an error before the training had a result: the run ends FAILED."""
    api = run.api
    api.session.budget = Budget(clock, run.budget_seconds)
    body = payloads.update_run(run.run_id, Outcome.FAILED, _ms(clock))
    try:
        api.call("POST", "runs/update", "record how the run ended", body)
    except TrackingError as error:
        console.warning(f"the MLflow run is incomplete: {error}")


def write_annotations(out_dir: Path, url: str) -> None:
    """``annotations.json``: GitLab shows the run's link on the job's page."""
    add_links(out_dir, [("MLflow run", url)])


def _experiment(api: MlflowApi, name: str) -> str:
    """The experiment's id by name, creating it when there is none (another job may create it
    at the same moment: then it is read again)."""
    try:
        found = api.call(
            "GET",
            "experiments/get-by-name",
            "find the experiment",
            params={"experiment_name": name},
        )
        return str(found["experiment"]["experiment_id"])
    except TrackingError as error:
        if error.error_code != NOT_FOUND:
            raise
    try:
        made = api.call("POST", "experiments/create", "create the experiment", {"name": name})
        return str(made["experiment_id"])
    except TrackingError as error:
        if error.error_code != EXISTS:
            raise
    found = api.call(
        "GET", "experiments/get-by-name", "find the experiment", params={"experiment_name": name}
    )
    return str(found["experiment"]["experiment_id"])


def _register_model(
    run: TrackedRun, plan: RunPlan, result: RunResult, console: StatusOutput
) -> None:
    """On the default branch, after a successful run with outputs: a new version of
    ``tracking.model`` whose description and ``ci_runner.outputs`` tag name them. MLflow keeps
    ``source`` and ``run_id`` too; GitLab ignores both (lib/api/ml/mlflow/model_versions.rb
    passes on only the name, description and tags), so there the version is not linked to the
    run, and it numbers the version itself (1.0.0, then the patch up:
    app/services/ml/increment_version_service.rb).
    Outputs on this machine's disk (``file://``) are no model for anyone else: none then."""
    name, ctx, outputs = plan.config.tracking.model, plan.context, plan.output_uri
    on_default = bool(ctx.ref_name) and ctx.ref_name == ctx.default_branch and not ctx.mr_iid
    if not (name and result.succeeded and outputs and on_default):
        return
    if not outputs.startswith("s3://"):
        return
    api = run.api
    try:
        api.call("GET", "registered-models/get", "find the model", params={"name": name})
    except TrackingError as error:
        if error.error_code != NOT_FOUND:
            raise
        try:
            api.call("POST", "registered-models/create", "create the model", {"name": name})
        except TrackingError as again:
            if again.error_code != EXISTS:
                raise
    body: dict[str, Any] = {
        "name": name,
        "source": outputs,
        "run_id": run.run_id,
        "description": f"Outputs of commit {ctx.sha} at {outputs} (MLflow run "
        f"{run.run_id}, ci-runner)",
        "tags": [{"key": "ci_runner.outputs", "value": outputs}],
    }
    made = api.call("POST", "model-versions/create", "register a model version", body)
    version = made.get("model_version", {})
    aliases = version.get("aliases") or []
    number = aliases[0] if aliases and isinstance(aliases[0], str) else version.get("version")
    console.status(f"model {name} version {number} registered")


def _requirements_hash(plan: RunPlan, repo: Path | None) -> str | None:
    """The requirements file's git blob id at the commit: its content's hash."""
    path = plan.config.requirements
    if not path or repo is None:
        return None
    try:
        return git(["rev-parse", f"{plan.context.sha}:{path}"], repo).strip() or None
    except GitError:
        return None


def _ms(clock: Clock) -> int:
    return int(clock.now().timestamp() * 1000)
