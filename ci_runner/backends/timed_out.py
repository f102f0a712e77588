"""What a run stopped at its time limit is told: the one set of DEADLINE failure texts.

The cluster stops an MPIJob at its ``activeDeadlineSeconds``, ``--local`` stops horovodrun at
train.yaml's ``timeout``, and GitLab stops the CI job at its own timeout (``ci-runner cancel``
then reports it).
"""

from __future__ import annotations

from ci_runner.backends.result import Failure, FailureKind
from ci_runner.clock import duration
from ci_runner.plan.deadline import CIJobTime


def mpijob_deadline_failure(deadline: object) -> Failure:
    """The MPIJob ran past its ``activeDeadlineSeconds`` (``deadline``, when the spec has it)."""
    limit = f" of {deadline}s" if deadline else ""
    return Failure(
        FailureKind.DEADLINE,
        f"the job ran past its time limit{limit} (activeDeadlineSeconds) and was stopped",
    )


def local_timeout_failure(timeout: int | None) -> Failure:
    """horovodrun ran past train.yaml's ``timeout`` of ``timeout`` seconds and was stopped."""
    return Failure(FailureKind.DEADLINE, f"training ran past its timeout of {timeout}s")


def ci_job_timeout_failure(job: CIJobTime | None) -> Failure:
    """The CI job timed out, saying after how long and which limit when ``job`` knows them."""
    after = f" after {duration(job.spent_seconds)}" if job and job.spent_seconds else ""
    limit = f" ({job.source} {duration(job.timeout_seconds)})" if job else ""
    return Failure(FailureKind.DEADLINE, f"the CI job timed out{after}{limit}")
