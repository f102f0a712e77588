"""Who a request is: its ``PRIVATE-TOKEN``, or the same token as ``Authorization: Bearer`` (as
MLflow's client sends MLFLOW_TRACKING_TOKEN; lib/gitlab/auth/auth_finders.rb reads both for a
personal or project access token). An unknown token gets GitLab's 401; a token without
the ``api`` scope gets GitLab's 403 on writes (``read_api``) or on everything."""

from __future__ import annotations

from collections.abc import Mapping

from testing.fake_gitlab.model import User
from testing.fake_gitlab.responses import Reply
from testing.fake_gitlab.state import GitLabState


def private_token(state: GitLabState, method: str, headers: Mapping[str, str]) -> User:
    """The user whose token is in the ``PRIVATE-TOKEN`` header (else a bearer token), if its
    scopes allow ``method``."""
    bearer = headers.get("authorization", "").removeprefix("Bearer ")
    token = state.token(headers.get("private-token") or bearer)
    if token is None:
        raise Reply(401, {"message": "401 Unauthorized"})
    allowed = "api" in token.scopes or ("read_api" in token.scopes and method == "GET")
    if not allowed:
        raise Reply(
            403,
            {
                "error": "insufficient_scope",
                "error_description": "The request requires higher privileges than "
                "provided by the access token.",
                "scope": "api",
            },
        )
    return token.user
