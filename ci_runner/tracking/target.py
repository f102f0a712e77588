"""Where the run is tracked, from train.yaml's ``tracking`` and the environment; None: nowhere.

``server: mlflow`` (the default) tracks when ``MLFLOW_TRACKING_URI`` is set, with MLflow's own
``MLFLOW_TRACKING_TOKEN`` (a bearer token) or ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD`` (basic auth) and ``MLFLOW_TRACKING_INSECURE_TLS``, as MLflow's
client reads them (mlflow/environment_variables.py, mlflow/utils/rest_utils.py). ``server:
gitlab`` tracks in a GitLab CI job only: ``$CI_API_V4_URL/projects/$CI_PROJECT_ID/ml/mlflow``
with the token ci-runner comments with (GitLab's "MLflow client compatibility" docs: a token
with the ``api`` scope and at least the Developer role).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.plan.tracking import (
    INSECURE_TLS_VARIABLE,
    PASSWORD_VARIABLE,
    TOKEN_VARIABLE,
    URI_VARIABLE,
    USERNAME_VARIABLE,
)

GITLAB_TOKEN_VARIABLES: Final = ("CI_RUNNER_GITLAB_TOKEN", "GITLAB_TOKEN")
_TRUE: Final = frozenset({"true", "1", "yes"})


@dataclass(frozen=True)
class Target:
    """An MLflow tracking server: its URI (without a trailing slash) and how to sign in."""

    kind: Literal["mlflow", "gitlab"]
    uri: str
    token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    insecure_tls: bool = False
    token_variable: str = TOKEN_VARIABLE  # where the token came from, for messages

    @property
    def label(self) -> str:
        """How messages name it: "MLflow at <uri>" or "GitLab's MLflow API at <uri>"."""
        what = "GitLab's MLflow API" if self.kind == "gitlab" else "MLflow"
        return f"{what} at {self.uri}"

    def credentials(self) -> dict[str, str]:
        """The secret variables every rank gets, by MLflow's names."""
        found = {TOKEN_VARIABLE: self.token, PASSWORD_VARIABLE: self.password}
        return {name: value for name, value in found.items() if value}


def find_target(config: TrainConfig, ctx: CIContext, env: Mapping[str, str]) -> Target | None:
    """The server to track at, or None when train.yaml and the environment name none."""
    server = config.tracking.server
    if server == "off":
        return None
    if server == "gitlab":
        return _gitlab_target(ctx, env)
    uri = env.get(URI_VARIABLE, "").strip()
    if not uri.startswith(("http://", "https://")):
        return None  # unset, or a local store (file:, sqlite:) that only MLflow's client writes
    return Target(
        "mlflow",
        uri.rstrip("/"),
        token=env.get(TOKEN_VARIABLE) or None,
        username=env.get(USERNAME_VARIABLE) or None,
        password=env.get(PASSWORD_VARIABLE) or None,
        insecure_tls=env.get(INSECURE_TLS_VARIABLE, "").strip().lower() in _TRUE,
    )


def _gitlab_target(ctx: CIContext, env: Mapping[str, str]) -> Target | None:
    if not ctx.in_ci or not ctx.project_id:
        return None  # outside a GitLab job there is no project to track in
    api = env.get("CI_API_V4_URL", "").strip().rstrip("/")
    if not api and ctx.server_url:
        api = ctx.server_url.rstrip("/") + "/api/v4"
    if not api:
        return None
    name = next((n for n in GITLAB_TOKEN_VARIABLES if env.get(n, "").strip()), None)
    return Target(
        "gitlab",
        f"{api}/projects/{ctx.project_id}/ml/mlflow",
        token=env[name].strip() if name else None,
        token_variable=name or GITLAB_TOKEN_VARIABLES[0],
    )
