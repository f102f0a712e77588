"""The one exception hierarchy ci-runner raises for expected failures, and the exit codes.

Anything derived from :class:`CiRunnerError` is a user-facing failure: ``main`` prints its
message (one line per problem, never a traceback) and exits with :attr:`exit_code`. Errors that
translate a library's exception chain it (``raise ... from error``), so a crash log keeps the
cause. Any other exception is a bug: ``main`` writes its traceback to a log file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import ClassVar, Final

EXIT_FAILURE: Final = 1  # a user mistake, or the training failed
EXIT_USAGE: Final = 2  # the command line is wrong (argparse)
EXIT_BUG: Final = 3  # a bug in ci-runner: the traceback is in a crash log
EXIT_INTERRUPTED: Final = 130  # Ctrl-C, or the training was cancelled


def first_line(message: object, limit: int = 200, ellipsis: str = "…") -> str:
    """The first line of a library's error message, stripped and cut to ``limit`` characters
    (``ellipsis`` included); "" when there is none."""
    lines = str(message or "").strip().splitlines()
    line = lines[0].strip() if lines else ""
    return line if len(line) <= limit else line[: limit - len(ellipsis)] + ellipsis


class CiRunnerError(Exception):
    """An expected failure, reported to the user as one clear line and exit code 1."""

    exit_code: ClassVar[int] = EXIT_FAILURE

    def lines(self) -> list[str]:
        """The lines to print for this error, each complete on its own."""
        return [str(self)]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a user's input: where it is, what is wrong, how to fix it."""

    file: str
    path: str  # YAML path such as "kubernetes.tolerations[0].effect"; "" for the whole document
    line: int | None  # 1-based line in ``file``, when known
    message: str  # what is wrong
    fix: str  # how to fix it

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        subject = f"{where}: {self.path}:" if self.path else f"{where}:"
        return f"{subject} {self.message}; fix: {self.fix}"


class ConfigError(CiRunnerError):
    """One or more problems in ``train.yaml`` (or in values that override it)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def lines(self) -> list[str]:
        return [str(p) for p in self.problems]


class ForkRefusedError(CiRunnerError):
    """A merge request from a fork, which the project has not opted in to train."""


class GitError(CiRunnerError):
    """A revision, file or repository that git cannot give us."""


class ClusterError(CiRunnerError):
    """The Kubernetes API refused or could not be reached (after retries)."""


class GitLabError(CiRunnerError):
    """GitLab refused or could not be reached (after retries)."""


class GitLabTimeout(GitLabError):
    """The time budget for GitLab ran out: say it once, then leave GitLab alone."""


class TrackingError(CiRunnerError):
    """The tracking server could not be used: one line, what and how to fix it;
    ``error_code`` is MLflow's (``RESOURCE_DOES_NOT_EXIST``, ...) when it sent one."""

    def __init__(self, message: str, error_code: str | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code


# What an HTTP server (GitLab, the MLflow tracking server) did, in one wording for both:
# ``cannot <action>: <server> <what it did>; fix: <how>``. The transport's exceptions are mapped
# to these by ci_runner.gitlab.transport.unanswered; a status code by refused.

REPORT_FIX: Final = "report this to the ci-runner maintainers with the job log"


@dataclass(frozen=True)
class Server:
    """An HTTP server as its failures name it and say how to fix them."""

    name: str  # who answered: "GitLab", "MLflow at <uri>"
    where: str  # who did not answer: "GitLab at <url>", "MLflow at <uri>"
    address_fix: str  # what to check when it did not answer: "check CI_SERVER_URL and ..."
    budget_variable: str  # where to give it more time: CI_RUNNER_GITLAB_TIMEOUT, ...
    retry_fix: str  # "retry the job once GitLab answers again"
    auth_fix: str  # for 401: the credentials
    forbidden_fix: str  # for 403: the credentials' rights
    not_found_fix: str  # for 404
    credentials: str = "the access token"  # what a 401 rejected


def server_failed(action: str, what: str, fix: str) -> str:
    """The one line for any failure of a request to a server: ``what`` starts with its name."""
    return f"cannot {action}: {what}; fix: {fix}"


def not_answered(server: Server, action: str, error_name: str) -> str:
    """No answer (connection refused or dropped, timed out), after retries."""
    return server_failed(
        action,
        f"{server.where} did not answer ({error_name}, after retries)",
        f"{server.address_fix}, then {server.retry_fix}",
    )


def out_of_time(server: Server, action: str, seconds: float) -> str:
    """The phase's time budget for ``server`` is spent."""
    return server_failed(
        action,
        f"{server.where} did not answer within the {seconds:g} s ci-runner gives it",
        f"{server.address_fix}, or give it more time in {server.budget_variable} (seconds)",
    )


def refused(server: Server, action: str, code: int, detail: str = "") -> str:
    """``server`` answered ``code`` (not 2xx); ``detail`` is its message, on one line."""
    status = status_text(code, detail)
    if code == 401:
        what, fix = f"rejected {server.credentials} ({status_text(401)})", server.auth_fix
    elif code == 429:
        what = f"kept answering {status_text(429)}, even after retries"
        fix = f"{server.retry_fix} (the token is being rate-limited)"
    else:
        what = f"answered {status}"
        if code == 403:
            fix = server.forbidden_fix
        elif code == 404:
            fix = server.not_found_fix
        elif code >= 500:
            fix = server.retry_fix
        else:
            fix = REPORT_FIX
    return server_failed(action, f"{server.name} {what}", fix)


def status_text(code: int, detail: str = "") -> str:
    """``403 Forbidden``, ``403 insufficient_scope``, ``404 Project Not Found`` ..."""
    if detail.startswith(str(code)):
        return detail
    if detail:
        return f"{code} {detail}"
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)


class StorageError(CiRunnerError):
    """S3 (or the local file store) refused or could not be reached."""


class EnvironmentSetupError(CiRunnerError):
    """This machine lacks something a command needs (horovodrun, Horovod with PyTorch, ...)."""
