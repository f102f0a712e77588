"""Retry waits recorded instead of slept: ci-runner's (on a manual clock) and python-gitlab's own
(which ci-runner turns off)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import gitlab.utils
import pytest

from ci_runner.clock import ManualClock
from ci_runner.gitlab.transport import BoundedSession, Budget


def record_retry_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Make python-gitlab's own retry waits (``time.sleep`` in ``gitlab.utils``) instant and
    return the list they are recorded in: ci-runner turns them off, so it must stay empty."""
    recorded: list[float] = []
    fake_time = SimpleNamespace(sleep=recorded.append, time=time.time)
    monkeypatch.setattr(gitlab.utils, "time", fake_time)
    return recorded


def manual_session(clock: ManualClock, seconds: float = 20.0) -> BoundedSession:
    """ci-runner's GitLab session on a manual clock: its retry waits are recorded in
    ``clock.sleeps``, never slept."""
    return BoundedSession(Budget(clock, seconds))
