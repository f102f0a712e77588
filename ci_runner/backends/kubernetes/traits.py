"""How a kind of job's pods set up, which of them are logged, and the words for it all: what the
follower and the backend ask of a kind beyond :class:`~ci_runner.backends.kubernetes.jobkind.
JobKind`'s questions about its object.

A kind that has its own (every member of :class:`KindTraits`: :class:`~ci_runner.backends.
kubernetes.indexed_job.IndexedJobKind`) is asked; any other gets :class:`LauncherTraits`, the
MPIJob's way: one launcher pod, started once the worker pods are Ready, whose log and exit are
the job's (:func:`traits_of`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ci_runner.backends.kubernetes import events, explain, podstatus, status_lines
from ci_runner.backends.kubernetes.jobkind import JobKind
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import JSON, job_selector
from ci_runner.backends.kubernetes.status_lines import StatusLine
from ci_runner.backends.result import Failure


@runtime_checkable
class KindTraits(Protocol):
    """What the follower and the backend ask of a kind beyond its object."""

    @property
    def noun(self) -> str:
        """How the CI log names the job's object: ``MPIJob``, ``Job``."""

    @property
    def owned(self) -> str:
        """What goes with the job when ci-runner deletes it, as the CI log says it."""

    @property
    def pod_selector(self) -> str:
        """The label selector of the job's pods."""

    @property
    def worker_selector(self) -> str:
        """The label selector of the job's worker pods (:attr:`Role.WORKER`)."""

    @property
    def every_node_logged(self) -> bool:
        """True: every pod that :meth:`waited_on` is followed, each its own log stream (their
        lines carry their ranks); False: the launcher pods alone, one after the other."""

    @property
    def failure_log_bytes(self) -> int:
        """How much of the saved log's end :meth:`refine` reads (0: the sink's tail alone)."""

    def about(self, event: JSON, job_uid: str) -> bool:
        """The Event is about the job (of uid ``job_uid``), its controller's objects or pods."""

    def waited_on(self, pod: JSON) -> bool:
        """A pod that must set up and be Ready for the job to run (counted against
        :meth:`JobKind.workers`)."""

    def set_up(self, pod: JSON) -> bool:
        """A pod that :meth:`waited_on` is past its setup."""

    def setup_done(self, launcher_started: bool, set_up: int, expected: int) -> bool:
        """Setting up is over (its timeout stops): from whether a launcher started and how many
        of the ``expected`` pods are :meth:`set_up`."""

    def setup_failure(self, pod: JSON, launcher_started: bool) -> Failure | None:
        """A pod failing while it sets up, which the job's controller would wait on (or report
        less clearly)."""

    def blocks_success(self, pods: Mapping[str, JSON]) -> bool:
        """A pod's end that will fail the job though the launcher pod succeeded."""

    def refine(
        self, failure: Failure, log_tail: Sequence[str], pods: Mapping[str, JSON]
    ) -> Failure:
        """The failure the cluster told, made precise from the log's last lines (the sink's
        tail, or the saved log's end: :attr:`failure_log_bytes`)."""

    def pending_line(self, role: Role | None, message: str) -> StatusLine:
        """Pods of ``role`` the scheduler cannot place, and its ``message``."""

    def ready_line(self, ready: int, expected: int) -> str:
        """``ready`` of the ``expected`` pods that :meth:`waited_on` are Ready."""

    def started_line(self, pod: str) -> StatusLine | None:
        """The launcher pod's container started (None: nothing to say)."""

    def held_line(
        self, pod: str, container: str, end: JSON, running: Sequence[str], grace: float
    ) -> StatusLine:
        """The launcher's ``container`` ended, but sidecars keep its pod running."""

    def held_failure(
        self, pod: str, container: str, end: JSON, running: Sequence[str]
    ) -> Failure: ...

    def setup_timeout_failure(self, not_ready: JSON | None, seconds: float) -> Failure: ...


@dataclass(frozen=True)
class LauncherTraits:
    """The MPIJob's traits (MPI Operator's pods), by ``kind``'s roles: the launcher starts once
    every worker is Ready (WaitForWorkersReady) and its log alone is followed."""

    kind: JobKind
    noun: str = "MPIJob"
    owned: str = "its pods and its Secret"
    every_node_logged: bool = False
    failure_log_bytes: int = 0  # mpirun's last lines say which rank a signal killed

    @property
    def pod_selector(self) -> str:
        return job_selector(self.kind.name)

    @property
    def worker_selector(self) -> str:
        return job_selector(self.kind.name, Role.WORKER.value)

    def about(self, event: JSON, job_uid: str) -> bool:
        return events.about_job(event, self.kind.name, job_uid)

    def waited_on(self, pod: JSON) -> bool:
        return self.kind.role(pod) is Role.WORKER

    def set_up(self, pod: JSON) -> bool:
        return podstatus.is_ready(pod)

    def setup_done(self, launcher_started: bool, set_up: int, expected: int) -> bool:
        return launcher_started

    def setup_failure(self, pod: JSON, launcher_started: bool) -> Failure | None:
        """A worker failing before the launcher starts: MPI Operator v0.8.2 would wait for it
        for ever."""
        if launcher_started or self.kind.role(pod) is not Role.WORKER:
            return None
        return explain.setup_failure(pod)

    def blocks_success(self, pods: Mapping[str, JSON]) -> bool:
        return False  # mpirun exits 0 only when every rank did

    def refine(
        self, failure: Failure, log_tail: Sequence[str], pods: Mapping[str, JSON]
    ) -> Failure:
        return explain.rank_signal(failure, log_tail, pods)

    def pending_line(self, role: Role | None, message: str) -> StatusLine:
        return status_lines.pending(role, message)

    def ready_line(self, ready: int, expected: int) -> str:
        return status_lines.workers_ready(ready, expected)

    def started_line(self, pod: str) -> StatusLine | None:
        return status_lines.launcher_running(pod)

    def held_line(
        self, pod: str, container: str, end: JSON, running: Sequence[str], grace: float
    ) -> StatusLine:
        return status_lines.held(pod, container, end, running, grace)

    def held_failure(self, pod: str, container: str, end: JSON, running: Sequence[str]) -> Failure:
        return explain.held_failure(pod, container, end, running)

    def setup_timeout_failure(self, not_ready: JSON | None, seconds: float) -> Failure:
        return explain.setup_timeout_failure(not_ready, seconds)


def traits_of(kind: JobKind) -> KindTraits:
    """``kind``'s own traits when it has them all, else the launcher's (:class:`LauncherTraits`)."""
    return kind if isinstance(kind, KindTraits) else LauncherTraits(kind)
