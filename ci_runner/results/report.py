"""The report of one run, as data: what the MR comment (and ``report.md``) shows, and the
verdicts of earlier runs it keeps. :mod:`ci_runner.results.report_markdown` renders it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ci_runner.backends.result import Failure, Outcome, QueueWait, RunResult
from ci_runner.config.types import JOB_KINDS, TrainConfig
from ci_runner.context import CIContext
from ci_runner.results.artifacts import ArtifactListing
from ci_runner.results.markdown import MAX_TEXT_CHARS
from ci_runner.results.metrics import MetricsSummary


@dataclass(frozen=True)
class HistoryEntry:
    """One run's verdict, as kept in the comment's hidden history (newest first)."""

    job_id: str | None
    pipeline_id: str | None
    sha: str  # short SHA
    outcome: str  # an Outcome value
    duration_seconds: float | None = None
    metric: str | None = None  # the first metric's name and final value
    value: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job_id,
            "pipeline": self.pipeline_id,
            "sha": self.sha,
            "outcome": self.outcome,
            "duration": self.duration_seconds,
            "metric": self.metric,
            "value": self.value,
        }


@dataclass(frozen=True)
class ReportInput:
    """Everything one comment shows. Build it with :meth:`from_run` or directly."""

    outcome: Outcome
    config_name: str
    context: CIContext
    mpijob_name: str  # the job's (or local run's) name
    job_kind: str = JOB_KINDS["horovod"]  # what the job is on the cluster: MPIJob, Indexed Job
    workers: int = 1
    slots_per_worker: int = 1
    gpus_per_worker: int = 0
    duration_seconds: float | None = None
    metrics: MetricsSummary | None = None
    baseline: Mapping[str, float] | None = None  # final values from the target branch
    baseline_ref: str | None = None  # the branch the baseline came from
    baseline_pipeline: tuple[int, str | None] | None = None  # its pipeline: id and web URL
    artifacts: ArtifactListing | None = None
    failure: Failure | None = None
    log_tail: Sequence[str] = ()
    history: Sequence[HistoryEntry] = field(default_factory=tuple)  # previous runs, newest first
    tracking_url: str | None = None  # the MLflow run (ci_runner.tracking)
    queued: QueueWait | None = None  # a running job Kueue keeps waiting in its queue

    @classmethod
    def from_run(
        cls,
        config: TrainConfig,
        context: CIContext,
        result: RunResult,
        *,
        metrics: MetricsSummary | None = None,
        baseline: Mapping[str, float] | None = None,
        baseline_ref: str | None = None,
        baseline_pipeline: tuple[int, str | None] | None = None,
        artifacts: ArtifactListing | None = None,
        tracking_url: str | None = None,
    ) -> ReportInput:
        """The report of a finished (or, with ``Outcome.RUNNING``, just started) run."""
        return cls(
            outcome=result.outcome,
            config_name=config.name,
            context=context,
            mpijob_name=result.mpijob_name,
            job_kind=JOB_KINDS[config.distributed],
            workers=config.workers,
            slots_per_worker=config.slots_per_worker,
            gpus_per_worker=config.resources.gpu,
            duration_seconds=result.duration_seconds,
            metrics=metrics,
            baseline=baseline,
            baseline_ref=baseline_ref,
            baseline_pipeline=baseline_pipeline,
            artifacts=artifacts,
            failure=result.failure,
            log_tail=result.log_tail,
            tracking_url=tracking_url,
        )

    def history_entry(self) -> HistoryEntry:
        """This run's line in the history kept by later comments."""
        first = next((m for m in self.metrics.metrics if m.found), None) if self.metrics else None
        return HistoryEntry(
            job_id=self.context.job_id,
            pipeline_id=self.context.pipeline_id,
            sha=self.context.short_sha,
            outcome=self.outcome.value,
            duration_seconds=self.duration_seconds,
            metric=first.name[:MAX_TEXT_CHARS] if first else None,
            value=first.final if first else None,
        )


def history_from_json(data: object) -> list[HistoryEntry]:
    """The entries of a history read back from JSON (:meth:`HistoryEntry.to_json`), skipping
    every item that is not one."""
    if not isinstance(data, list):
        return []
    return [entry for item in data if (entry := _entry_from_json(item)) is not None]


def _entry_from_json(item: object) -> HistoryEntry | None:
    if not isinstance(item, dict):
        return None
    outcome = item.get("outcome")
    sha = item.get("sha")
    if outcome not in {o.value for o in Outcome} or not isinstance(sha, str):
        return None
    job, pipeline, metric = item.get("job"), item.get("pipeline"), item.get("metric")
    duration, value = item.get("duration"), item.get("value")
    if not all(isinstance(x, str | None) for x in (job, pipeline, metric)):
        return None
    if not all(x is None or _finite_number(x) for x in (duration, value)):
        return None
    return HistoryEntry(
        job_id=job,
        pipeline_id=pipeline,
        sha=sha[:12],
        outcome=str(outcome),
        duration_seconds=None if duration is None else float(duration),
        metric=None if metric is None else metric[:MAX_TEXT_CHARS],
        value=None if value is None else float(value),
    )


def _finite_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
