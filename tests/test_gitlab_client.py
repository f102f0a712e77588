"""Token choice, signing in and the one-line errors, against the fake GitLab over real HTTP."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from ci_runner.clock import ManualClock
from ci_runner.errors import GitLabError
from ci_runner.gitlab.client import (
    GitLabTimeout,
    connect,
    current_user_id,
    open_project,
    token_from_env,
)
from ci_runner.gitlab.transport import BoundedSession
from tests.gitlab_server import FakeGitLab, manual_session, record_retry_sleeps

TOKEN = "glpat-CANARY-9f2c71d4e8"
TOKEN_FIX = (
    "fix: store a valid project or personal access token with the api scope "
    "in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
)


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
        fake.add_project("group/proj")
        yield fake


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


def test_unknown_project_is_one_line(server: FakeGitLab, session: BoundedSession) -> None:
    gl = connect(server.url, TOKEN, session=session)
    with pytest.raises(GitLabError) as caught:
        open_project(gl, "group/missing")
    assert str(caught.value) == (
        "cannot open project group/missing on GitLab: GitLab answered 404 Project Not Found; "
        "fix: check that it exists and that the token in CI_RUNNER_GITLAB_TOKEN belongs to a "
        "member of the project"
    )


def test_gitlab_down_is_one_line_after_retries(
    sleeps: list[float], session: BoundedSession
) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(GitLabError) as caught:
        connect(url, TOKEN, session=session)
    assert str(caught.value) == (
        f"cannot sign in to GitLab at {url}: GitLab at {url} did not answer (ConnectionError, "
        "after retries); fix: check CI_SERVER_URL and the runner's network, then retry the job "
        "once GitLab answers again"
    )
    assert sleeps == [0.5, 1.0, 2.0]


def test_gitlab_down_longer_than_the_budget_says_so_once(clock: ManualClock) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    session = manual_session(clock, seconds=2.0)
    with pytest.raises(GitLabTimeout) as caught:
        connect(url, TOKEN, session=session)
    assert str(caught.value) == (
        f"cannot sign in to GitLab at {url}: GitLab at {url} did not answer within the 2 s "
        "ci-runner gives it; fix: check CI_SERVER_URL and the runner's network, or give GitLab "
        "more time in CI_RUNNER_GITLAB_TIMEOUT (seconds)"
    )
    assert clock.sleeps == [0.5, 1.0]
    assert session.budget.spent


def test_connect_signs_in_and_opens_the_project_by_path_or_id(
    server: FakeGitLab, session: BoundedSession
) -> None:
    gl = connect(server.url, TOKEN, session=session)
    by_path = open_project(gl, "group/proj")
    by_id = open_project(gl, str(by_path.id))
    assert (by_path.path_with_namespace, by_id.path_with_namespace) == ("group/proj", "group/proj")
    assert current_user_id(gl) == by_path.id - 1  # the fake hands out ids in creation order
    assert [(r.method, r.path) for r in server.requests] == [
        ("GET", "/api/v4/user"),
        ("GET", "/api/v4/projects/group%2Fproj"),
        ("GET", f"/api/v4/projects/{by_path.id}"),
    ]
    assert {r.headers["private-token"] for r in server.requests} == {TOKEN}
