"""What a kind of job tells the follower (:mod:`tracker`), which knows only this: which pods
have which role, which pod's log is the job's, whether its object's conditions say it ended,
and what its controller's Events mean. :mod:`mpijob` is the MPIJob's (MPI Operator's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import JSON, Resource
from ci_runner.backends.kubernetes.status_lines import LineKey, StatusLine, Topic
from ci_runner.backends.result import Failure, Outcome


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    failure: Failure | None = None


@dataclass(frozen=True)
class EventNews:
    """What a Warning Event of the job's own controller means: the job cannot go on, or a line."""

    failure: Failure | None = None
    line: StatusLine | None = None


def job_event_news(
    event: JSON,
    refused: Callable[[JSON], Failure | None],
    warning: Callable[[JSON], str | None],
) -> EventNews | None:
    """What a batch/v1 Job's Event means (an MPIJob's launcher Job, or torchrun's Job): the
    failure ``refused`` finds in it (a pod the Job controller could not create), else the line
    ``warning`` words, said once per reason and message; None for another object's."""
    if event.get("involvedObject", {}).get("kind") != "Job":
        return None
    failure = refused(event)
    if failure is not None:
        return EventNews(failure)
    line = warning(event)
    if line is None:
        return EventNews()
    about = (str(event.get("reason", "")), str(event.get("message", "")).strip())
    return EventNews(line=StatusLine(LineKey(Topic.JOB_WARNING, about), line))


class JobKind(Protocol):
    """One kind of job, as the follower asks about it."""

    @property
    def name(self) -> str:
        """The job object's name."""

    @property
    def resource(self) -> Resource:
        """The job object's resource: its updates carry the job's state and conditions."""

    @property
    def followed_container(self) -> str:
        """The container of the launcher pod whose log and exit code are the job's."""

    def role(self, pod: JSON) -> Role | None:
        """The pod's role; None for a pod of none."""

    def role_of(self, pod_name: str) -> Role:
        """The role of a pod known by name only (a scheduling Event before its pod)."""

    def workers(self, job: JSON, default: int) -> int:
        """How many worker pods the job's spec asks for."""

    def suspended(self, job: JSON) -> bool:
        """A queue holds the job: suspended before it started, or preempted after."""

    def finished(self, job: JSON) -> bool:
        """The job's conditions say it ended, either way."""

    def ended(self, job: JSON, pods: Mapping[str, JSON]) -> Verdict | None:
        """How the job's conditions say it ended (why from ``pods``, every pod ever seen)."""

    def event(self, event: JSON) -> EventNews | None:
        """What an Event about the job or its controller's objects means; None for others."""

    def stalled_resume(self, job: JSON, seconds: float) -> Failure | None:
        """Every worker Ready after a resume for ``seconds``, no launcher, and the job says
        why its controller does not start one."""

    def queued_line(self, job: JSON) -> str: ...

    def preempted_line(self, job: JSON) -> str: ...

    def resumed_line(self, job: JSON) -> str: ...

    def preempted_failure(self, job: JSON) -> Failure: ...

    def deleted_failure(self) -> Failure: ...
