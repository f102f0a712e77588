"""GitLab's model experiments and model registry: the MLflow API under ``/projects/:id/ml/mlflow``
(gitlabhq lib/api/ml/mlflow/). Its state and rules are :mod:`testing.fake_gitlab.mlflow`."""

from __future__ import annotations

from testing.fake_gitlab.area import Call, ProjectArea
from testing.fake_gitlab.model import Project
from testing.fake_gitlab.responses import Response, json_response


def _serve(call: Call, project: Project, rest: list[str]) -> Response:
    mlflow = call.state.mlflow
    status, payload = mlflow.route(
        call.method, project.id, call.user.id, rest[2:], call.query, call.body
    )
    return json_response(status, payload)


AREA = ProjectArea(matches=lambda rest: rest[:2] == ["ml", "mlflow"], serve=_serve)
