"""The GitLab connection: which token, signing in, opening the project, and turning every failure
of python-gitlab into one :class:`GitLabError` line that says what failed and how to fix it.

All HTTP goes through :class:`ci_runner.gitlab.transport.BoundedSession` (a time budget, safe
retries, ``Retry-After``); python-gitlab's own retrying is off: it would resend a POST that
GitLab executed, wait up to 10 x 30 s, and crash on a ``Retry-After`` date (gitlab/utils.py:104-152,
134 and gitlab/client.py:721-760 at python-gitlab v8.4.0-15-g00e38026).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import gitlab
import requests
from gitlab.v4.objects import Project

from ci_runner.clock import SystemClock
from ci_runner.errors import GitLabError, GitLabTimeout, Server, first_line, refused
from ci_runner.gitlab.transport import BoundedSession, Budget, BudgetExhausted, unanswered
from ci_runner.http_policy import GITLAB_BUDGET, GITLAB_BUDGET_VARIABLE, GITLAB_REQUEST_TIMEOUT

TOKEN_FIX: Final = (
    "store a valid project or personal access token with the api scope "
    "in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
)


def gitlab_api_token(found: tuple[str, str] | None, *, job_token: str | None) -> str:
    """The token to post with, ``found`` (its variable, its value): ``CI_RUNNER_GITLAB_TOKEN``,
    else ``GITLAB_TOKEN``.

    :class:`GitLabError` when neither is set (saying so when only ``CI_JOB_TOKEN`` exists: the
    job token cannot post merge-request comments).
    """
    if found:
        return found[1]
    raise missing_token_error(job_token_present=bool(job_token))


def missing_token_error(*, job_token_present: bool = False) -> GitLabError:
    """The one line for "no token to post with"."""
    reason = "neither CI_RUNNER_GITLAB_TOKEN nor GITLAB_TOKEN is set"
    if job_token_present:
        reason += " (CI_JOB_TOKEN cannot post merge-request comments)"
    return GitLabError(f"cannot post the report to GitLab: {reason}; fix: {TOKEN_FIX}")


def connect_gitlab(
    server_url: str, token: str | None, *, session: BoundedSession | None = None
) -> gitlab.Gitlab:
    """A signed-in python-gitlab client for ``server_url`` whose requests all go through
    ``session`` (default: the real clock and a :data:`GITLAB_BUDGET` budget).

    Signs in right away (``GET /user``) so a bad token fails here, in one line, and so
    :func:`current_user_id` knows whose comments are ours.
    """
    if not token:
        raise missing_token_error()
    if session is None:
        session = BoundedSession(Budget(SystemClock(), GITLAB_BUDGET))
    gl = gitlab.Gitlab(
        server_url,
        private_token=token,
        session=session,
        timeout=GITLAB_REQUEST_TIMEOUT,  # BoundedSession caps it by the budget left
        retry_transient_errors=False,  # 429 and Retry-After too: BoundedSession does them
        keep_base_url=True,  # follow pagination on our URL even if GitLab's external_url differs
    )
    with gitlab_errors(f"sign in to GitLab at {server_url}", server_url):
        gl.auth()
    return gl


def open_project(gl: gitlab.Gitlab, project: str) -> Project:
    """The project by numeric id or ``group/name`` path."""
    with gitlab_errors(f"open project {project} on GitLab", gl.url):
        return gl.projects.get(project)


def current_user_id(gl: gitlab.Gitlab) -> int:
    """The id of the user the token belongs to (signing in if :func:`connect` did not)."""
    if gl.user is None:
        with gitlab_errors("sign in to GitLab", gl.url):
            gl.auth()
    assert gl.user is not None
    user_id: int = gl.user.id
    return user_id


def gitlab_server(server_url: str) -> Server:
    """GitLab at ``server_url``, as its failures name it."""
    return Server(
        name="GitLab",
        where=f"GitLab at {server_url}",
        address_fix="check CI_SERVER_URL and the runner's network",
        budget_variable=GITLAB_BUDGET_VARIABLE,
        retry_fix="retry the job once GitLab answers again",
        auth_fix=TOKEN_FIX,
        forbidden_fix=(
            "give the token in CI_RUNNER_GITLAB_TOKEN the api scope "
            "and at least the Reporter role in the project"
        ),
        not_found_fix=(
            "check that it exists and that the token in CI_RUNNER_GITLAB_TOKEN belongs to a "
            "member of the project"
        ),
    )


@contextmanager
def gitlab_errors(action: str, server_url: str) -> Iterator[None]:
    """Turn python-gitlab's and requests' failures inside the block into one GitLabError line:
    ``cannot <action>: <what GitLab answered>; fix: <how>``. Never includes the token."""
    server = gitlab_server(server_url)
    try:
        yield
    except gitlab.GitlabError as error:
        raise _answered(server, action, error) from error
    except BudgetExhausted as error:
        raise GitLabTimeout(unanswered(error, server, action)) from error
    except requests.RequestException as error:
        raise GitLabError(unanswered(error, server, action)) from error


def _answered(server: Server, action: str, error: gitlab.GitlabError) -> GitLabError:
    code = error.response_code
    message = first_line(error.error_message)
    if isinstance(error, gitlab.GitlabAuthenticationError):
        code = 401
    if isinstance(error, gitlab.exceptions.RedirectError):
        return GitLabError(
            f"cannot {action}: GitLab redirected the request to another address; fix: set the "
            "GitLab URL (CI_SERVER_URL) to the address it redirects to, usually its https:// URL"
        )
    if code is None:
        return GitLabError(
            f"cannot {action}: {message or type(error).__name__}; fix: {server.retry_fix}"
        )
    return GitLabError(refused(server, action, code, message))
