"""The target branch's metrics.json from job artifacts, over real HTTP to the fake GitLab."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from gitlab.v4.objects import Project

from ci_runner.errors import GitLabError
from ci_runner.gitlab.baseline import fetch_baseline
from ci_runner.gitlab.client import connect, open_project
from ci_runner.results.metrics import SCHEMA_VERSION
from ci_runner.results.stage import load_target_baseline
from tests.gitlab_server import FakeGitLab, record_retry_sleeps
from tests.gitlab_server import Project as FakeProject

TOKEN = "glpat-CANARY-9f2c71d4e8"
METRICS = json.dumps(
    {"version": SCHEMA_VERSION, "metrics": {"loss": {"final": 0.25}, "accuracy": {"final": 0.9}}}
).encode()


@pytest.fixture(autouse=True)
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    return record_retry_sleeps(monkeypatch)


@pytest.fixture
def server() -> Iterator[FakeGitLab]:
    with FakeGitLab() as fake:
        fake.add_token(TOKEN, fake.add_user("project_42_bot"))
        yield fake


@pytest.fixture
def fake_project(server: FakeGitLab) -> FakeProject:
    return server.add_project("group/proj")


@pytest.fixture
def project(server: FakeGitLab, fake_project: FakeProject) -> Project:
    return open_project(connect(server.url, TOKEN), "group/proj")


def test_baseline_found(server: FakeGitLab, fake_project: FakeProject, project: Project) -> None:
    server.set_artifact(fake_project, "main", "train", "metrics.json", METRICS)

    assert fetch_baseline(project, "main", "train") == METRICS

    [request] = server.matching("GET", "/jobs/artifacts/")
    assert (
        request.path == f"/api/v4/projects/{fake_project.id}/jobs/artifacts/main/raw/metrics.json"
    )
    assert request.query == {"job": "train"}


def test_baseline_on_a_branch_with_slashes_and_a_nested_path(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.set_artifact(fake_project, "release/1.0#rc", "train gpu", "out/metrics.json", METRICS)

    assert fetch_baseline(project, "release/1.0#rc", "train gpu", "out/metrics.json") == METRICS
    [request] = server.matching("GET", "/jobs/artifacts/")
    assert request.path.endswith("/jobs/artifacts/release/1.0%23rc/raw/out/metrics.json")
    assert request.query == {"job": "train gpu"}


def test_no_baseline_is_none(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.set_artifact(fake_project, "main", "other-job", "metrics.json", METRICS)
    assert fetch_baseline(project, "main", "train") is None
    assert load_target_baseline(project, "main", "train") is None


def test_baseline_parsed_into_final_values(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.set_artifact(fake_project, "main", "train", "metrics.json", METRICS)
    assert load_target_baseline(project, "main", "train") == {"loss": 0.25, "accuracy": 0.9}


def test_gitlab_failing_is_one_line(
    server: FakeGitLab, project: Project, sleeps: list[float]
) -> None:
    server.inject(503, path="/jobs/artifacts/", times=11)
    with pytest.raises(GitLabError) as caught:
        fetch_baseline(project, "main", "train")
    assert str(caught.value) == (
        "cannot download the baseline metrics.json of job train on main in group/proj: GitLab "
        "kept answering 503 Service Unavailable, even after retries; fix: retry the job once "
        "GitLab answers again"
    )
    assert len(sleeps) == 10


def test_rejected_token_is_one_line(server: FakeGitLab, project: Project) -> None:
    server.revoke_token(TOKEN)
    with pytest.raises(GitLabError) as caught:
        fetch_baseline(project, "main", "train")
    assert str(caught.value) == (
        "cannot download the baseline metrics.json of job train on main in group/proj: GitLab "
        "rejected the access token (401 Unauthorized); fix: store a valid project or personal "
        "access token with the api scope in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
    )
    assert TOKEN not in str(caught.value)
