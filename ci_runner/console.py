"""What ci-runner prints, in one place: its own lines, warnings, and the training log.

ci-runner's own lines go to stderr as ``[ci-runner] ...`` (stdout may carry a manifest, and in
CI both end up in the job log); the training log passes through to stdout as it is. Everything
is masked with one :class:`~ci_runner.masking.SecretMasker`, which learns train.yaml's
``secrets`` once the file is read. Every write is flushed: the CI log is a pipe.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, Protocol

from ci_runner.masking import SecretMasker

PREFIX: Final = "[ci-runner] "


def status_line(message: str) -> str:
    """``message`` as one of ci-runner's own lines: ``[ci-runner] message`` and a newline."""
    return f"{PREFIX}{message}\n"


class Stream(Protocol):
    """Where a console writes: a text file such as ``sys.stderr``."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> None: ...


class StatusOutput(Protocol):
    """The part of a :class:`Console` that the publisher and backends say things through."""

    def status(self, message: str) -> None: ...

    def warning(self, message: str) -> None: ...


class ToolOutput(StatusOutput, Protocol):
    """A :class:`StatusOutput` that also shows another program's output (pip's) as it comes."""

    def relay(self, text: str) -> None: ...


class Console:
    """ci-runner's console: ``status`` and ``warning`` lines, ``relay``-ed tool output, the
    training log's ``echo``, and a command's ``answer``; all masked."""

    def __init__(self, stdout: Stream, stderr: Stream, masker: SecretMasker | None = None) -> None:
        self._stdout = stdout
        self._stderr = stderr
        self._masker = masker or SecretMasker()

    @property
    def masker(self) -> SecretMasker:
        """What this console masks, as it stands."""
        return self._masker

    def add_secrets(self, values: Iterable[str | None]) -> None:
        """Mask ``values`` too from now on (train.yaml's ``secrets``, once it is read)."""
        self._masker = self._masker.with_secrets(values)

    def status(self, message: str) -> None:
        """``[ci-runner] message`` on stderr."""
        self._write(self._stderr, status_line(message))

    def warning(self, message: str) -> None:
        """``[ci-runner] warning: message`` on stderr."""
        self.status(f"warning: {message}")

    def relay(self, text: str) -> None:
        """Another program's output (pip's), on stderr as it comes."""
        self._write(self._stderr, text)

    def answer(self, message: str) -> None:
        """``[ci-runner] message`` on stdout: what the command was asked for (``validate``)."""
        self._write(self._stdout, status_line(message))

    def echo(self, text: str) -> None:
        """The training log, on stdout as it is: the log sink has masked it already."""
        self._stdout.write(text)
        self._stdout.flush()

    def _write(self, stream: Stream, text: str) -> None:
        stream.write(self._masker.mask(text))
        stream.flush()
