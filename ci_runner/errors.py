"""The one exception hierarchy ci-runner raises for expected failures, and the exit codes.

Anything derived from :class:`CiRunnerError` is a user-facing failure: ``main`` prints its
message (one line per problem, never a traceback) and exits with :attr:`exit_code`. Errors that
translate a library's exception chain it (``raise ... from error``), so a crash log keeps the
cause. Any other exception is a bug: ``main`` writes its traceback to a log file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


class StorageError(CiRunnerError):
    """S3 (or the local file store) refused or could not be reached."""


class EnvironmentSetupError(CiRunnerError):
    """This machine lacks something a command needs (horovodrun, Horovod with PyTorch, ...)."""
