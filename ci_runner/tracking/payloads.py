"""The run's data as MLflow REST requests: pure, no I/O.

Everything stays within what both servers accept, so one request serves GitLab and MLflow:

- keys at most 250 characters, of letters, digits and ``_ - . / : space`` (MLflow's
  mlflow/utils/validation.py ``validate_param_and_metric_name``, ``MAX_ENTITY_KEY_LENGTH``;
  GitLab's ml_candidate_params/metrics/metadata ``name`` limit 250);
- param values at most 250 characters (GitLab's ``ml_candidate_params.value`` limit; MLflow's
  is 6000), tag values at most 5000 (GitLab's ``ml_candidate_metadata.value``; MLflow's 8000);
  never empty (GitLab validates presence);
- ``log-batch`` with at most 1000 metrics, 100 params, 100 tags, 1000 in all and under 1 MB
  (MLflow's ``MAX_METRICS_PER_BATCH``, ``MAX_PARAMS_TAGS_PER_BATCH``,
  ``MAX_ENTITIES_PER_BATCH``, ``MAX_BATCH_LOG_REQUEST_SIZE``).
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ci_runner.backends.result import Outcome
from ci_runner.plan.run_plan import RunPlan
from ci_runner.results.artifacts import ArtifactListing

MAX_KEY_CHARS: Final = 250
MAX_PARAM_CHARS: Final = 250
MAX_TAG_CHARS: Final = 5000
MAX_BATCH_METRICS: Final = 1000
MAX_BATCH_PARAMS_TAGS: Final = 100
MAX_BATCH_ENTITIES: Final = 1000
MAX_BATCH_BYTES: Final = 900_000  # MLflow refuses 1,000,000; room for the envelope
MAX_POINTS: Final = 1_000_000  # points kept in memory for one run (mean and per-rank series)
STATUS: Final = {
    Outcome.SUCCEEDED: "FINISHED",
    Outcome.FAILED: "FAILED",
    Outcome.CANCELLED: "KILLED",
    Outcome.RUNNING: "RUNNING",
}
_BAD_KEY_CHARS: Final = re.compile(r"[^\w./\- :]")
# ci-runner's params are under this prefix: a param's value cannot change once logged
# (mlflow/store/tracking/sqlalchemy_store.py, "Changing param values is not allowed"), so a
# name of ours must never be one the training code logs itself in the run it joins.
PARAM_PREFIX: Final = "ci_runner."
JSONObject = dict[str, Any]


def key(name: str) -> str:
    """``name`` as a key both servers take (bad characters become ``_``, at most 250)."""
    text = _BAD_KEY_CHARS.sub("_", name)[:MAX_KEY_CHARS]
    normal = posixpath.normpath(text) if text else text
    if not text or normal != text or text.startswith(("/", ".")):
        text = text.replace("/", "_").lstrip(".") or "_"
    return text


def bounded(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters, ending with "…" when cut."""
    return value if len(value) <= limit else value[: limit - 1] + "…"


def pairs(items: Iterable[tuple[str, str | None]], limit: int) -> list[tuple[str, str]]:
    """Key-value pairs with keys made valid, values bounded, empty values left out."""
    seen: dict[str, str] = {}
    for name, value in items:
        if value:
            seen.setdefault(key(name), bounded(value, limit))
    return list(seen.items())


def run_tags(plan: RunPlan, *, job_link: bool = False) -> list[tuple[str, str]]:
    """MLflow's system tags and the GitLab links of this run. With ``job_link`` (a server that
    is the GitLab instance the job runs on) also ``gitlab.CI_JOB_ID``, which links the run to
    its job in GitLab's UI: GitLab looks the id up among all its jobs and refuses the run when
    there is none (app/services/ml/experiment_tracking/
    handle_candidate_gitlab_metadata_service.rb), so another GitLab must never get it; a
    plain MLflow server has no use for it."""
    ctx = plan.context
    project = ctx.project_url.rstrip("/") if ctx.project_url else None
    mr = f"{project}/-/merge_requests/{ctx.mr_iid}" if project and ctx.mr_iid else None
    pipeline = f"{project}/-/pipelines/{ctx.pipeline_id}" if project and ctx.pipeline_id else None
    branch = f"{project}/-/tree/{ctx.ref_name}" if project and ctx.ref_name else None
    tags: list[tuple[str, str | None]] = [
        ("mlflow.source.git.commit", ctx.sha),
        ("mlflow.source.name", ctx.repo_url or ctx.project_path),
        ("mlflow.source.type", "JOB" if ctx.in_ci else "LOCAL"),
        ("mlflow.source.git.branch", ctx.ref_name),
        ("mlflow.source.git.repoURL", ctx.repo_url),
        ("gitlab.CI_JOB_ID", ctx.job_id if job_link else None),
        ("ci_runner.job_url", ctx.job_url),
        ("ci_runner.pipeline_url", pipeline),
        ("ci_runner.merge_request_url", mr),
        ("ci_runner.branch_url", branch),
        ("ci_runner.config", plan.config.source_file),
        ("ci_runner.mpijob", plan.mpijob_name),
    ]
    return pairs(tags, MAX_TAG_CHARS)


def run_params(plan: RunPlan, requirements_hash: str | None) -> list[tuple[str, str]]:
    """What train.yaml decided, as params under :data:`PARAM_PREFIX` (masked by the caller)."""
    config = plan.config
    params: list[tuple[str, str | None]] = [
        ("workers", str(config.workers)),
        ("slots_per_worker", str(config.slots_per_worker)),
        ("ranks", str(config.ranks)),
        ("gpus_per_worker", str(config.resources.gpu)),
        ("cpu_per_worker", config.resources.cpu),
        ("memory_per_worker", config.resources.memory),
        ("image", config.image),
        ("command", shlex.join(config.command)),
        ("requirements", config.requirements),
        ("requirements_hash", requirements_hash),
        ("data", plan.data_uri),
        ("outputs", plan.output_uri),
        ("timeout_seconds", str(config.timeout) if config.timeout else None),
    ]
    if config.elastic:
        params += [
            ("elastic.min_workers", str(config.elastic.min_workers)),
            ("elastic.max_workers", str(config.elastic.max_workers)),
        ]
    params += [(f"env.{name}", value) for name, value in config.env]
    return pairs(((PARAM_PREFIX + name, value) for name, value in params), MAX_PARAM_CHARS)


def output_tags(listing: ArtifactListing | None) -> list[tuple[str, str]]:
    """Where the outputs are: the location and each listed object's URI (never a presigned
    link: those expire)."""
    if listing is None:
        return []
    base = listing.location if listing.location.endswith("/") else listing.location + "/"
    files = "\n".join(base + link.name for link in listing.links)
    return pairs(
        [("ci_runner.outputs", listing.location), ("ci_runner.output_files", files)], MAX_TAG_CHARS
    )


@dataclass
class MetricPoints:
    """Every point of the log, kept for the run: the mean over ranks per (metric, step) and,
    when asked, each rank's own series. Bounded by :data:`MAX_POINTS`."""

    per_rank: bool = False
    sums: dict[tuple[str, int], list[float]] = field(default_factory=dict)  # -> [sum, count]
    ranks: list[tuple[str, int, float]] = field(default_factory=list)  # (key, step, value)
    dropped: int = 0

    def add(self, metric: str, rank: int, step: int, value: float) -> None:
        """One parsed point (``ci_runner.results.metrics.OnPoint``)."""
        if len(self.sums) + len(self.ranks) >= MAX_POINTS:
            self.dropped += 1
            return
        total = self.sums.setdefault((metric, step), [0.0, 0.0])
        total[0] += value
        total[1] += 1
        if self.per_rank:
            self.ranks.append((f"{metric}/rank_{rank}", step, value))

    def metrics(self, timestamp_ms: int) -> list[JSONObject]:
        """MLflow metric objects: each metric's mean by step, then the per-rank series."""
        rows = [
            _metric(name, step, total / count, timestamp_ms)
            for (name, step), (total, count) in sorted(self.sums.items())
        ]
        rows += [_metric(name, step, value, timestamp_ms) for name, step, value in self.ranks]
        return rows

    @property
    def count(self) -> int:
        return len(self.sums) + len(self.ranks)


def _metric(name: str, step: int, value: float, timestamp_ms: int) -> JSONObject:
    shown = value if math.isfinite(value) else 0.0  # the parser only keeps finite values
    return {"key": key(name), "value": shown, "timestamp": timestamp_ms, "step": step}


def batches(
    run_id: str,
    *,
    metrics: Sequence[JSONObject] = (),
    params: Sequence[tuple[str, str]] = (),
    tags: Sequence[tuple[str, str]] = (),
) -> Iterator[JSONObject]:
    """``runs/log-batch`` bodies holding everything given, each within the servers' limits."""
    entities: list[tuple[str, JSONObject]] = [
        *(("params", {"key": k, "value": v}) for k, v in params),
        *(("tags", {"key": k, "value": v}) for k, v in tags),
        *(("metrics", m) for m in metrics),
    ]
    body: JSONObject = {"run_id": run_id}
    size = len(json.dumps(body))
    counts = {"metrics": 0, "params": 0, "tags": 0}
    for kind, entity in entities:
        cost = len(json.dumps(entity)) + 2
        limit = MAX_BATCH_METRICS if kind == "metrics" else MAX_BATCH_PARAMS_TAGS
        full = (
            counts[kind] >= limit
            or sum(counts.values()) >= MAX_BATCH_ENTITIES
            or size + cost > MAX_BATCH_BYTES
        )
        if full:
            yield body
            body, size = {"run_id": run_id}, len(json.dumps({"run_id": run_id}))
            counts = dict.fromkeys(counts, 0)
        body.setdefault(kind, []).append(entity)
        counts[kind] += 1
        size += cost + len(kind) + 4
    if len(body) > 1:
        yield body


def create_run(
    experiment_id: str, run_name: str, start_ms: int, tags: Sequence[tuple[str, str]]
) -> JSONObject:
    """``runs/create``'s body (``mlflow.runName`` too: GitLab names the run from it when
    ``run_name`` is absent, candidate_repository.rb ``candidate_name_from_tags``)."""
    return {
        "experiment_id": experiment_id,
        "run_name": run_name,
        "start_time": start_ms,
        "tags": [{"key": k, "value": v} for k, v in [("mlflow.runName", run_name), *tags]],
    }


def update_run(run_id: str, outcome: Outcome, end_ms: int) -> JSONObject:
    """``runs/update``'s body: the status the job ended with."""
    return {"run_id": run_id, "status": STATUS[outcome], "end_time": end_ms}


def run_url(kind: str, uri: str, project_url: str | None, experiment_id: str, run_id: str) -> str:
    """Where people see the run: MLflow's UI, or the GitLab experiment's page (its runs list,
    each linked to its CI job; GitLab's API never says a run's page number)."""
    if kind == "gitlab" and project_url:
        return f"{project_url.rstrip('/')}/-/ml/experiments/{experiment_id}"
    return f"{uri}/#/experiments/{experiment_id}/runs/{run_id}"
