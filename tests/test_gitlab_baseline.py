"""The target branch's metrics.json from job artifacts, over real HTTP to the fake GitLab."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from gitlab.v4.objects import Project

from ci_runner.clock import ManualClock
from ci_runner.errors import GitLabError
from ci_runner.gitlab.baseline import BaselineFile, fetch_baseline
from ci_runner.gitlab.client import connect, open_project
from ci_runner.gitlab.transport import BoundedSession
from ci_runner.results.metrics_file import SCHEMA_VERSION
from ci_runner.results.stage import Baseline, load_target_baseline
from tests.gitlab_server import FakeGitLab, manual_session, record_retry_sleeps
from tests.gitlab_server import Project as FakeProject

TOKEN = "glpat-CANARY-9f2c71d4e8"
METRICS = json.dumps(
    {"version": SCHEMA_VERSION, "metrics": {"loss": {"final": 0.25}, "accuracy": {"final": 0.9}}}
).encode()


@pytest.fixture(autouse=True)
def no_python_gitlab_sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """python-gitlab's own retries are off: it never sleeps."""
    recorded = record_retry_sleeps(monkeypatch)
    yield
    assert recorded == []


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def session(clock: ManualClock) -> BoundedSession:
    return manual_session(clock)


@pytest.fixture
def sleeps(clock: ManualClock) -> list[float]:
    """The waits ci-runner's retries asked for, recorded instead of slept."""
    return clock.sleeps


@pytest.fixture
def server() -> Iterator[FakeGitLab]:
    with FakeGitLab() as fake:
        fake.add_token(TOKEN, fake.add_user("project_42_bot"))
        yield fake


@pytest.fixture
def fake_project(server: FakeGitLab) -> FakeProject:
    return server.add_project("group/proj")


@pytest.fixture
def project(server: FakeGitLab, fake_project: FakeProject, session: BoundedSession) -> Project:
    return open_project(connect(server.url, TOKEN, session=session), "group/proj")


def test_baseline_found(server: FakeGitLab, fake_project: FakeProject, project: Project) -> None:
    pipeline = server.add_pipeline(fake_project, "main", jobs={"train": {"metrics.json": METRICS}})

    found = fetch_baseline(project, "main", "train")

    url = f"{server.url}/group/proj/-/pipelines/{pipeline.id}"
    assert found == BaselineFile(METRICS, pipeline.id, url)
    job = pipeline.jobs[0]
    assert [(r.path, r.query) for r in server.requests if r.method == "GET"][-3:] == [
        (
            f"/api/v4/projects/{fake_project.id}/pipelines",
            {
                "ref": "main",
                "status": "success",
                "order_by": "id",
                "sort": "desc",
                "per_page": "10",
            },
        ),
        (
            f"/api/v4/projects/{fake_project.id}/pipelines/{pipeline.id}/jobs",
            {"scope[]": "success", "per_page": "100"},
        ),
        (f"/api/v4/projects/{fake_project.id}/jobs/{job.id}/artifacts/metrics.json", {}),
    ]


def test_baseline_walks_back_past_pipelines_without_the_job(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    older = server.add_pipeline(fake_project, "main", jobs={"train": {"metrics.json": METRICS}})
    server.add_pipeline(
        fake_project, "main", jobs={"train": {"metrics.json": b"red"}}, status="failed"
    )
    server.add_pipeline(fake_project, "main", jobs={"train": {"other.txt": b"no metrics"}})
    server.add_pipeline(fake_project, "main", source="schedule", jobs={"docs": {}})
    server.add_pipeline(fake_project, "feature", jobs={"train": {"metrics.json": b"elsewhere"}})

    found = fetch_baseline(project, "main", "train")

    assert found is not None
    assert (found.data, found.pipeline_id) == (METRICS, older.id)


def test_baseline_walks_back_a_bounded_number_of_pipelines(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_pipeline(fake_project, "main", jobs={"train": {"metrics.json": METRICS}})
    for _ in range(3):
        server.add_pipeline(fake_project, "main", jobs={"lint": {}})
    assert fetch_baseline(project, "main", "train", max_pipelines=3) is None
    assert server.count("GET", r"/pipelines/\d+/jobs$") == 3
    assert fetch_baseline(project, "main", "train", max_pipelines=4) is not None


def test_baseline_on_a_branch_with_slashes_and_a_nested_path(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.set_artifact(fake_project, "release/1.0#rc", "train gpu", "out/m #1.json", METRICS)

    found = fetch_baseline(project, "release/1.0#rc", "train gpu", "out/m #1.json")

    assert found is not None and found.data == METRICS
    [listing] = server.matching("GET", r"/pipelines$")
    assert listing.query["ref"] == "release/1.0#rc"
    [request] = server.matching("GET", r"/artifacts/")
    assert request.path.endswith("/artifacts/out/m%20%231.json")


def test_no_baseline_is_none(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.set_artifact(fake_project, "main", "other-job", "metrics.json", METRICS)
    assert fetch_baseline(project, "main", "train") is None
    assert load_target_baseline(project, "main", "train") is None


def test_baseline_parsed_into_final_values(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    pipeline = server.add_pipeline(fake_project, "main", jobs={"train": {"metrics.json": METRICS}})
    assert load_target_baseline(project, "main", "train") == Baseline(
        {"loss": 0.25, "accuracy": 0.9},
        (pipeline.id, f"{server.url}/group/proj/-/pipelines/{pipeline.id}"),
    )


def test_gitlab_failing_is_one_line(
    server: FakeGitLab, project: Project, sleeps: list[float]
) -> None:
    server.inject(503, path="/pipelines$", times=11)
    with pytest.raises(GitLabError) as caught:
        fetch_baseline(project, "main", "train")
    assert str(caught.value) == (
        "cannot download the baseline metrics.json of job train on main in group/proj: GitLab "
        "kept answering 503 Service Unavailable, even after retries; fix: retry the job once "
        "GitLab answers again"
    )
    assert sleeps == [0.5, 1.0, 2.0]
    assert server.count("GET", "/pipelines$") == 4


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
