"""What the follower says: its status lines, each with an identity — what a line is about decides
whether it was said already, so its wording can change without changing when it is repeated.

The tracker decides; the words are here (those naming the job's object come from its kind, and
those that share a failure's words from :mod:`explain`).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import NamedTuple

from ci_runner.backends.kubernetes import explain
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import JSON


class Topic(Enum):
    """What a status line said once is about."""

    PENDING = "pending"  # pods of a role the scheduler cannot place: (role, its message)
    STARTED = "started"  # the followed pod's container started: (pod,)
    HELD = "held"  # the followed container ended, sidecars keep its pod: (pod, code, sidecars)
    JOB_WARNING = "job warning"  # a Warning Event of the job's own controller: (reason, message)
    QUEUED = "queued"  # Kueue keeps the job waiting: (its reason, its message)


class LineKey(NamedTuple):
    """A status line's identity: its topic and the cluster's facts it reports."""

    topic: Topic
    about: tuple[str, ...]


class StatusLine(NamedTuple):
    key: LineKey
    text: str


class Said:
    """The status lines said since the job last set up (a resume starts again)."""

    def __init__(self) -> None:
        self._keys: set[LineKey] = set()

    def once(self, line: StatusLine) -> list[str]:
        """``[line.text]`` the first time a line of that identity comes, then ``[]``."""
        if line.key in self._keys:
            return []
        self._keys.add(line.key)
        return [line.text]

    def forget(self) -> None:
        self._keys.clear()


def pending(role: Role | None, message: str) -> StatusLine:
    """Pods of ``role`` the scheduler cannot place, and its ``message``."""
    who = "workers" if role is Role.WORKER else ("" if role is None else role.value)
    key = LineKey(Topic.PENDING, ("" if role is None else role.value, message))
    return StatusLine(key, f"{who} pending: {message}")


def launcher_running(pod: str) -> StatusLine:
    return StatusLine(LineKey(Topic.STARTED, (pod,)), f"launcher running (pod {pod})")


def held(pod: str, container: str, end: JSON, running: Sequence[str], grace: float) -> StatusLine:
    """The launcher's ``container`` ended, but sidecars keep its pod running."""
    key = LineKey(Topic.HELD, (pod, str(end.get("exitCode")), *running))
    return StatusLine(key, explain.held_line(pod, container, end, running, grace))


def workers_ready(ready: int, workers: int) -> str:
    return f"workers ready {ready}/{workers}"


def pull_retried(pod: str, reason: str | None, grace: float) -> str:
    """The kubelet cannot pull ``pod``'s image yet and retries (said once per pod)."""
    return (
        f"pod {pod} cannot pull its image yet ({reason}): the kubelet retries; "
        f"giving up after {round(grace)}s"
    )
