"""What a backend returns when a training job ends: the object reporting consumes.

Both backends (Kubernetes and local) return a :class:`RunResult`; metrics, artifacts and the
report need nothing else from them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path


class Outcome(enum.Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RUNNING = "running"  # only for the "training started" announcement


class FailureKind(enum.Enum):
    """Why a job failed, as precisely as the backend could tell."""

    EXIT_CODE = "exit-code"  # the launcher (horovodrun) exited non-zero
    OOM_KILLED = "oom-killed"  # a worker or the launcher was OOMKilled
    WORKER_FAILED = "worker-failed"  # a worker exited non-zero for another reason
    UNSCHEDULABLE = "unschedulable"  # pods stayed Pending past the allowed time
    VALIDATION = "validation"  # MPI Operator's ValidationError event
    REFUSED = "refused"  # the cluster refused the job's pods (quota, PodSecurity, a webhook)
    IMAGE_PULL = "image-pull"  # ErrImagePull / ImagePullBackOff
    DEADLINE = "deadline"  # activeDeadlineSeconds (train.yaml `timeout`) exceeded
    SETUP = "setup"  # fetching code or installing requirements failed
    PREEMPTED = "preempted"  # its queue suspended the started job (kubernetes.on_preemption: fail)
    QUEUED = "queued"  # Kueue cannot admit it, or it waited past kubernetes.queue_timeout
    CANCELLED = "cancelled"  # cancelled by the user / CI
    UNKNOWN = "unknown"  # the job failed; the cluster gave no more detail


@dataclass(frozen=True)
class QueueWait:
    """A job Kueue keeps waiting in its queue, and since when (what the MR comment says)."""

    local_queue: str
    cluster_queue: str | None
    since: datetime


@dataclass(frozen=True)
class Failure:
    """A one-line, human-readable reason, plus the facts behind it."""

    kind: FailureKind
    message: str  # e.g. "worker sw-abc-worker-1 was OOMKilled (memory limit 4Gi)"
    exit_code: int | None = None
    pod: str | None = None
    container: str | None = None  # the container that failed, when one did (init ones too)


@dataclass(frozen=True)
class RunResult:
    """The end of one training run."""

    outcome: Outcome
    mpijob_name: str
    log_path: Path  # the whole launcher log, secrets masked
    log_tail: tuple[str, ...] = ()  # the last lines of the log, secrets masked
    failure: Failure | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def succeeded(self) -> bool:
        return self.outcome is Outcome.SUCCEEDED

    @property
    def duration_seconds(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def exit_code(self) -> int:
        """The CI job's exit code: 0 only when training succeeded."""
        return 0 if self.succeeded else 1
