"""Whether and how the job has ended, from what the follower knows: pure functions over a
:class:`~ci_runner.backends.kubernetes.jobstate.JobState` and the job's kind.

The job's conditions decide when they say it ended; else a failure decided on our side, the job
deleted, or the followed launcher pod: its Succeeded (mpirun exited 0) is the job's success,
which MPI Operator writes only after the Job controller has seen it (its pod updates are batched
for a second: ``syncJobBatchPeriod`` in pkg/controller/job/job_controller.go), about 1.1 s later;
a launcher pod that failed may be retried (the Job's backoffLimit), so failures wait for the
job's condition.
"""

from __future__ import annotations

from ci_runner.backends.kubernetes import podstatus
from ci_runner.backends.kubernetes.jobkind import JobKind, Verdict
from ci_runner.backends.kubernetes.jobstate import JobState
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.traits import KindTraits
from ci_runner.backends.result import Outcome


def verdict(
    state: JobState, kind: JobKind, traits: KindTraits, launcher_decides: bool
) -> Verdict | None:
    """How the job ended, or None while it runs. ``launcher_decides``: the launcher pod's
    Succeeded ends the job, without waiting for the job's condition."""
    job = state.job or {}
    if kind.finished(job):
        return kind.ended(job, {**state.replaced, **state.last_seen})
    if state.failure is not None:
        return Verdict(Outcome.FAILED, state.failure)
    if state.deleted:
        return Verdict(Outcome.CANCELLED, kind.deleted_failure())
    if state.held_success:
        return Verdict(Outcome.SUCCEEDED)  # its sidecars would keep the job running
    if launcher_decides and launcher_succeeded(state) and not traits.blocks_success(state.pods):
        return Verdict(Outcome.SUCCEEDED)
    return None


def launcher_succeeded(state: JobState) -> bool:
    """The launcher pod being followed ended Succeeded, and no queue suspended the job."""
    launcher = state.launcher_to_follow()
    if launcher is None or state.suspended:
        return False
    pod = state.pods.get(launcher) or state.last_seen.get(launcher) or {}
    return bool(pod.get("status", {}).get("phase") == "Succeeded")


def steady(state: JobState, kind: JobKind, traits: KindTraits) -> bool:
    """The job runs as it should: its launcher's container runs and every worker is Ready.

    Only a pod change ends this: the job's terminal conditions follow the launcher pod ending or
    being killed, and deleting or suspending the job deletes its pods.
    """
    launcher = state.launcher_to_follow()
    if state.job is None or kind.finished(state.job) or launcher not in state.pods:
        return False
    workers = 0
    for name, pod in state.pods.items():
        workers += traits.waited_on(pod)  # an Indexed Job's node 0 is its launcher too
        if name == launcher:
            fine = podstatus.is_running(pod)
        elif kind.role(pod) is Role.WORKER:
            fine = podstatus.is_running(pod) and podstatus.is_ready(pod)
        else:  # an earlier launcher pod: it must have ended (the Job made a new one)
            fine = podstatus.has_ended(pod)
        if not fine:
            return False
    return workers == state.workers


def running_workers(state: JobState, kind: JobKind) -> list[str]:
    """Worker pods still pending or running."""
    return sorted(
        name
        for name, pod in state.pods.items()
        if kind.role(pod) is Role.WORKER and not podstatus.has_ended(pod)
    )
