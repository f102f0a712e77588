"""Time, passed in: the real clock in production, a manual one in tests (none sleeps for real)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall-clock time (aware, UTC)."""

    def monotonic(self) -> float:
        """Seconds on a monotonic clock, for measuring intervals."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class ManualClock:
    """A clock that only moves when told to: ``sleep`` advances it instantly."""

    def __init__(self, start: datetime | None = None) -> None:
        self._start = start or datetime(2026, 1, 1, tzinfo=timezone.utc)
        self._elapsed = 0.0
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self._start + timedelta(seconds=self._elapsed)

    def monotonic(self) -> float:
        return self._elapsed

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._elapsed += max(seconds, 0.0)


def duration(seconds: float, *, spaced: bool = False) -> str:
    """Seconds as people read them, rounded to the second.

    By default as train.yaml's ``timeout`` is written, so a CI log line can be copied back into
    it: ``5400`` -> ``1h30m``, ``90`` -> ``1m30s``, ``7200`` -> ``2h``. ``spaced``, the MR
    comment's elapsed times, each unit after the first two digits: ``1h 30m 00s``, ``1m 30s``.
    Both give ``0s`` for nothing.
    """
    hours, rest = divmod(round(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if not spaced:
        parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
        return "".join(parts) or "0s"
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"
