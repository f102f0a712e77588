"""The fake GitLab's MLflow routes answer as GitLab's lib/api/ml/mlflow/ does."""

from __future__ import annotations

from typing import Any

import requests

from testing.fake_gitlab.accounts import GITLAB_TOKEN
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.model import User
from testing.fake_gitlab.server import FakeGitLab


def _call(server: FakeGitLab, project: FakeProject, method: str, endpoint: str,
          body: Any = None, token: str = GITLAB_TOKEN) -> tuple[int, Any]:  # fmt: skip
    url = f"{server.url}/api/v4/projects/{project.id}/ml/mlflow/api/2.0/mlflow/{endpoint}"
    headers = {"Authorization": f"Bearer {token}"}
    if method == "GET":
        response = requests.get(url, params=body, headers=headers, timeout=5)
    else:
        response = requests.post(url, json=body, headers=headers, timeout=5)
    return response.status_code, response.json()


def test_experiments_and_runs(
    gitlab_server: FakeGitLab, gitlab_bot: User, gitlab_fake_project: FakeProject
) -> None:
    s, p = gitlab_server, gitlab_fake_project
    missing = {"experiment_name": "e"}
    assert _call(s, p, "GET", "experiments/get-by-name", missing) == (
        404,
        {"error_code": "RESOURCE_DOES_NOT_EXIST"},
    )
    assert _call(s, p, "POST", "experiments/create", {"name": "e"}) == (200, {"experiment_id": "1"})
    assert _call(s, p, "POST", "experiments/create", {"name": "e"}) == (
        400,
        {"error_code": "RESOURCE_ALREADY_EXISTS"},
    )
    assert _call(s, p, "POST", "experiments/create", {}) == (400, {"error": "name is missing"})
    status, made = _call(s, p, "POST", "runs/create", {"experiment_id": "1", "run_name": "r"})
    assert status == 200
    run_id = made["run"]["info"]["run_id"]
    assert made["run"]["info"]["status"] == "RUNNING"
    batch = {"run_id": run_id, "params": [{"key": "p", "value": "v" * 251}]}
    assert _call(s, p, "POST", "runs/log-batch", batch) == (
        400,
        {"error_code": "INVALID_PARAMETER_VALUE",
         "message": "value too long for ml_candidate_params"},
    )  # fmt: skip
    update = {"run_id": run_id, "status": "DONE"}
    assert _call(s, p, "POST", "runs/update", update) == (
        400,
        {"error": "status does not have a valid value"},
    )
    status, got = _call(s, p, "POST", "runs/update", {"run_id": run_id, "status": "KILLED"})
    assert (status, got["run_info"]["status"]) == (200, "KILLED")


def test_log_parameter_creates_one_param_a_run_has_once(
    gitlab_server: FakeGitLab, gitlab_bot: User, gitlab_fake_project: FakeProject
) -> None:
    s, p = gitlab_server, gitlab_fake_project
    _call(s, p, "POST", "experiments/create", {"name": "e"})
    _, made = _call(s, p, "POST", "runs/create", {"experiment_id": "1"})
    run_id = made["run"]["info"]["run_id"]
    param = {"run_id": run_id, "key": "lr", "value": "0.1"}
    assert _call(s, p, "POST", "runs/log-parameter", param) == (200, {})
    assert _call(s, p, "POST", "runs/log-parameter", {**param, "value": "0.2"}) == (
        400,
        {"error_code": "INVALID_PARAMETER_VALUE",
         "message": "Validation failed: Name has already been taken"},
    )  # fmt: skip
    assert _call(s, p, "POST", "runs/log-parameter", {**param, "key": "x", "value": "v" * 251}) == (
        400,
        {"error_code": "INVALID_PARAMETER_VALUE",
         "message": "Validation failed: Value is too long (maximum is 250 characters)"},
    )  # fmt: skip
    assert _call(s, p, "POST", "runs/log-parameter", {"run_id": run_id, "key": "k"}) == (
        400,
        {"error": "value is missing"},
    )
    (run,) = s.mlflow.of(p.id).experiments[0].runs
    assert run.params == {"lr": "0.1"}


def test_roles_and_scopes(
    gitlab_server: FakeGitLab, gitlab_bot: User, gitlab_fake_project: FakeProject
) -> None:
    s, p = gitlab_server, gitlab_fake_project
    s.mlflow.set_role(p.id, gitlab_bot.id, "guest")
    assert _call(s, p, "GET", "experiments/get-by-name", {"experiment_name": "e"})[0] == 404
    assert _call(s, p, "POST", "experiments/create", {"name": "e"}) == (
        401,
        {"message": "401 Unauthorized"},
    )
    s.mlflow.set_role(p.id, gitlab_bot.id, "none")
    assert _call(s, p, "GET", "experiments/get-by-name", {"experiment_name": "e"}) == (
        404,
        {"message": "404 Not Found"},
    )
    s.add_token("read-only", gitlab_bot, scopes=("read_api",))
    s.mlflow.set_role(p.id, gitlab_bot.id, "developer")
    status, body = _call(s, p, "POST", "experiments/create", {"name": "e"}, token="read-only")
    assert (status, body["error"]) == (403, "insufficient_scope")
    assert _call(s, p, "GET", "experiments/get-by-name", {}, token="nope") == (
        401,
        {"message": "401 Unauthorized"},
    )
