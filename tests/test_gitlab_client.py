"""Token choice, signing in and the one-line errors, against the fake GitLab over real HTTP."""

from __future__ import annotations

import socket

import pytest

from ci_runner.errors import GitLabError
from ci_runner.gitlab.client import connect, current_user_id, open_project, token_from_env
from tests.conftest import GITLAB_TOKEN
from tests.gitlab_server import FakeGitLab, User
from tests.gitlab_server import Project as FakeProject

TOKEN_FIX = (
    "fix: store a valid project or personal access token with the api scope "
    "in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
)


@pytest.fixture
def server(
    gitlab_server: FakeGitLab, gitlab_bot: User, gitlab_fake_project: FakeProject
) -> FakeGitLab:
    """The shared fake GitLab with its bot and project."""
    return gitlab_server


# --- token ---------------------------------------------------------------------------------


def test_token_prefers_ci_runner_variable_then_gitlab_token() -> None:
    env = {"CI_RUNNER_GITLAB_TOKEN": "a", "GITLAB_TOKEN": "b", "CI_JOB_TOKEN": "c"}
    assert token_from_env(env) == "a"
    assert token_from_env({"CI_RUNNER_GITLAB_TOKEN": " ", "GITLAB_TOKEN": "b"}) == "b"


def test_no_token_is_one_line_naming_the_variable() -> None:
    with pytest.raises(GitLabError) as caught:
        token_from_env({})
    assert str(caught.value) == (
        "cannot post the report to GitLab: neither CI_RUNNER_GITLAB_TOKEN nor GITLAB_TOKEN "
        f"is set; {TOKEN_FIX}"
    )


def test_only_the_job_token_says_it_cannot_post() -> None:
    with pytest.raises(GitLabError) as caught:
        token_from_env({"CI_JOB_TOKEN": "job-token-value"})
    assert str(caught.value) == (
        "cannot post the report to GitLab: neither CI_RUNNER_GITLAB_TOKEN nor GITLAB_TOKEN "
        f"is set (CI_JOB_TOKEN cannot post merge-request comments); {TOKEN_FIX}"
    )
    assert "job-token-value" not in str(caught.value)


def test_connect_without_token_fails_before_any_request(server: FakeGitLab) -> None:
    with pytest.raises(GitLabError, match=r"^cannot post the report to GitLab: neither"):
        connect(server.url, None)
    assert server.requests == []


def test_bad_token_is_one_clear_line(server: FakeGitLab) -> None:
    with pytest.raises(GitLabError) as caught:
        connect(server.url, "glpat-wrong")
    assert str(caught.value) == (
        f"cannot sign in to GitLab at {server.url}: GitLab rejected the access token "
        f"(401 Unauthorized); {TOKEN_FIX}"
    )
    assert caught.value.lines() == [str(caught.value)]


def test_unknown_project_is_one_line(server: FakeGitLab) -> None:
    gl = connect(server.url, GITLAB_TOKEN)
    with pytest.raises(GitLabError) as caught:
        open_project(gl, "group/missing")
    assert str(caught.value) == (
        "cannot open project group/missing on GitLab: GitLab answered 404 Project Not Found; "
        "fix: check that it exists and that the token in CI_RUNNER_GITLAB_TOKEN belongs to a "
        "member of the project"
    )


def test_gitlab_down_is_one_line_after_retries(gitlab_sleeps: list[float]) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(GitLabError) as caught:
        connect(url, GITLAB_TOKEN)
    assert str(caught.value) == (
        f"cannot sign in to GitLab at {url}: GitLab at {url} did not answer (ConnectionError, "
        "after retries); fix: check CI_SERVER_URL and the runner's network, then retry the job "
        "once GitLab answers again"
    )
    assert len(gitlab_sleeps) == 10


def test_connect_signs_in_and_opens_the_project_by_path_or_id(server: FakeGitLab) -> None:
    gl = connect(server.url, GITLAB_TOKEN)
    by_path = open_project(gl, "group/proj")
    by_id = open_project(gl, str(by_path.id))
    assert (by_path.path_with_namespace, by_id.path_with_namespace) == ("group/proj", "group/proj")
    assert current_user_id(gl) == by_path.id - 1  # the fake hands out ids in creation order
    assert [(r.method, r.path) for r in server.requests] == [
        ("GET", "/api/v4/user"),
        ("GET", "/api/v4/projects/group%2Fproj"),
        ("GET", f"/api/v4/projects/{by_path.id}"),
    ]
    assert {r.headers["private-token"] for r in server.requests} == {GITLAB_TOKEN}
