"""timed_out: the one set of texts for a run stopped at its time limit."""

from __future__ import annotations

from ci_runner.backends.result import Failure, FailureKind
from ci_runner.backends.timed_out import (
    ci_job_timeout_failure,
    local_timeout_failure,
    mpijob_deadline_failure,
)
from ci_runner.plan.deadline import CIJobTime


def test_the_clusters_deadline() -> None:
    assert mpijob_deadline_failure(600) == Failure(
        FailureKind.DEADLINE,
        "the job ran past its time limit of 600s (activeDeadlineSeconds) and was stopped",
    )
    assert mpijob_deadline_failure(None).message == (
        "the job ran past its time limit (activeDeadlineSeconds) and was stopped"
    )


def test_the_local_timeout() -> None:
    assert local_timeout_failure(60) == Failure(
        FailureKind.DEADLINE, "training ran past its timeout of 60s"
    )


def test_the_ci_jobs_timeout_says_after_how_long_and_which_limit() -> None:
    job = CIJobTime(timeout_seconds=3300, spent_seconds=3302, source="RUNNER_SCRIPT_TIMEOUT")
    assert ci_job_timeout_failure(job) == Failure(
        FailureKind.DEADLINE, "the CI job timed out after 55m2s (RUNNER_SCRIPT_TIMEOUT 55m)"
    )
    assert ci_job_timeout_failure(CIJobTime(3600, 0)).message == (
        "the CI job timed out (CI_JOB_TIMEOUT 1h)"
    )
    assert ci_job_timeout_failure(None).message == "the CI job timed out"
