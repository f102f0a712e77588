"""The tests' one bounded wait: a probe polled until it gives something."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
WAIT = 30.0  # real seconds, unless a caller says otherwise (never reached when green)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = WAIT) -> T:
    """``probe()`` until it gives something (polled every 50 ms), or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found is not None and found is not False:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not after {timeout:.0f}s")
        time.sleep(0.05)
