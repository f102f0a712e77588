"""One reading of a yes/no variable (context.env_flag), for every one ci-runner reads."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ci_runner.commands.train import refuse_fork
from ci_runner.config.types import TrackingSpec
from ci_runner.context import env_flag
from ci_runner.errors import ForkRefusedError
from ci_runner.plan.run_plan import build_plan
from ci_runner.settings import read_settings
from ci_runner.tracking.target import find_target
from testing.plan_cases import CONFIG, CONTEXT


@pytest.mark.parametrize("value", ["1", "true", "yes", "TRUE", " Yes "])
@pytest.mark.parametrize("default", [True, False])
def test_true_spellings(value: str, default: bool) -> None:
    assert env_flag(value, default) is True


@pytest.mark.parametrize("value", ["0", "false", "no", "False", " NO "])
@pytest.mark.parametrize("default", [True, False])
def test_false_spellings(value: str, default: bool) -> None:
    assert env_flag(value, default) is False


@pytest.mark.parametrize("value", [None, "", "  ", "on", "maybe"])
@pytest.mark.parametrize("default", [True, False])
def test_unset_empty_or_another_word_is_the_default(value: str | None, default: bool) -> None:
    assert env_flag(value, default) is default


@pytest.mark.parametrize(("value", "allowed"), [("Yes", True), ("1", True), ("", False)])
def test_git_protocol_is_read_as_a_flag(value: str, allowed: bool) -> None:
    plan = build_plan(CONFIG, CONTEXT, read_settings({"CI_RUNNER_ALLOW_GIT_PROTOCOL": value}))
    assert plan.git_protocol is allowed


def test_forks_are_allowed_by_any_true_spelling() -> None:
    fork = replace(CONTEXT, mr_iid="3", mr_project_id="1", mr_source_project_id="2")
    refuse_fork(fork, read_settings({"CI_RUNNER_ALLOW_FORKS": "1"}))
    with pytest.raises(ForkRefusedError):
        refuse_fork(fork, read_settings({"CI_RUNNER_ALLOW_FORKS": "false"}))


def test_insecure_tls_is_read_as_a_flag() -> None:
    config = replace(CONFIG, tracking=TrackingSpec(server="mlflow"))
    env = {"MLFLOW_TRACKING_URI": "https://m.example.com", "MLFLOW_TRACKING_INSECURE_TLS": "YES"}
    target = find_target(config, CONTEXT, read_settings(env))
    assert target is not None and target.insecure_tls is True
