"""The target branch's metrics.json from job artifacts, over real HTTP to the fake GitLab."""

from __future__ import annotations

import json

import pytest
from gitlab.v4.objects import Project

from ci_runner.errors import GitLabError
from ci_runner.results.baseline import Baseline, BaselineFile, fetch_baseline, load_target_baseline
from ci_runner.results.metrics_file import SCHEMA_VERSION
from testing.fake_gitlab.accounts import GITLAB_TOKEN
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.server import FakeGitLab

METRICS = json.dumps(
    {"version": SCHEMA_VERSION, "metrics": {"loss": {"final": 0.25}, "accuracy": {"final": 0.9}}}
).encode()


def test_baseline_found(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    pipeline = gitlab_server.add_pipeline(
        gitlab_fake_project, "main", jobs={"train": {"metrics.json": METRICS}}
    )

    found = fetch_baseline(gitlab_project, "main", "train")

    url = f"{gitlab_server.url}/group/proj/-/pipelines/{pipeline.id}"
    assert found == BaselineFile(METRICS, pipeline.id, url)
    job = pipeline.jobs[0]
    assert [(r.path, r.query) for r in gitlab_server.requests if r.method == "GET"][-3:] == [
        (
            f"/api/v4/projects/{gitlab_fake_project.id}/pipelines",
            {
                "ref": "main",
                "status": "success",
                "order_by": "id",
                "sort": "desc",
                "per_page": "10",
            },
        ),
        (
            f"/api/v4/projects/{gitlab_fake_project.id}/pipelines/{pipeline.id}/jobs",
            {"scope[]": "success", "per_page": "100"},
        ),
        (f"/api/v4/projects/{gitlab_fake_project.id}/jobs/{job.id}/artifacts/metrics.json", {}),
    ]


def test_baseline_walks_back_past_pipelines_without_the_job(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    older = gitlab_server.add_pipeline(
        gitlab_fake_project, "main", jobs={"train": {"metrics.json": METRICS}}
    )
    gitlab_server.add_pipeline(
        gitlab_fake_project, "main", jobs={"train": {"metrics.json": b"red"}}, status="failed"
    )
    gitlab_server.add_pipeline(
        gitlab_fake_project, "main", jobs={"train": {"other.txt": b"no metrics"}}
    )
    gitlab_server.add_pipeline(gitlab_fake_project, "main", source="schedule", jobs={"docs": {}})
    gitlab_server.add_pipeline(
        gitlab_fake_project, "feature", jobs={"train": {"metrics.json": b"elsewhere"}}
    )

    found = fetch_baseline(gitlab_project, "main", "train")

    assert found is not None
    assert (found.data, found.pipeline_id) == (METRICS, older.id)


def test_baseline_walks_back_a_bounded_number_of_pipelines(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_pipeline(
        gitlab_fake_project, "main", jobs={"train": {"metrics.json": METRICS}}
    )
    for _ in range(3):
        gitlab_server.add_pipeline(gitlab_fake_project, "main", jobs={"lint": {}})
    assert fetch_baseline(gitlab_project, "main", "train", max_pipelines=3) is None
    assert gitlab_server.count("GET", r"/pipelines/\d+/jobs$") == 3
    assert fetch_baseline(gitlab_project, "main", "train", max_pipelines=4) is not None


def test_baseline_on_a_branch_with_slashes_and_a_nested_path(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.set_artifact(
        gitlab_fake_project, "release/1.0#rc", "train gpu", "out/m #1.json", METRICS
    )

    found = fetch_baseline(gitlab_project, "release/1.0#rc", "train gpu", "out/m #1.json")

    assert found is not None and found.data == METRICS
    [listing] = gitlab_server.matching("GET", r"/pipelines$")
    assert listing.query["ref"] == "release/1.0#rc"
    [request] = gitlab_server.matching("GET", r"/artifacts/")
    assert request.path.endswith("/artifacts/out/m%20%231.json")


def test_no_baseline_is_none(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.set_artifact(gitlab_fake_project, "main", "other-job", "metrics.json", METRICS)
    assert fetch_baseline(gitlab_project, "main", "train") is None
    assert load_target_baseline(gitlab_project, "main", "train") is None


def test_baseline_parsed_into_final_values(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    pipeline = gitlab_server.add_pipeline(
        gitlab_fake_project, "main", jobs={"train": {"metrics.json": METRICS}}
    )
    assert load_target_baseline(gitlab_project, "main", "train") == Baseline(
        {"loss": 0.25, "accuracy": 0.9},
        (pipeline.id, f"{gitlab_server.url}/group/proj/-/pipelines/{pipeline.id}"),
    )


def test_gitlab_failing_is_one_line(
    gitlab_server: FakeGitLab, gitlab_project: Project, gitlab_sleeps: list[float]
) -> None:
    gitlab_server.inject(503, path="/pipelines$", times=11)
    with pytest.raises(GitLabError) as caught:
        fetch_baseline(gitlab_project, "main", "train")
    assert str(caught.value) == (
        "cannot download the baseline metrics.json of job train on main in group/proj: GitLab "
        "answered 503 Service Unavailable; fix: retry the job once GitLab answers again"
    )
    assert gitlab_sleeps == [0.5, 1.0, 2.0]
    assert gitlab_server.count("GET", "/pipelines$") == 4


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
