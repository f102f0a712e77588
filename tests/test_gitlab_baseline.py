"""The target branch's metrics.json from job artifacts, over real HTTP to the fake GitLab."""

from __future__ import annotations

import json

import pytest
from gitlab.v4.objects import Project

from ci_runner.errors import GitLabError
from ci_runner.gitlab.baseline import fetch_baseline
from ci_runner.results.metrics import SCHEMA_VERSION
from ci_runner.results.stage import load_target_baseline
from tests.conftest import GITLAB_TOKEN
from tests.gitlab_server import FakeGitLab
from tests.gitlab_server import Project as FakeProject

METRICS = json.dumps(
    {"version": SCHEMA_VERSION, "metrics": {"loss": {"final": 0.25}, "accuracy": {"final": 0.9}}}
).encode()


def test_baseline_found(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.set_artifact(gitlab_fake_project, "main", "train", "metrics.json", METRICS)

    assert fetch_baseline(gitlab_project, "main", "train") == METRICS

    [request] = gitlab_server.matching("GET", "/jobs/artifacts/")
    assert (
        request.path
        == f"/api/v4/projects/{gitlab_fake_project.id}/jobs/artifacts/main/raw/metrics.json"
    )
    assert request.query == {"job": "train"}


def test_baseline_on_a_branch_with_slashes_and_a_nested_path(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.set_artifact(
        gitlab_fake_project, "release/1.0#rc", "train gpu", "out/metrics.json", METRICS
    )

    assert (
        fetch_baseline(gitlab_project, "release/1.0#rc", "train gpu", "out/metrics.json") == METRICS
    )
    [request] = gitlab_server.matching("GET", "/jobs/artifacts/")
    assert request.path.endswith("/jobs/artifacts/release/1.0%23rc/raw/out/metrics.json")
    assert request.query == {"job": "train gpu"}


def test_no_baseline_is_none(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.set_artifact(gitlab_fake_project, "main", "other-job", "metrics.json", METRICS)
    assert fetch_baseline(gitlab_project, "main", "train") is None
    assert load_target_baseline(gitlab_project, "main", "train") is None


def test_baseline_parsed_into_final_values(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.set_artifact(gitlab_fake_project, "main", "train", "metrics.json", METRICS)
    assert load_target_baseline(gitlab_project, "main", "train") == {"loss": 0.25, "accuracy": 0.9}


def test_gitlab_failing_is_one_line(
    gitlab_server: FakeGitLab, gitlab_project: Project, gitlab_sleeps: list[float]
) -> None:
    gitlab_server.inject(503, path="/jobs/artifacts/", times=11)
    with pytest.raises(GitLabError) as caught:
        fetch_baseline(gitlab_project, "main", "train")
    assert str(caught.value) == (
        "cannot download the baseline metrics.json of job train on main in group/proj: GitLab "
        "kept answering 503 Service Unavailable, even after retries; fix: retry the job once "
        "GitLab answers again"
    )
    assert len(gitlab_sleeps) == 10


def test_rejected_token_is_one_line(gitlab_server: FakeGitLab, gitlab_project: Project) -> None:
    gitlab_server.revoke_token(GITLAB_TOKEN)
    with pytest.raises(GitLabError) as caught:
        fetch_baseline(gitlab_project, "main", "train")
    assert str(caught.value) == (
        "cannot download the baseline metrics.json of job train on main in group/proj: GitLab "
        "rejected the access token (401 Unauthorized); fix: store a valid project or personal "
        "access token with the api scope in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
    )
    assert GITLAB_TOKEN not in str(caught.value)
