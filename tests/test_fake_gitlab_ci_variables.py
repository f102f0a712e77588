"""The fake GitLab's CI variables per pipeline kind, and ci-runner reading them."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from ci_runner.context import from_environment
from ci_runner.gitlab.comments import MergeRequestTarget
from ci_runner.results.destination import open_gitlab
from ci_runner.settings import read_settings
from testing.fake_gitlab.accounts import GITLAB_TOKEN
from testing.fake_gitlab.ci_variables import job_variables
from testing.fake_gitlab.model import User
from testing.fake_gitlab.server import FakeGitLab

SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
STARTED = datetime(2026, 12, 2, 5, 0, tzinfo=timezone.utc)


class Quiet:
    def status(self, message: str) -> None:
        raise AssertionError(message)

    def warning(self, message: str) -> None:
        raise AssertionError(message)


def test_branch_and_merge_request_pipelines_get_what_gitlab_gives(
    gitlab_server: FakeGitLab,
) -> None:
    project = gitlab_server.add_project("group/proj")
    for iid in range(1, 7):  # six open MRs from the branch: GitLab names the newest four
        gitlab_server.add_merge_request(project, iid, sha=SHA, source_branch="feature")
    gitlab_server.add_merge_request(project, 9, sha=SHA, source_branch="feature", state="closed")
    mr = project.merge_requests[6]
    base = "https://gitlab.example.com"

    push = job_variables(
        base,
        project,
        source="push",
        sha=SHA,
        branch="feature",
        job_id=5,
        pipeline_id=2,
        started_at=STARTED,
    )
    merge = job_variables(
        base,
        project,
        source="merge_request_event",
        sha=SHA,
        mr=mr,
        job_id=6,
        pipeline_id=3,
        started_at=STARTED,
    )

    assert push["CI_COMMIT_BRANCH"] == "feature"
    assert push["CI_OPEN_MERGE_REQUESTS"] == "group/proj!6,group/proj!5,group/proj!4,group/proj!3"
    assert not [name for name in push if name.startswith("CI_MERGE_REQUEST_")]
    assert (push["CI_JOB_TIMEOUT"], push["CI_JOB_STARTED_AT"]) == ("3600", "2026-12-02T05:00:00Z")
    assert "CI_COMMIT_BRANCH" not in merge
    assert merge["CI_COMMIT_REF_NAME"] == "feature"
    assert (merge["CI_MERGE_REQUEST_IID"], merge["CI_MERGE_REQUEST_TARGET_BRANCH_NAME"]) == (
        "6",
        "main",
    )
    no_mr = job_variables(
        base,
        project,
        source="web",
        sha=SHA,
        branch="main",
        job_id=7,
        pipeline_id=4,
        started_at=STARTED,
    )
    assert "CI_OPEN_MERGE_REQUESTS" not in no_mr


def test_ci_runner_finds_a_branch_pipelines_mrs_from_those_variables(
    gitlab_server: FakeGitLab, gitlab_bot: User, tmp_path: Path
) -> None:
    project = gitlab_server.add_project("group/proj")
    # the MR's commit list does not hold SHA yet (GitLab refreshes it after the push)
    gitlab_server.add_merge_request(
        project, 4, sha="a" * 40, source_branch="feature", target_branch="develop"
    )
    gitlab_server.add_commit(project, SHA)
    env = job_variables(
        gitlab_server.url,
        project,
        source="push",
        sha=SHA,
        branch="feature",
        job_id=5,
        pipeline_id=2,
    )
    ctx = from_environment(env, tmp_path)

    gitlab = open_gitlab(
        ctx, read_settings({**env, "CI_RUNNER_GITLAB_TOKEN": GITLAB_TOKEN}), Quiet()
    )

    assert gitlab is not None
    assert gitlab.targets == (MergeRequestTarget(4, "develop"),)
