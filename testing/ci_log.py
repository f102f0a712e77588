"""The CI job's log as a test sees it: the backend's Console writes into it; tests wait for
lines."""

from __future__ import annotations

import threading

WAIT = 30.0  # real seconds a test waits for a line (never reached when green)


class CiLog:
    """The CI job's log: every line echoed, in order; tests wait for lines to appear."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._partial = ""
        self._cond = threading.Condition()

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
        with self._cond:
            if not self._cond.wait_for(lambda: line in self.lines, timeout=WAIT):
                raise AssertionError(f"never printed {line!r}; the CI log so far: {self.lines}")
