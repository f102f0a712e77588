"""The MPIJob's deadline from the CI job's timeout, and the warning for a longer train.yaml one."""

from __future__ import annotations

from datetime import datetime, timezone

from ci_runner.context import job_time_variables
from ci_runner.plan.deadline import (
    CIJobTime,
    ci_job_time,
    go_duration_seconds,
    longer_than_job,
    mpijob_deadline,
)

NOW = datetime(2026, 12, 2, 5, 0, tzinfo=timezone.utc)


def test_the_job_timeout_less_the_time_spent_and_the_margin() -> None:
    env = {"CI_JOB_TIMEOUT": "3600", "CI_JOB_STARTED_AT": "2026-12-02T04:50:00Z"}
    job = ci_job_time(job_time_variables(env), NOW)
    assert job == CIJobTime(3600, 600)
    assert mpijob_deadline(None, job) == 3600 - 600 - 300


def test_a_short_job_keeps_a_tenth_for_the_report_and_a_late_one_a_minute() -> None:
    assert mpijob_deadline(None, CIJobTime(600, 0)) == 540
    assert mpijob_deadline(None, CIJobTime(600, 590)) == 60


def test_train_yaml_timeout_wins_and_without_either_there_is_none() -> None:
    assert mpijob_deadline(7200, CIJobTime(3600, 0)) == 7200
    assert mpijob_deadline(None, None) is None


def test_without_ci_job_timeout_or_with_an_unreadable_start() -> None:
    assert ci_job_time(job_time_variables({}), NOW) is None
    assert ci_job_time(job_time_variables({"CI_JOB_TIMEOUT": "1h"}), NOW) is None
    assert ci_job_time(
        job_time_variables({"CI_JOB_TIMEOUT": "900", "CI_JOB_STARTED_AT": "soon"}), NOW
    ) == CIJobTime(900, 0)


def test_a_timeout_longer_than_the_jobs_is_one_line_naming_both() -> None:
    assert longer_than_job(3600, CIJobTime(3600, 0), "train.yaml") is None
    assert longer_than_job(None, CIJobTime(3600, 0), "train.yaml") is None
    assert longer_than_job(5400, CIJobTime(3600, 0), "ml/train.yaml") == (
        "ml/train.yaml: timeout 1h30m is longer than this CI job's timeout 1h (CI_JOB_TIMEOUT): "
        "GitLab stops the job first and the training is cancelled with it; fix: lower timeout "
        "in train.yaml, or raise the job's timeout (the job's timeout: keyword, or the "
        "project's Settings > CI/CD > General pipelines > Timeout)"
    )


def test_a_shorter_runner_script_timeout_is_the_limit() -> None:
    env = {"CI_JOB_TIMEOUT": "3600", "RUNNER_SCRIPT_TIMEOUT": "55m"}
    job = ci_job_time(job_time_variables(env), NOW)
    assert job == CIJobTime(3300, 0, "RUNNER_SCRIPT_TIMEOUT")
    assert mpijob_deadline(None, job) == 3000
    assert longer_than_job(3600, job, "train.yaml") == (
        "train.yaml: timeout 1h is longer than this CI job's timeout 55m (RUNNER_SCRIPT_TIMEOUT): "
        "GitLab stops the job first and the training is cancelled with it; fix: lower timeout "
        "in train.yaml, or raise the job's timeout (the job's timeout: keyword, or the "
        "project's Settings > CI/CD > General pipelines > Timeout)"
    )
    # longer than the job's, or malformed: the runner ignores it (common/build.go)
    for ignored in ("2h", "soon", ""):
        limit = ci_job_time(job_time_variables({**env, "RUNNER_SCRIPT_TIMEOUT": ignored}), NOW)
        assert limit == CIJobTime(3600, 0)


def test_go_durations() -> None:
    assert [go_duration_seconds(t) for t in ("1h30m", "90s", "1.5h", "500ms", "5", "m")] == [
        5400,
        90,
        5400,
        0,
        None,
        None,
    ]
