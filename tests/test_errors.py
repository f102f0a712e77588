"""ci_runner.errors: the first line of a library's message, as error texts quote it; and the
one wording of an HTTP server's failure, which GitLab's client and MLflow's both use."""

from __future__ import annotations

import pytest
import requests

from ci_runner.clock import ManualClock
from ci_runner.errors import Server, first_line, refused
from ci_runner.gitlab.client import gitlab_server
from ci_runner.gitlab.transport import (
    BoundedSession,
    Budget,
    BudgetExhausted,
    RateLimited,
    unanswered,
)
from ci_runner.tracking.client import MlflowApi
from ci_runner.tracking.target import Target

MLFLOW = "http://mlflow.example:5000"


def test_first_line_is_stripped_and_cut_with_its_ellipsis() -> None:
    assert first_line("  403 Forbidden \n<html>...") == "403 Forbidden"
    assert first_line(None) == first_line("  \n") == ""
    assert first_line("x" * 201) == "x" * 199 + "…"
    assert first_line("x" * 201, ellipsis="...") == "x" * 197 + "..."
    assert first_line("x" * 200) == "x" * 200


def _servers() -> tuple[Server, Server]:
    session = BoundedSession(Budget(ManualClock(), 1))
    return gitlab_server("https://gitlab.example"), MlflowApi(
        Target("mlflow", MLFLOW), session
    ).server


def test_gitlab_and_mlflow_say_the_same_for_the_same_failure() -> None:
    gitlab, mlflow = _servers()
    response = requests.Response()
    response.status_code = 429
    assert unanswered(RateLimited(response), gitlab, "read the notes") == (
        "cannot read the notes: GitLab kept answering 429 Too Many Requests, even after "
        "retries; fix: retry the job once GitLab answers again (the token is being rate-limited)"
    )
    assert unanswered(RateLimited(response), mlflow, "create the run") == (
        f"cannot create the run: MLflow at {MLFLOW} kept answering 429 Too Many Requests, even "
        "after retries; fix: retry the job once the tracking server answers again (the token is "
        "being rate-limited)"
    )
    assert unanswered(BudgetExhausted(20), mlflow, "end the run") == (
        f"cannot end the run: MLflow at {MLFLOW} did not answer within the 20 s ci-runner gives "
        "it; fix: check MLFLOW_TRACKING_URI and the runner's network, or give it more time in "
        "CI_RUNNER_TRACKING_TIMEOUT (seconds)"
    )
    assert unanswered(requests.ConnectionError(), gitlab, "sign in") == (
        "cannot sign in: GitLab at https://gitlab.example did not answer (ConnectionError, "
        "after retries); fix: check CI_SERVER_URL and the runner's network, then retry the job "
        "once GitLab answers again"
    )


@pytest.mark.parametrize(
    ("code", "detail", "what", "fix"),
    [
        (401, "401 Unauthorized", "rejected the access token (401 Unauthorized)", "auth"),
        (403, "insufficient_scope", "answered 403 insufficient_scope", "forbidden"),
        (404, "404 Project Not Found", "answered 404 Project Not Found", "not found"),
        (500, "", "answered 500 Internal Server Error", "retry"),  # a POST is not resent
        (409, "", "answered 409 Conflict", "report"),
        (599, "", "answered 599", "retry"),
    ],
)
def test_a_status_reads_the_same_from_any_server(
    code: int, detail: str, what: str, fix: str
) -> None:
    server = Server("S", "S at u", "check u", "V", "retry", "auth", "forbidden", "not found")
    fix = "report this to the ci-runner maintainers with the job log" if fix == "report" else fix
    assert refused(server, "do it", code, detail) == f"cannot do it: S {what}; fix: {fix}"
