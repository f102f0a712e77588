"""Token choice, signing in and the one-line errors, against the fake GitLab over real HTTP."""

from __future__ import annotations

import pytest

from ci_runner.clock import ManualClock
from ci_runner.errors import GitLabError, GitLabTimeout
from ci_runner.gitlab.client import (
    connect_gitlab,
    current_user_id,
    gitlab_api_token,
    open_project,
)
from ci_runner.gitlab.transport import BoundedSession
from ci_runner.settings import read_settings
from testing.fake_gitlab.accounts import GITLAB_TOKEN
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.model import User
from testing.fake_gitlab.retry_waits import manual_session
from testing.fake_gitlab.server import FakeGitLab
from testing.ports import free_port

TOKEN_FIX = (
    "fix: store a valid project or personal access token with the api scope "
    "in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
)


# --- token ---------------------------------------------------------------------------------


def test_token_prefers_ci_runner_variable_then_gitlab_token() -> None:
    env = {"CI_RUNNER_GITLAB_TOKEN": "a", "GITLAB_TOKEN": "b", "CI_JOB_TOKEN": "c"}
    assert token_from_env(env) == "a"
    assert token_from_env({"CI_RUNNER_GITLAB_TOKEN": " ", "GITLAB_TOKEN": "b"}) == "b"


def token_from_env(env: dict[str, str]) -> str:
    """The token ``open_gitlab`` posts with, in the environment ``env``."""
    settings = read_settings(env)
    return gitlab_api_token(settings.gitlab_token, job_token=settings.job_token)


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


def test_connect_without_token_fails_before_any_request(gitlab_server: FakeGitLab) -> None:
    with pytest.raises(GitLabError, match=r"^cannot post the report to GitLab: neither"):
        connect_gitlab(gitlab_server.url, None)
    assert gitlab_server.requests == []


def test_bad_token_is_one_clear_line(gitlab_server: FakeGitLab) -> None:
    with pytest.raises(GitLabError) as caught:
        connect_gitlab(gitlab_server.url, "glpat-wrong")
    assert str(caught.value) == (
        f"cannot sign in to GitLab at {gitlab_server.url}: GitLab rejected the access token "
        f"(401 Unauthorized); {TOKEN_FIX}"
    )
    assert caught.value.lines() == [str(caught.value)]


def test_unknown_project_is_one_line(
    gitlab_server: FakeGitLab, gitlab_bot: User, gitlab_session: BoundedSession
) -> None:
    gl = connect_gitlab(gitlab_server.url, GITLAB_TOKEN, session=gitlab_session)
    with pytest.raises(GitLabError) as caught:
        open_project(gl, "group/missing")
    assert str(caught.value) == (
        "cannot open project group/missing on GitLab: GitLab answered 404 Project Not Found; "
        "fix: check that it exists and that the token in CI_RUNNER_GITLAB_TOKEN belongs to a "
        "member of the project"
    )


def test_gitlab_down_is_one_line_after_retries(
    gitlab_sleeps: list[float], gitlab_session: BoundedSession
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # a loopback port nobody listens on
    with pytest.raises(GitLabError) as caught:
        connect_gitlab(url, GITLAB_TOKEN, session=gitlab_session)
    assert str(caught.value) == (
        f"cannot sign in to GitLab at {url}: GitLab at {url} did not answer (ConnectionError, "
        "after retries); fix: check CI_SERVER_URL and the runner's network, then retry the job "
        "once GitLab answers again"
    )
    assert gitlab_sleeps == [0.5, 1.0, 2.0]


def test_gitlab_down_longer_than_the_budget_says_so_once(
    gitlab_clock: ManualClock, gitlab_sleeps: list[float]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    session = manual_session(gitlab_clock, seconds=2.0)
    with pytest.raises(GitLabTimeout) as caught:
        connect_gitlab(url, GITLAB_TOKEN, session=session)
    assert str(caught.value) == (
        f"cannot sign in to GitLab at {url}: GitLab at {url} did not answer within the 2 s "
        "ci-runner gives it; fix: check CI_SERVER_URL and the runner's network, or give it more "
        "time in CI_RUNNER_GITLAB_TIMEOUT (seconds)"
    )
    assert gitlab_sleeps == [0.5, 1.0]
    assert session.budget.spent


def test_connect_signs_in_and_opens_the_project_by_path_or_id(
    gitlab_server: FakeGitLab,
    gitlab_bot: User,
    gitlab_fake_project: FakeProject,
    gitlab_session: BoundedSession,
) -> None:
    gl = connect_gitlab(gitlab_server.url, GITLAB_TOKEN, session=gitlab_session)
    by_path = open_project(gl, "group/proj")
    by_id = open_project(gl, str(by_path.id))
    assert (by_path.path_with_namespace, by_id.path_with_namespace) == ("group/proj", "group/proj")
    assert current_user_id(gl) == by_path.id - 1  # the fake hands out ids in creation order
    assert [(r.method, r.path) for r in gitlab_server.requests] == [
        ("GET", "/api/v4/user"),
        ("GET", "/api/v4/projects/group%2Fproj"),
        ("GET", f"/api/v4/projects/{by_path.id}"),
    ]
    assert {r.headers["private-token"] for r in gitlab_server.requests} == {GITLAB_TOKEN}
