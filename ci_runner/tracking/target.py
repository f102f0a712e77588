"""Where the run is tracked, from train.yaml's ``tracking`` and the environment; None: nowhere.

``server: mlflow`` (the default) tracks when ``MLFLOW_TRACKING_URI`` is set, with MLflow's own
``MLFLOW_TRACKING_TOKEN`` (a bearer token) or ``MLFLOW_TRACKING_USERNAME`` /
``MLFLOW_TRACKING_PASSWORD`` (basic auth) and ``MLFLOW_TRACKING_INSECURE_TLS``, as MLflow's
client reads them (mlflow/environment_variables.py, mlflow/utils/rest_utils.py). ``server:
gitlab`` tracks in a GitLab CI job only: ``$CI_API_V4_URL/projects/$CI_PROJECT_ID/ml/mlflow``
with the token ci-runner comments with (GitLab's "MLflow client compatibility" docs: a token
with the ``api`` scope and at least the Developer role).

The ranks get none of these: only with train.yaml's ``tracking.ranks_log`` do they join the run
(:func:`rank_sign_in`), with a token of their own, ``CI_RUNNER_MLFLOW_TOKEN`` (for an MLflow
server, else MLflow's own token or password), never the comment token.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, Problem
from ci_runner.plan.tracking import (
    PASSWORD_VARIABLE,
    RANK_TOKEN_VARIABLE,
    TOKEN_VARIABLE,
)
from ci_runner.settings import Settings
from ci_runner.variables import GITLAB_TOKEN_VARIABLES


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


@dataclass(frozen=True)
class RankSignIn:
    """How the ranks sign in to the run (``tracking.ranks_log``): the user name, a plain
    variable, and the secret ones by MLflow's names (keys of the job's Secret)."""

    username: str | None = None
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)
    source: str = RANK_TOKEN_VARIABLE  # the variable the secret came from, for messages


def find_target(config: TrainConfig, ctx: CIContext, settings: Settings) -> Target | None:
    """The server to track at, or None when train.yaml and the environment name none."""
    server = config.tracking.server
    if server == "off":
        return None
    if server == "gitlab":
        return _gitlab_target(ctx, settings)
    mlflow = settings.mlflow
    uri = mlflow.tracking_uri
    if not uri.startswith(("http://", "https://")):
        return None  # unset, or a local store (file:, sqlite:) that only MLflow's client writes
    return Target(
        "mlflow",
        uri.rstrip("/"),
        token=mlflow.token,
        username=mlflow.username,
        password=mlflow.password,
        insecure_tls=mlflow.insecure_tls,
    )


def _gitlab_target(ctx: CIContext, settings: Settings) -> Target | None:
    if not ctx.in_ci or not ctx.project_id:
        return None  # outside a GitLab job there is no project to track in
    api = ctx.api_v4_url
    if not api:
        return None
    name, token = settings.gitlab_token or (GITLAB_TOKEN_VARIABLES[0], None)
    return Target(
        "gitlab", f"{api}/projects/{ctx.project_id}/ml/mlflow", token=token, token_variable=name
    )


def rank_sign_in(config: TrainConfig, target: Target, settings: Settings) -> RankSignIn | None:
    """How the ranks sign in to ``target`` when train.yaml's ``tracking.ranks_log`` has them log
    to the run themselves; None when it does not (the ranks then get no MLflow variable).

    ``CI_RUNNER_MLFLOW_TOKEN``, a token made for the ranks, else for an MLflow server MLflow's own
    token or user and password, as ci-runner signs in with them (none: a server that asks for
    none). GitLab's MLflow API always asks for a token, and the comment token is never one: both
    raise ConfigError before the run is created and anything is submitted.
    """
    if not config.tracking.ranks_log:
        return None
    own = settings.mlflow.rank_token
    if own:
        sign_in = RankSignIn(credentials={TOKEN_VARIABLE: own})
    elif target.kind == "gitlab":
        raise _ranks_log_error(
            config,
            f"the ranks log to GitLab's MLflow API themselves and need a token of their own, "
            f"but {RANK_TOKEN_VARIABLE} is not set",
            f"store a project access token made for the ranks (the api scope and the Developer "
            f"role) in the masked CI/CD variable {RANK_TOKEN_VARIABLE}, not the comment token "
            f"{GITLAB_TOKEN_VARIABLES[0]}, or remove ranks_log",
        )
    elif target.token:
        sign_in = RankSignIn(credentials={TOKEN_VARIABLE: target.token}, source=TOKEN_VARIABLE)
    elif target.password:
        secret = {PASSWORD_VARIABLE: target.password}
        sign_in = RankSignIn(target.username, secret, source=PASSWORD_VARIABLE)
    else:
        sign_in = RankSignIn(target.username)  # a server that asks for no secret
    for name, comment_token in settings.gitlab_tokens:
        if comment_token in sign_in.credentials.values():
            raise _ranks_log_error(
                config,
                f"{sign_in.source} holds the same token as {name}, which ci-runner comments "
                "with, and every rank and every package it imports would hold it",
                f"store a token made for the ranks alone in the masked CI/CD variable "
                f"{RANK_TOKEN_VARIABLE}, or remove ranks_log",
            )
    return sign_in


def _ranks_log_error(config: TrainConfig, message: str, fix: str) -> ConfigError:
    line = config.tracking.ranks_log_line
    return ConfigError([Problem(config.source_file, "tracking.ranks_log", line, message, fix)])
