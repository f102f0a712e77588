"""Where a run is tracked: train.yaml's ``tracking`` and MLflow's and GitLab's variables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ci_runner.clock import ManualClock
from ci_runner.config.types import TrackingSpec
from ci_runner.context import CIContext
from ci_runner.gitlab.transport import BoundedSession, Budget
from ci_runner.tracking.client import MlflowApi, TrackingError, budget_seconds
from ci_runner.tracking.target import Target, find_target
from testing.config_cases import minimal

OUTSIDE = CIContext(sha="a" * 40, project_path="g/p")
IN_CI = replace(OUTSIDE, job_id="9", project_id="42", server_url="https://gitlab.example.com")


def test_nothing_is_tracked_when_no_variable_names_a_server() -> None:
    assert find_target(minimal(), IN_CI, {}) is None
    assert find_target(minimal(), IN_CI, {"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}) is None
    gitlab = minimal(tracking=TrackingSpec("gitlab"))
    assert find_target(gitlab, OUTSIDE, {"CI_RUNNER_GITLAB_TOKEN": "t"}) is None


def test_off_wins_over_the_variables() -> None:
    config = minimal(tracking=TrackingSpec("off"))
    assert find_target(config, IN_CI, {"MLFLOW_TRACKING_URI": "http://m"}) is None


def test_mlflows_own_variables() -> None:
    env = {
        "MLFLOW_TRACKING_URI": "https://m.example.com/",
        "MLFLOW_TRACKING_USERNAME": "u",
        "MLFLOW_TRACKING_PASSWORD": "p",
        "MLFLOW_TRACKING_INSECURE_TLS": "true",
    }
    target = find_target(minimal(), OUTSIDE, env)
    assert target == Target("mlflow", "https://m.example.com", None, "u", "p", True)
    assert target.credentials() == {"MLFLOW_TRACKING_PASSWORD": "p"}


def test_gitlab_is_the_projects_endpoint_with_the_comment_token() -> None:
    config = minimal(tracking=TrackingSpec("gitlab"))
    env = {"CI_API_V4_URL": "https://g.example.com/gl/api/v4", "GITLAB_TOKEN": "glpat-x",
           "MLFLOW_TRACKING_URI": "http://elsewhere"}  # fmt: skip
    target = find_target(config, IN_CI, env)
    assert target is not None
    assert (target.uri, target.token, target.token_variable) == (
        "https://g.example.com/gl/api/v4/projects/42/ml/mlflow",
        "glpat-x",
        "GITLAB_TOKEN",
    )
    assert (
        target.label
        == "GitLab's MLflow API at https://g.example.com/gl/api/v4/projects/42/ml/mlflow"
    )
    without_api_url = find_target(config, IN_CI, {})
    assert without_api_url is not None
    assert without_api_url.uri == "https://gitlab.example.com/api/v4/projects/42/ml/mlflow"
    assert without_api_url.token is None


@pytest.mark.parametrize(("raw", "seconds"), [("", 30.0), ("5", 5.0), ("0", 30.0), ("x", 30.0)])
def test_the_time_budget_variable(raw: str, seconds: float) -> None:
    assert budget_seconds({"CI_RUNNER_TRACKING_TIMEOUT": raw}) == seconds


def test_a_spent_budget_is_one_line_naming_the_variable() -> None:
    clock = ManualClock()
    api = MlflowApi(Target("mlflow", "http://127.0.0.1:9"), BoundedSession(Budget(clock, 0)))
    with pytest.raises(TrackingError) as caught:
        api.call("POST", "runs/create", "create the run", {})
    assert str(caught.value) == (
        "MLflow at http://127.0.0.1:9 did not answer within the 0 s ci-runner gives it when "
        "asked to create the run; fix: check MLFLOW_TRACKING_URI and the runner's network, or "
        "give it more time in CI_RUNNER_TRACKING_TIMEOUT (seconds)"
    )
