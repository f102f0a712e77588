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
from http import HTTPStatus
from typing import Any, Final

import requests

from ci_runner.errors import CiRunnerError
from ci_runner.gitlab.transport import BoundedSession, BudgetExhausted, RateLimited
from ci_runner.http_policy import TRACKING_BUDGET_VARIABLE
from ci_runner.tracking.target import Target

API: Final = "/api/2.0/mlflow/"
JSONObject = dict[str, Any]


class TrackingError(CiRunnerError):
    """The tracking server could not be used: one line, what and how to fix it;
    ``error_code`` is MLflow's (``RESOURCE_DOES_NOT_EXIST``, ...) when it sent one."""

    def __init__(self, message: str, error_code: str | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


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
        except RateLimited:
            raise self._error(action, "kept answering 429 Too Many Requests", _RETRY) from None
        except BudgetExhausted as error:
            raise self._error(
                action,
                f"did not answer within the {error.seconds:g} s ci-runner gives it",
                f"check MLFLOW_TRACKING_URI and the runner's network, or give it more time in "
                f"{TRACKING_BUDGET_VARIABLE} (seconds)",
            ) from None
        except requests.RequestException as error:
            raise self._error(
                action,
                f"did not answer ({type(error).__name__}, after retries)",
                "check MLFLOW_TRACKING_URI and the runner's network",
            ) from None
        if response.status_code == 200:
            try:
                data = response.json()
            except ValueError:
                data = None
            if isinstance(data, dict):
                return data
            raise self._error(action, "answered 200 without a JSON object", _URI_FIX)
        raise self._refused(action, response)

    def _refused(self, action: str, response: requests.Response) -> TrackingError:
        code = response.status_code
        detail = _detail(response)
        status = f"{code} {_phrase(code)}".strip()
        if detail and not detail.startswith(str(code)):
            status += f" ({detail})"
        if code in (401, 403):
            fix = (
                f"give the token in {self.target.token_variable} the api scope and at least the "
                "Developer role in the project"
                if self.target.kind == "gitlab"
                else "check MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and "
                "MLFLOW_TRACKING_PASSWORD"
            )
        elif code == 404 and "RESOURCE_DOES_NOT_EXIST" not in detail:
            fix = _URI_FIX
        elif code >= 500:
            fix = _RETRY
        else:
            fix = "report this to the ci-runner maintainers with the job log"
        return self._error(action, f"answered {status}", fix, _error_code(response))

    def _error(
        self, action: str, what: str, fix: str, error_code: str | None = None
    ) -> TrackingError:
        return TrackingError(
            f"{self.target.label} {what} when asked to {action}; fix: {fix}", error_code
        )


_RETRY: Final = "retry the job once the tracking server answers again"
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


def _phrase(code: int) -> str:
    try:
        return HTTPStatus(code).phrase
    except ValueError:
        return ""
