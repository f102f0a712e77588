"""The MPIJob as a kind of job (:class:`~ci_runner.backends.kubernetes.jobkind.JobKind`): MPI
Operator's labels give a pod's role, its launcher pod's log is the job's, and the MPIJob's
conditions end it — never its counters, which count every launcher pod that ever failed
(updateMPIJobStatus in pkg/controller/mpi_job_controller.go, kubeflow/mpi-operator v0.8.2).
Only the launcher Job's Events reach the follower (:mod:`events`): its FailedCreate is a refused
launcher pod; the operator's ValidationError and MPIJobFailed are a job that will not start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ci_runner.backends.kubernetes import explain, podstatus
from ci_runner.backends.kubernetes.jobkind import EventNews, Verdict, job_event_news
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import JSON, MPIJOBS, Resource
from ci_runner.backends.result import Failure, Outcome


@dataclass(frozen=True)
class MpiJobKind:
    """One MPIJob, ``name``; ``followed_container`` is mpirun's container in the launcher pod."""

    name: str
    followed_container: str = "launcher"

    @property
    def resource(self) -> Resource:
        return MPIJOBS

    def role(self, pod: JSON) -> Role | None:
        return podstatus.role(pod)

    def role_of(self, pod_name: str) -> Role:
        return Role.LAUNCHER if pod_name.startswith(f"{self.name}-launcher") else Role.WORKER

    def workers(self, job: JSON, default: int) -> int:
        replicas = job.get("spec", {}).get("mpiReplicaSpecs", {}).get("Worker", {})
        return int(replicas.get("replicas", default))

    def suspended(self, job: JSON) -> bool:
        return podstatus.is_suspended(job)

    def finished(self, job: JSON) -> bool:
        return bool(podstatus.condition(job, "Succeeded") or podstatus.condition(job, "Failed"))

    def ended(self, job: JSON, pods: Mapping[str, JSON]) -> Verdict | None:
        if podstatus.condition(job, "Succeeded"):
            return Verdict(Outcome.SUCCEEDED)
        if podstatus.condition(job, "Failed"):
            return Verdict(Outcome.FAILED, explain.explain_failed_job(job, pods))
        return None

    def event(self, event: JSON) -> EventNews | None:
        involved = event.get("involvedObject", {})
        reason = event.get("reason")
        if reason == "ValidationError" and involved.get("kind") == "MPIJob":
            return EventNews(explain.validation_failure([event]))
        if reason == "MPIJobFailed" and involved.get("kind") == "MPIJob":
            return EventNews(explain.operator_failure(event))
        return job_event_news(event, explain.launcher_job_failure, explain.launcher_job_warning)

    def stalled_resume(self, job: JSON, seconds: float) -> Failure | None:
        if not podstatus.resume_stalled(job):
            return None
        return explain.resume_stall_failure(job, seconds)

    def queued_line(self, job: JSON) -> str:
        return explain.queued_line(job)

    def preempted_line(self, job: JSON) -> str:
        return explain.preempted_line(job)

    def resumed_line(self, job: JSON) -> str:
        return explain.resumed_line(job)

    def preempted_failure(self, job: JSON) -> Failure:
        return explain.preempted_failure(job)

    def deleted_failure(self) -> Failure:
        return explain.deleted_failure(self.name)
