"""The CI job's log as a test sees it: the backend's Console writes into it, or a CI job's
process output is read into it (:meth:`CiLog.reading`); tests wait for lines."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from testing.waiting import WAIT


class CiLog:
    """The CI job's log: every line echoed, in order; tests wait for lines, each written after
    ``prefix`` (``train > `` where gitlab-ci-local runs the job), for at most ``timeout`` real
    seconds."""

    def __init__(self, prefix: str = "", timeout: float = WAIT) -> None:
        self.lines: list[str] = []
        self._partial = ""
        self._prefix = prefix
        self._timeout = timeout
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    @classmethod
    def reading(cls, stream: Iterable[str], prefix: str = "", timeout: float = WAIT) -> CiLog:
        """The log of a process whose output is ``stream``, read line by line in a thread."""
        log = cls(prefix, timeout)
        log._thread = threading.Thread(target=log._read, args=(stream,), daemon=True)
        log._thread.start()
        return log

    def _read(self, stream: Iterable[str]) -> None:
        for line in stream:
            self(line)
        with self._cond:
            if self._partial:  # the last line, without a newline
                self.lines.append(self._partial)
                self._partial = ""
                self._cond.notify_all()

    def __call__(self, text: str) -> None:
        with self._cond:
            *complete, self._partial = (self._partial + text).split("\n")
            self.lines.extend(complete)
            self._cond.notify_all()

    def write(self, text: str) -> None:  # a Console's stdout and stderr both
        self(text)

    def flush(self) -> None:
        pass

    def wait_for(self, line: str) -> None:
        wanted = self._prefix + line
        with self._cond:
            if not self._cond.wait_for(lambda: wanted in self.lines, timeout=self._timeout):
                raise AssertionError(f"never printed {line!r}; the CI log so far: {self.lines}")

    def join(self) -> None:
        """Until the process's output ended (at most :data:`WAIT` seconds)."""
        if self._thread is not None:
            self._thread.join(timeout=WAIT)
