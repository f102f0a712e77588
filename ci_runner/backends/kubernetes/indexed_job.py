"""The batch/v1 Indexed Job as a kind of job (:class:`~ci_runner.backends.kubernetes.jobkind.
JobKind`), ``distributed: torchrun``: no operator and no launcher pod. Each of its pods is a node
running torchrun with the same command; the Job controller labels each with its completion index
(``batch.kubernetes.io/job-completion-index``), which is torchrun's ``--node-rank``.

Node 0 plays the launcher's part: it hosts the rendezvous, its exit code decides while the
Job's conditions have not yet spoken (unless another node failed), and the held-by-sidecars
rule watches it. Every node's log is followed (its lines carry their ranks already). Every node
must set up (its pod started) for setting up to be over. The Job's conditions end it
(:mod:`indexed_explain` says why, naming the node).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ci_runner.backends.kubernetes import explain, indexed_explain, podstatus
from ci_runner.backends.kubernetes.indexed_explain import completion_index, index_of
from ci_runner.backends.kubernetes.jobkind import EventNews, Verdict, job_event_news
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import (
    COMPLETION_INDEX_LABEL,
    JOBS,
    JSON,
    Resource,
    batch_job_selector,
)
from ci_runner.backends.kubernetes.status_lines import LineKey, StatusLine, Topic
from ci_runner.backends.result import Failure, Outcome
from ci_runner.backends.torchrun_failure import LOG_READ_BYTES

# The Job's conditions that end it (k8s.io/api v0.35.4 batch/v1/types.go, JobConditionType):
# SuccessCriteriaMet and FailureTarget come first, Complete and Failed once its pods ended.
SUCCESS_CONDITIONS: Final = ("Complete", "SuccessCriteriaMet")
FAILURE_CONDITIONS: Final = ("Failed", "FailureTarget")


@dataclass(frozen=True)
class IndexedJobKind:
    """One Indexed Job, ``name``; ``followed_container`` is torchrun's container in each pod;
    ``ranks_per_node`` (torchrun's ``--nproc-per-node``; 0: unknown) and ``code_dir`` (the
    checkout the ranks run in) say which node ran a failing rank and where its code raised."""

    name: str
    followed_container: str = "torchrun"
    ranks_per_node: int = 0
    code_dir: str = ""
    noun = "Job"
    owned = "its pods, its Service and its Secret"
    every_node_logged = True
    failure_log_bytes = LOG_READ_BYTES  # the failing rank's traceback and torchrun's reports

    @property
    def resource(self) -> Resource:
        return JOBS

    @property
    def pod_selector(self) -> str:
        return batch_job_selector(self.name)

    @property
    def worker_selector(self) -> str:
        return f"{batch_job_selector(self.name)},{COMPLETION_INDEX_LABEL}!=0"

    def about(self, event: JSON, job_uid: str) -> bool:
        involved = event.get("involvedObject", {})
        name = str(involved.get("name", ""))
        if involved.get("kind") == "Job":
            return name == self.name and involved.get("uid") in (None, "", job_uid)
        return involved.get("kind") == "Pod" and index_of(name, self.name) is not None

    def role(self, pod: JSON) -> Role | None:
        index = completion_index(pod)
        if index is None:
            return None
        return Role.LAUNCHER if index == 0 else Role.WORKER

    def role_of(self, pod_name: str) -> Role:
        return Role.LAUNCHER if index_of(pod_name, self.name) == 0 else Role.WORKER

    def workers(self, job: JSON, default: int) -> int:
        return int(job.get("spec", {}).get("completions") or default)

    def waited_on(self, pod: JSON) -> bool:
        return completion_index(pod) is not None

    def set_up(self, pod: JSON) -> bool:
        return podstatus.container_started(pod)

    def setup_done(self, launcher_started: bool, set_up: int, expected: int) -> bool:
        return set_up >= expected  # each node sets up on its own; torchrun waits for them all

    def setup_failure(self, pod: JSON, launcher_started: bool) -> Failure | None:
        if not self.waited_on(pod) or podstatus.container_started(pod):
            return None
        return indexed_explain.node_setup_failure(pod)

    def blocks_success(self, pods: Mapping[str, JSON]) -> bool:
        """Another node failed: the Job fails (backoffLimitPerIndex 0) though node 0 succeeded."""
        return any(
            self.waited_on(pod) and pod.get("status", {}).get("phase") == "Failed"
            for pod in pods.values()
        )

    def refine(
        self, failure: Failure, log_tail: Sequence[str], pods: Mapping[str, JSON]
    ) -> Failure:
        """A node's torchrun that exited non-zero: its first failing rank, from every node's log
        (its end, :attr:`failure_log_bytes` of it)."""
        return indexed_explain.rank_failure(
            failure, log_tail, pods, self.ranks_per_node, self.code_dir
        )

    def suspended(self, job: JSON) -> bool:
        """``spec.suspend`` (a queue such as Kueue creates the Job suspended, resumes it on
        admission, and suspends it again to preempt it), else its Suspended condition."""
        suspend = job.get("spec", {}).get("suspend")
        if isinstance(suspend, bool):
            return suspend
        return podstatus.condition(job, "Suspended") is not None

    def finished(self, job: JSON) -> bool:
        return any(
            podstatus.condition(job, kind) for kind in (*SUCCESS_CONDITIONS, *FAILURE_CONDITIONS)
        )

    def ended(self, job: JSON, pods: Mapping[str, JSON]) -> Verdict | None:
        if any(podstatus.condition(job, kind) for kind in SUCCESS_CONDITIONS):
            return Verdict(Outcome.SUCCEEDED)
        if any(podstatus.condition(job, kind) for kind in FAILURE_CONDITIONS):
            return Verdict(Outcome.FAILED, indexed_explain.explain_failed_job(job, pods))
        return None

    def event(self, event: JSON) -> EventNews | None:
        return job_event_news(event, indexed_explain.refused, indexed_explain.job_warning)

    def stalled_resume(self, job: JSON, seconds: float) -> Failure | None:
        return None  # the Job controller resumes the Job itself

    def pending_line(self, role: Role | None, message: str) -> StatusLine:
        return indexed_explain.pending_line(message)

    def ready_line(self, ready: int, expected: int) -> str:
        return indexed_explain.ready_line(ready, expected)

    def started_line(self, pod: str) -> StatusLine | None:
        return None  # "nodes ready n/N" says it

    def held_line(
        self, pod: str, container: str, end: JSON, running: Sequence[str], grace: float
    ) -> StatusLine:
        key = LineKey(Topic.HELD, (pod, str(end.get("exitCode")), *running))
        return StatusLine(key, indexed_explain.held_line(pod, container, end, running, grace))

    def held_failure(self, pod: str, container: str, end: JSON, running: Sequence[str]) -> Failure:
        return indexed_explain.held_failure(pod, container, end, running)

    def setup_timeout_failure(self, not_ready: JSON | None, seconds: float) -> Failure:
        return indexed_explain.setup_timeout_failure(not_ready, seconds)

    def queued_line(self, job: JSON) -> str:
        return explain.queued_line(job, self.noun)

    def preempted_line(self, job: JSON) -> str:
        return explain.preempted_line(job, self.noun)

    def resumed_line(self, job: JSON) -> str:
        return explain.resumed_line(job, self.noun)

    def preempted_failure(self, job: JSON) -> Failure:
        return explain.preempted_failure(job, self.noun)

    def deleted_failure(self) -> Failure:
        return explain.deleted_failure(self.name, self.noun)
