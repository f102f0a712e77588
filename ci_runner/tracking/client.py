"""MLflow's REST API (``/api/2.0/mlflow/...``) over ci-runner's bounded transport.

Why not MLflow's own client: the ``mlflow`` package brings pandas, numpy, SQLAlchemy, Flask and
more into the CI image (hundreds of MB) for a dozen JSON requests; its retries
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``, default 7 with backoff up to minutes, and a 120 s timeout
each) know nothing of a job's time budget, and it resends POSTs. Here every request goes through
:class:`~ci_runner.gitlab.transport.BoundedSession`: one time budget per phase, the same retry
policy as GitLab's API (a POST is resent only when it surely never left). The endpoints used
are those GitLab lists as supported ("Supported MLflow client methods and caveats" in GitLab's
MLflow client compatibility docs; lib/api/ml/mlflow/*.rb), so one code path serves both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

import requests

from ci_runner.errors import REPORT_FIX, Server, TrackingError, refused, server_failed
from ci_runner.gitlab.transport import BoundedSession, unanswered
from ci_runner.http_policy import TRACKING_BUDGET_VARIABLE
from ci_runner.tracking.target import Target

API: Final = "/api/2.0/mlflow/"
JSONObject = dict[str, Any]


class MlflowApi:
    """The endpoints ci-runner calls, each returning the answer's JSON or raising
    :class:`TrackingError`."""

    def __init__(self, target: Target, session: BoundedSession) -> None:
        self.target = target
        self.session = session
        session.headers["Content-Type"] = "application/json"
        if target.token:
            session.headers["Authorization"] = f"Bearer {target.token}"
        elif target.username is not None:
            session.auth = (target.username, target.password or "")
        if target.insecure_tls:
            session.verify = False

    def call(
        self,
        method: str,
        endpoint: str,
        action: str,
        body: JSONObject | None = None,
        params: Mapping[str, str] | None = None,
    ) -> JSONObject:
        """One request; ``action`` says what it was for in the error ("create the run")."""
        url = self.target.uri + API + endpoint
        try:
            response = self.session.request(
                method, url, data=json.dumps(body) if body is not None else None, params=params
            )
        except requests.RequestException as error:
            raise TrackingError(unanswered(error, self.server, action)) from None
        if response.status_code == 200:
            try:
                data = response.json()
            except ValueError:
                data = None
            if isinstance(data, dict):
                return data
            raise TrackingError(
                server_failed(
                    action, f"{self.server.name} answered 200 without a JSON object", _URI_FIX
                )
            )
        detail = _detail(response)
        server = self.server
        if response.status_code == 404 and "RESOURCE_DOES_NOT_EXIST" in detail:
            server = replace(server, not_found_fix=REPORT_FIX)
        raise TrackingError(
            refused(server, action, response.status_code, detail), _error_code(response)
        )

    @property
    def server(self) -> Server:
        """The tracking server, as its failures name it."""
        if self.target.kind == "gitlab":
            auth_fix = (
                f"give the token in {self.target.token_variable} the api scope and at least the "
                "Developer role in the project"
            )
        else:
            auth_fix = (
                "check MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD"
            )
        return Server(
            name=self.target.label,
            where=self.target.label,
            address_fix="check MLFLOW_TRACKING_URI and the runner's network",
            budget_variable=TRACKING_BUDGET_VARIABLE,
            retry_fix="retry the job once the tracking server answers again",
            auth_fix=auth_fix,
            forbidden_fix=auth_fix,
            not_found_fix=_URI_FIX,
            credentials=_credentials(self.target),
        )


def _credentials(target: Target) -> str:
    if target.token:
        return "the access token"
    if target.username is not None:
        return "the user name and password"
    return "a request without credentials"


_URI_FIX: Final = (
    "set MLFLOW_TRACKING_URI to the server's address (for GitLab: "
    "<GitLab URL>/api/v4/projects/<project id>/ml/mlflow)"
)


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _error_code(response: requests.Response) -> str | None:
    data = _json(response)
    code = data.get("error_code") if isinstance(data, dict) else None
    return code if isinstance(code, str) else None


def _detail(response: requests.Response, limit: int = 200) -> str:
    """MLflow's ``error_code: message`` or GitLab's ``message`` / ``error``, on one line."""
    data = _json(response)
    if not isinstance(data, dict):
        return ""
    parts = [str(data[k]) for k in ("error_code", "message", "error") if data.get(k)]
    text = ": ".join(parts).replace("\n", " ").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
