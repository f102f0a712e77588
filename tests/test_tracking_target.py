"""Where a run is tracked: train.yaml's ``tracking`` and MLflow's and GitLab's variables; how the
ranks sign in when ``tracking.ranks_log`` has them log themselves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ci_runner.clock import ManualClock
from ci_runner.config.schema import load_config
from ci_runner.config.types import TrackingSpec, TrainConfig
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, TrackingError
from ci_runner.gitlab.transport import BoundedSession, Budget
from ci_runner.settings import read_settings
from ci_runner.tracking.client import MlflowApi
from ci_runner.tracking.target import RankSignIn, Target, find_target, rank_sign_in
from testing.config_cases import BASE, minimal

OUTSIDE = CIContext(sha="a" * 40, project_path="g/p")
IN_CI = replace(OUTSIDE, job_id="9", project_id="42", server_url="https://gitlab.example.com")


def test_nothing_is_tracked_when_no_variable_names_a_server() -> None:
    assert find_target(minimal(), IN_CI, read_settings({})) is None
    assert (
        find_target(minimal(), IN_CI, read_settings({"MLFLOW_TRACKING_URI": "file:///tmp/mlruns"}))
        is None
    )
    gitlab = minimal(tracking=TrackingSpec("gitlab"))
    assert find_target(gitlab, OUTSIDE, read_settings({"CI_RUNNER_GITLAB_TOKEN": "t"})) is None


def test_off_wins_over_the_variables() -> None:
    config = minimal(tracking=TrackingSpec("off"))
    assert find_target(config, IN_CI, read_settings({"MLFLOW_TRACKING_URI": "http://m"})) is None


def test_mlflows_own_variables() -> None:
    env = {
        "MLFLOW_TRACKING_URI": "https://m.example.com/",
        "MLFLOW_TRACKING_USERNAME": "u",
        "MLFLOW_TRACKING_PASSWORD": "p",
        "MLFLOW_TRACKING_INSECURE_TLS": "true",
    }
    target = find_target(minimal(), OUTSIDE, read_settings(env))
    assert target == Target("mlflow", "https://m.example.com", None, "u", "p", True)


def test_gitlab_is_the_projects_endpoint_with_the_comment_token() -> None:
    config = minimal(tracking=TrackingSpec("gitlab"))
    env = {"GITLAB_TOKEN": "glpat-x", "MLFLOW_TRACKING_URI": "http://elsewhere"}
    in_ci = replace(IN_CI, api_url="https://g.example.com/gl/api/v4")
    target = find_target(config, in_ci, read_settings(env))
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
    without_api_url = find_target(config, IN_CI, read_settings({}))
    assert without_api_url is not None
    assert without_api_url.uri == "https://gitlab.example.com/api/v4/projects/42/ml/mlflow"
    assert without_api_url.token is None


def test_a_spent_budget_is_one_line_naming_the_variable() -> None:
    clock = ManualClock()
    api = MlflowApi(Target("mlflow", "http://127.0.0.1:9"), BoundedSession(Budget(clock, 0)))
    with pytest.raises(TrackingError) as caught:
        api.call("POST", "runs/create", "create the run", {})
    assert str(caught.value) == (
        "cannot create the run: MLflow at http://127.0.0.1:9 did not answer within the 0 s "
        "ci-runner gives it; fix: check MLFLOW_TRACKING_URI and the runner's network, or give "
        "it more time in CI_RUNNER_TRACKING_TIMEOUT (seconds)"
    )


# ---------------------------------------------------------------------------------------------
# tracking.ranks_log: how the ranks sign in, never with the comment token.

GITLAB = Target("gitlab", "https://g.example.com/api/v4/projects/42/ml/mlflow", token="glpat-c")
MLFLOW = Target("mlflow", "https://m.example.com", token="mlflow-t")
COMMENT = {"CI_RUNNER_GITLAB_TOKEN": "glpat-c"}


def ranks_log(tracking: str = "{ranks_log: true}") -> TrainConfig:
    """train.yaml with ``tracking`` on its line 4, as ``jobs/train.yaml``."""
    return load_config(f"{BASE}tracking: {tracking}\n", "jobs/train.yaml")


def test_by_default_the_ranks_get_no_sign_in_whatever_the_variables() -> None:
    env = {**COMMENT, "CI_RUNNER_MLFLOW_TOKEN": "rank-t", "MLFLOW_TRACKING_TOKEN": "mlflow-t"}
    for tracking in ("gitlab", "{per_rank: true}", "{ranks_log: false}"):
        config = load_config(f"{BASE}tracking: {tracking}\n")
        assert rank_sign_in(config, GITLAB, read_settings(env)) is None
        assert rank_sign_in(config, MLFLOW, read_settings(env)) is None


def test_the_ranks_own_token_wins() -> None:
    env = {**COMMENT, "CI_RUNNER_MLFLOW_TOKEN": " rank-t ", "MLFLOW_TRACKING_TOKEN": "mlflow-t"}
    config = ranks_log("{server: gitlab, ranks_log: true}")
    for target in (GITLAB, MLFLOW):
        assert rank_sign_in(config, target, read_settings(env)) == RankSignIn(
            None, {"MLFLOW_TRACKING_TOKEN": "rank-t"}, "CI_RUNNER_MLFLOW_TOKEN"
        )


def test_an_mlflow_server_without_a_rank_token_signs_the_ranks_in_as_ci_runner() -> None:
    config = ranks_log()
    assert rank_sign_in(config, MLFLOW, read_settings({})) == RankSignIn(
        None, {"MLFLOW_TRACKING_TOKEN": "mlflow-t"}, "MLFLOW_TRACKING_TOKEN"
    )
    basic = Target("mlflow", "https://m.example.com", username="u", password="p")
    assert rank_sign_in(config, basic, read_settings({})) == RankSignIn(
        "u", {"MLFLOW_TRACKING_PASSWORD": "p"}, "MLFLOW_TRACKING_PASSWORD"
    )
    open_server = Target("mlflow", "http://m.example.com")
    assert rank_sign_in(config, open_server, read_settings({})) == RankSignIn()


def test_gitlab_without_the_ranks_token_is_one_line_naming_the_setting() -> None:
    with pytest.raises(ConfigError) as caught:
        rank_sign_in(
            ranks_log("\n  server: gitlab\n  ranks_log: true"), GITLAB, read_settings(COMMENT)
        )
    assert caught.value.lines() == [
        "jobs/train.yaml:6: tracking.ranks_log: the ranks log to GitLab's MLflow API themselves "
        "and need a token of their own, but CI_RUNNER_MLFLOW_TOKEN is not set; fix: store a "
        "project access token made for the ranks (the api scope and the Developer role) in the "
        "masked CI/CD variable CI_RUNNER_MLFLOW_TOKEN, not the comment token "
        "CI_RUNNER_GITLAB_TOKEN, or remove ranks_log"
    ]


@pytest.mark.parametrize(
    ("target", "env", "source", "comment"),
    [
        (GITLAB, {**COMMENT, "CI_RUNNER_MLFLOW_TOKEN": "glpat-c"}, "CI_RUNNER_MLFLOW_TOKEN",
         "CI_RUNNER_GITLAB_TOKEN"),
        (Target("mlflow", "https://g.example.com/api/v4/projects/42/ml/mlflow", token="glpat-g"),
         {"GITLAB_TOKEN": "glpat-g"}, "MLFLOW_TRACKING_TOKEN", "GITLAB_TOKEN"),
        (Target("mlflow", "https://m.example.com", username="u", password="glpat-c"), COMMENT,
         "MLFLOW_TRACKING_PASSWORD", "CI_RUNNER_GITLAB_TOKEN"),
    ],
)  # fmt: skip
def test_the_comment_token_never_signs_the_ranks_in(
    target: Target, env: dict[str, str], source: str, comment: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        rank_sign_in(ranks_log(), target, read_settings(env))
    assert caught.value.lines() == [
        f"jobs/train.yaml:4: tracking.ranks_log: {source} holds the same token as {comment}, "
        "which ci-runner comments with, and every rank and every package it imports would hold "
        "it; fix: store a token made for the ranks alone in the masked CI/CD variable "
        "CI_RUNNER_MLFLOW_TOKEN, or remove ranks_log"
    ]
