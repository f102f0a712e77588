"""The results stage's warnings: GitLab or the log failing never changes the training result."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.context import CIContext
from ci_runner.masking import SecretMasker
from ci_runner.results.stage import GitLabDestination, ReportSettings, finish, open_gitlab
from ci_runner.spec.types import TrainConfig
from tests.gitlab_server import FakeGitLab
from tests.gitlab_server import Project as FakeProject

TOKEN = "glpat-reporting-CANARY-1"
SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
CONFIG = TrainConfig(name="toy", image="img:1", command=("python", "train.py"))
NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)


@pytest.fixture
def project(gitlab_server: FakeGitLab) -> FakeProject:
    bot = gitlab_server.add_user("bot")
    gitlab_server.add_token(TOKEN, bot)
    project = gitlab_server.add_project("group/proj")
    gitlab_server.add_merge_request(project, 4, sha=SHA)
    return project


def ctx(gitlab_server: FakeGitLab) -> CIContext:
    return CIContext(
        sha=SHA,
        project_path="group/proj",
        server_url=gitlab_server.url,
        job_id="77",
        ci_job_name="train",
        mr_iid="4",
        mr_target_branch="main",
    )


def settings(tmp_path: Path) -> ReportSettings:
    return ReportSettings(tmp_path / "out", "ci-runner-out", None, NOW)


def result(log: Path, outcome: Outcome = Outcome.SUCCEEDED) -> RunResult:
    failure = Failure(FailureKind.EXIT_CODE, "boom") if outcome is Outcome.FAILED else None
    return RunResult(outcome=outcome, job_name="toy-3f786850-77", log_path=log, failure=failure)


def run_finish(
    gitlab_server: FakeGitLab, tmp_path: Path, run: RunResult, gitlab: GitLabDestination | None
) -> list[str]:
    warnings: list[str] = []
    finish(
        CONFIG,
        ctx(gitlab_server),
        run,
        settings(tmp_path),
        env={},
        gitlab=gitlab,
        masker=SecretMasker([TOKEN]),
        warn=warnings.append,
        echo=lambda _: None,
    )
    return warnings


def test_no_token_is_one_warning_and_nothing_is_posted(gitlab_server: FakeGitLab) -> None:
    warnings: list[str] = []
    assert open_gitlab(ctx(gitlab_server), {"CI_JOB_TOKEN": "job"}, warnings.append) is None
    assert warnings == [
        "warning: not commenting on GitLab: cannot post the report to GitLab: neither "
        "CI_RUNNER_GITLAB_TOKEN nor GITLAB_TOKEN is set (CI_JOB_TOKEN cannot post merge-request "
        "comments); fix: store a valid project or personal access token with the api scope in "
        "the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
    ]


def test_outside_ci_nothing_is_said(gitlab_server: FakeGitLab) -> None:
    warnings: list[str] = []
    local = CIContext(sha=SHA, project_path="group/proj")
    assert open_gitlab(local, {}, warnings.append) is None
    assert warnings == []


def test_a_garbled_baseline_is_a_warning(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    gitlab_server.set_artifact(project, "main", "train", "ci-runner-out/metrics.json", b"not json")
    gitlab = open_gitlab(ctx(gitlab_server), {"CI_RUNNER_GITLAB_TOKEN": TOKEN}, pytest.fail)
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    assert warnings == [
        "warning: no baseline from main: metrics.json is not valid JSON: "
        "'Expecting value: line 1 column 1 (char 0)'"
    ]
    assert (tmp_path / "out" / "report.md").is_file()


def test_a_garbled_baseline_is_quoted_short(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    garbled = b'{"version": 1, "metrics": {"' + b"x" * 5000 + b'": 3}}'
    gitlab_server.set_artifact(project, "main", "train", "ci-runner-out/metrics.json", garbled)
    gitlab = open_gitlab(ctx(gitlab_server), {"CI_RUNNER_GITLAB_TOKEN": TOKEN}, pytest.fail)
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    assert warnings == [
        "warning: no baseline from main: metrics.json: metric '" + "x" * 76 + "... is not an object"
    ]


def test_a_missing_log_is_a_warning_and_the_report_still_written(
    gitlab_server: FakeGitLab, tmp_path: Path
) -> None:
    log = tmp_path / "gone.log"

    warnings = run_finish(gitlab_server, tmp_path, result(log, Outcome.FAILED), None)

    assert warnings == [f"warning: no training log at {log}: the report has no metrics"]
    assert "boom" in (tmp_path / "out" / "report.md").read_text()


def test_a_refused_comment_is_a_warning_and_the_token_is_never_shown(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    gitlab = open_gitlab(ctx(gitlab_server), {"CI_RUNNER_GITLAB_TOKEN": TOKEN}, pytest.fail)
    gitlab_server.revoke_token(TOKEN)
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    fix = (
        "GitLab rejected the access token (401 Unauthorized); fix: store a valid project or "
        "personal access token with the api scope in the masked CI/CD variable "
        "CI_RUNNER_GITLAB_TOKEN"
    )
    assert warnings == [
        "warning: no baseline from main: cannot download the baseline "
        f"ci-runner-out/metrics.json of job train on main in group/proj: {fix}",
        "warning: the comment was not posted: cannot read the comments of merge request !4 of "
        f"group/proj: {fix}",
    ]
    assert project.merge_requests[4].notes == []
