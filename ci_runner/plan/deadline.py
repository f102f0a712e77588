"""The MPIJob's deadline against the CI job's own: GitLab stops the job at ``CI_JOB_TIMEOUT``
(GitLab 15.7+) seconds after ``CI_JOB_STARTED_AT``, and a training still running then would go on
in the cluster with nobody to report it. GitLab Runner stops the script sooner when
``RUNNER_SCRIPT_TIMEOUT`` (a Go duration) is set, then runs ``after_script`` for at most
``RUNNER_AFTER_SCRIPT_TIMEOUT`` (``Build.executeUserScripts`` and ``getStageTimeoutContexts``,
common/build.go in gitlab-org/gitlab-runner). The variables are read through
:func:`ci_runner.context.job_time_variables`. Pure: the environment and the time are passed in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from ci_runner.clock import duration
from ci_runner.context import JOB_TIMEOUT_VARIABLE, SCRIPT_TIMEOUT_VARIABLE, JobTimeVariables

_GO_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s)")
_UNIT_SECONDS: Final = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

# Seconds kept after the training's deadline for ci-runner's report (baseline, comment) and the
# runner's artifact upload; a tenth of the job's timeout when that is shorter.
REPORT_MARGIN_SECONDS: Final = 300
MIN_DEADLINE_SECONDS: Final = 60  # a job started late still gets a deadline the cluster can keep


@dataclass(frozen=True)
class CIJobTime:
    """The CI job's script's time limit (and the variable that set it), and the seconds the job
    has already run."""

    timeout_seconds: int
    spent_seconds: int
    source: str = JOB_TIMEOUT_VARIABLE

    @property
    def margin_seconds(self) -> int:
        return min(REPORT_MARGIN_SECONDS, self.timeout_seconds // 10)

    @property
    def training_seconds(self) -> int:
        """What is left for the training: the timeout less the time spent and the margin."""
        left = self.timeout_seconds - self.spent_seconds - self.margin_seconds
        return max(MIN_DEADLINE_SECONDS, left)


def ci_job_time(variables: JobTimeVariables, now: datetime) -> CIJobTime | None:
    """The job's limit from ``CI_JOB_TIMEOUT``, or ``RUNNER_SCRIPT_TIMEOUT`` when that is
    shorter, and the time spent since ``CI_JOB_STARTED_AT`` (ISO 8601, UTC); None outside CI or
    on a GitLab that does not give the timeout. A start time missing or unreadable counts as
    now."""
    raw = variables.timeout
    if not raw.isdigit() or int(raw) <= 0:
        return None
    limit, source = int(raw), JOB_TIMEOUT_VARIABLE
    script = go_duration_seconds(variables.script_timeout)
    if script is not None and 0 < script < limit:  # the runner clamps a longer one to the job's
        limit, source = script, SCRIPT_TIMEOUT_VARIABLE
    spent = 0
    try:
        started = datetime.fromisoformat(variables.started_at)
    except ValueError:
        started = None
    if started is not None and started.tzinfo is not None:
        spent = max(0, int((now - started).total_seconds()))
    return CIJobTime(limit, spent, source)


def go_duration_seconds(text: str) -> int | None:
    """Whole seconds of a Go duration (``time.ParseDuration``: ``1h30m``, ``90s``), None when
    ``text`` is not one (the runner ignores a malformed value, with a warning)."""
    text = text.strip()
    if not text or _GO_DURATION.sub("", text):
        return None
    return int(sum(float(n) * _UNIT_SECONDS[u] for n, u in _GO_DURATION.findall(text)))


def mpijob_deadline(config_timeout: int | None, job: CIJobTime | None) -> int | None:
    """``activeDeadlineSeconds``: train.yaml's ``timeout`` when it has one, else what the CI
    job leaves for training, else none."""
    if config_timeout is not None:
        return config_timeout
    return job.training_seconds if job is not None else None


def longer_than_job(config_timeout: int | None, job: CIJobTime | None, source: str) -> str | None:
    """The one-line warning for a train.yaml ``timeout`` longer than the CI job's, or None."""
    if config_timeout is None or job is None or config_timeout <= job.timeout_seconds:
        return None
    return (
        f"{source}: timeout {duration(config_timeout)} is longer than this CI job's timeout "
        f"{duration(job.timeout_seconds)} ({job.source}): GitLab stops the job first and the "
        "training is cancelled with it; fix: lower timeout in train.yaml, or raise the job's "
        "timeout (the job's timeout: keyword, or the project's Settings > CI/CD > General "
        "pipelines > Timeout)"
    )
