"""The job as the CI log tells it: a state machine over MPIJob, Pod and Event updates.

It prints each phase once (submitted is printed by the backend; here: pending and why, workers
ready n/N, launcher running) and decides when the job is over — from the MPIJob's conditions,
never from counters, which count every launcher pod that ever failed (updateMPIJobStatus in
pkg/controller/mpi_job_controller.go, kubeflow/mpi-operator v0.8.2) — or when waiting longer is
pointless. One pod decides alone: the launcher's pod Succeeded (mpirun exited 0) is the job's
success, which the operator writes only after the Job controller has seen it (its pod updates
are batched for a second: ``syncJobBatchPeriod`` in pkg/controller/job/job_controller.go), about
1.1 s later; a launcher pod that failed may be retried (the Job's backoffLimit), so failures
wait for the MPIJob's condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ci_runner.backends.kubernetes import events, explain, podstatus
from ci_runner.backends.kubernetes.resources import EVENTS, JSON, MPIJOBS, PODS
from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.backends.result import Failure, Outcome
from ci_runner.config.types import KubernetesOptions, OnPreemption

# How long the kubelet may keep failing to pull an image (ErrImagePull, ImagePullBackOff: it
# retries with back-off, and registries have bad minutes) before the job fails.
IMAGE_PULL_GRACE_SECONDS: Final = 300.0
# How long the launcher's pod may go on after its launcher container ended because other
# containers still run (sidecars injected as plain containers never stop) before the launcher's
# exit code decides the job; a pod that ends by itself does so within seconds.
SIDECAR_GRACE_SECONDS: Final = 60.0


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome
    failure: Failure | None = None


class JobTracker:
    """What we know of one MPIJob; :meth:`apply` returns the status lines a change deserves."""

    def __init__(
        self,
        mpijob_name: str,
        workers: int,
        unschedulable_timeout: float,
        setup_timeout: float = KubernetesOptions.setup_timeout,
        on_preemption: OnPreemption = KubernetesOptions.on_preemption,
        launcher_decides: bool = True,
        launcher_container: str = "launcher",
    ) -> None:
        """``launcher_decides``: the launcher pod's Succeeded ends the job; False waits for the
        operator's condition (a kept job: the workers ci-runner stops before the operator has
        seen the success would be made again). ``launcher_container``: mpirun's container in
        the launcher pod."""
        self.mpijob_name = mpijob_name
        self.launcher_container = launcher_container
        self.launcher_decides = launcher_decides
        self.workers = workers
        self.unschedulable_timeout = unschedulable_timeout
        self.setup_timeout = setup_timeout
        self.on_preemption = on_preemption
        # Since when the pods are placed and setting up (image pulls, code fetch, pip): None
        # until the first update, reset while a pod waits for a node.
        self._setup_since: float | None = None
        self._pull_since: dict[str, float] = {}  # pod -> first seen failing to pull
        # pod -> its last ErrImagePull: the registry's own words, which ImagePullBackOff's message
        # in between the kubelet's tries gives only after 'Back-off pulling image "X":
        # ErrImagePull:' (kubelet v1.35), or from older kubelets not at all
        self._pull_errors: dict[str, Failure] = {}
        self.mpijob: JSON | None = None
        self.pods: dict[str, JSON] = {}  # pods that exist now
        self.last_seen: dict[str, JSON] = {}  # every pod's last state, deleted ones too
        # The last state of pods a new pod of the same name replaced (by uid): the operator
        # recreates an evicted worker at once, and the evicted one says why the job failed.
        self._replaced: dict[str, JSON] = {}
        # FailedScheduling Events listed before the pods were: judged once the pods are known
        # (a retried CI job's listing replays those of pods that have a node by now).
        self._pods_listed = False
        self._early_scheduling: list[JSON] = []
        self._said: set[str] = set()
        self._ready_said = 0
        self._launchers: list[str] = []  # launcher pods whose container started, oldest first
        # How many of them started before the last resume: a resumed job sets up again, and
        # the operator must start a new launcher (the old ones were deleted with the job's pods).
        self._resumed_after = 0
        self._unschedulable_since: float | None = None
        self._unschedulable: tuple[str, str] | None = None  # (pod, scheduler message)
        self._failure: Verdict | None = None  # decided on our side: the cluster would wait on
        self._deleted = False
        self._suspended = False  # by a queue: before the start (queued) or after (preempted)
        self._preempted = False  # suspended after it started, at least once
        # The followed launcher pod whose container ended while sidecars keep it running, and
        # since when; then whether its exit code 0 decided the job.
        self._held: tuple[str, float] | None = None
        self._held_success = False

    # -- updates -----------------------------------------------------------------------------

    def apply(self, update: WatchUpdate, now: float) -> list[str]:
        """Take one update; the new status lines (without the ``[ci-runner]`` prefix)."""
        if update.resource == MPIJOBS:
            return self._apply_mpijob(update, now)
        if update.resource == PODS:
            return self._apply_pods(update, now)
        if update.resource == EVENTS:
            return [line for event in update.objects for line in self._apply_event(event, now)]
        return []

    def _apply_mpijob(self, update: WatchUpdate, now: float) -> list[str]:
        mine = [o for o in update.objects if o.get("metadata", {}).get("name") == self.mpijob_name]
        if update.type == "DELETED" or (update.type == SYNC and not mine):
            self._deleted = self.mpijob is not None
            return []
        if not mine:
            return []
        self.mpijob = mine[-1]
        replicas = self.mpijob.get("spec", {}).get("mpiReplicaSpecs", {}).get("Worker", {})
        self.workers = int(replicas.get("replicas", self.workers))
        return self._suspension_lines(self.mpijob, now)

    def _suspension_lines(self, mpijob: JSON, now: float) -> list[str]:
        """A queue (Kueue, a preemption) suspends the job: no setup timer runs meanwhile."""
        suspended = podstatus.is_suspended(mpijob)
        if suspended == self._suspended:
            return []
        self._suspended = suspended
        if not suspended:
            self._restart(now)
            return [explain.resumed_line(mpijob)]
        self._setup_since = None
        started = (
            self._preempted
            or bool(self._launchers)
            or (self.workers > 0 and self._ready_said >= self.workers)
        )
        if not started:
            return [explain.queued_line(mpijob)]
        self._preempted = True
        if self.on_preemption == "fail":
            if self._failure is None:
                self._failure = Verdict(Outcome.FAILED, explain.preempted_failure(mpijob))
            return []
        return [explain.preempted_line(mpijob)]

    def _restart(self, now: float) -> None:
        """The queue admitted the job: it sets up from the start, so what the tracker kept of the
        pods before a preemption (their launchers, progress, pull timers, lines said) goes."""
        self._setup_since = now  # setting up starts once the queue admits the job
        self._resumed_after = len(self._launchers)
        self._ready_said = 0
        self._said.clear()
        self._pull_since.clear()
        self._pull_errors.clear()

    def _apply_pods(self, update: WatchUpdate, now: float) -> list[str]:
        if update.type == SYNC:
            self.pods = {}
        for pod in update.objects:
            name = podstatus.pod_name(pod)
            earlier = self.last_seen.get(name, {}).get("metadata", {}).get("uid")
            if earlier and earlier != pod.get("metadata", {}).get("uid"):
                self._replaced[str(earlier)] = self.last_seen[name]
            self.last_seen[name] = pod
            if update.type == "DELETED":
                self.pods.pop(name, None)
            else:
                self.pods[name] = pod
        pods = sorted(self.pods.values(), key=podstatus.pod_name)
        if self._setup_since is None:
            self._setup_since = now
        lines = []
        for pod in pods:
            lines += self._check_image_pull(pod, now)
            self._check_setup(pod)
        lines += [line for pod in pods for line in self._pending_lines(pod)]
        lines += self._ready_lines()
        lines += [line for pod in pods for line in self._launcher_lines(pod)]
        lines += self._held_lines(now)
        self._track_unschedulable(now)
        if update.type == SYNC and not self._pods_listed:
            self._pods_listed = True
            early, self._early_scheduling = self._early_scheduling, []
            lines += [line for event in early for line in self._apply_event(event, now)]
        return lines

    def _check_image_pull(self, pod: JSON, now: float) -> list[str]:
        """A bad image name fails now; other pull errors the kubelet retries: give it time."""
        name = podstatus.pod_name(pod)
        pull = explain.image_pull_failure(pod)
        if pull is None:
            self._pull_since.pop(name, None)
            self._pull_errors.pop(name, None)
            return []
        reason = podstatus.image_pull_reason(pod)
        if reason == "ErrImagePull":
            self._pull_errors[name] = pull
        if reason in podstatus.PERMANENT_PULL_REASONS:
            if self._failure is None:
                self._failure = Verdict(Outcome.FAILED, pull)
            return []
        if name in self._pull_since:
            return []  # said once per pod: ErrImagePull and ImagePullBackOff alternate
        self._pull_since[name] = now
        return [
            f"pod {name} cannot pull its image yet ({reason}): the kubelet retries; "
            f"giving up after {round(IMAGE_PULL_GRACE_SECONDS)}s"
        ]

    def _check_setup(self, pod: JSON) -> None:
        """A worker failing before the launcher starts: v0.8.2 would wait for it for ever."""
        if self._current_launchers() or self._suspended or podstatus.role(pod) != "worker":
            return
        if self._failure is not None:
            return
        failure = explain.setup_failure(pod)
        if failure is not None:
            self._failure = Verdict(Outcome.FAILED, failure)

    def _pending_lines(self, pod: JSON) -> list[str]:
        role = podstatus.role(pod)
        message = podstatus.unschedulable_message(pod)
        if not message:
            return []
        return self._once(
            f"workers pending: {message}" if role == "worker" else f"{role} pending: {message}"
        )

    def _launcher_lines(self, pod: JSON) -> list[str]:
        name = podstatus.pod_name(pod)
        started = podstatus.container_started(pod)
        if podstatus.role(pod) != "launcher" or not started or name in self._launchers:
            return []
        self._launchers.append(name)
        return self._once(f"launcher running (pod {name})")

    def _held_by_sidecars(self) -> tuple[str, JSON, list[str]] | None:
        """The followed launcher pod, how its container ended and the sidecars that keep the pod
        running."""
        launcher = self.launcher_to_follow()
        pod = self.pods.get(launcher or "")
        held = None if pod is None else podstatus.held_by_sidecars(pod, self.launcher_container)
        return None if launcher is None or held is None else (launcher, *held)

    def _held_lines(self, now: float) -> list[str]:
        held = self._held_by_sidecars()
        if held is None:
            self._held = None
            return []
        launcher, end, running = held
        if self._held is None or self._held[0] != launcher:
            self._held = (launcher, now)
        container = self.launcher_container
        grace = SIDECAR_GRACE_SECONDS
        return self._once(explain.held_line(launcher, container, end, running, grace))

    def _ready_lines(self) -> list[str]:
        ready = sum(
            1
            for pod in self.pods.values()
            if podstatus.role(pod) == "worker" and podstatus.is_ready(pod)
        )
        if ready <= self._ready_said:
            return []  # progress only: a worker that stops shows up as the failure's reason
        self._ready_said = ready
        return [f"workers ready {ready}/{self.workers}"]

    def _apply_event(self, event: JSON, now: float) -> list[str]:
        involved = event.get("involvedObject", {})
        reason = event.get("reason")
        if reason == "ValidationError" and involved.get("kind") == "MPIJob":
            failure = explain.validation_failure([event])
            if failure and self._failure is None:
                self._failure = Verdict(Outcome.FAILED, failure)
            return []
        if reason == "MPIJobFailed" and involved.get("kind") == "MPIJob":
            refused = explain.operator_failure(event)
            if refused and self._failure is None:
                self._failure = Verdict(Outcome.FAILED, refused)
            return []
        if involved.get("kind") == "Job":
            # Only the launcher Job's Events reach us (the backend's filter).
            refused = explain.launcher_job_failure(event)
            if refused is not None:
                if self._failure is None:
                    self._failure = Verdict(Outcome.FAILED, refused)
                return []
            warning = explain.launcher_job_warning(event)
            return self._once(warning) if warning else []
        if reason == "FailedScheduling" and involved.get("kind") == "Pod":
            if not self._pods_listed:
                self._early_scheduling.append(event)
                return []
            name = str(involved.get("name", ""))
            message = str(event.get("message", ""))
            if events.stale_scheduling_event(event, self.pods.get(name), self.mpijob):
                return []
            if self._unschedulable_since is None:
                # The Event may come before the pod's status says so: the clock starts now.
                self._unschedulable_since, self._unschedulable = now, (name, message)
            who = "launcher" if name.startswith(f"{self.mpijob_name}-launcher") else "workers"
            return self._once(f"{who} pending: {message}")
        return []

    def _once(self, line: str) -> list[str]:
        if line in self._said:
            return []
        self._said.add(line)
        return [line]

    # -- time --------------------------------------------------------------------------------

    def _track_unschedulable(self, now: float) -> None:
        stuck = [
            (podstatus.pod_name(pod), message)
            for pod in sorted(self.pods.values(), key=podstatus.pod_name)
            if (message := podstatus.unschedulable_message(pod))
        ]
        if not stuck:
            if self._unschedulable_since is not None:
                self._setup_since = now  # setting up starts once every pod has a node
            self._unschedulable_since, self._unschedulable = None, None
            return
        self._unschedulable = stuck[0]
        if self._unschedulable_since is None:
            self._unschedulable_since = now

    def check_time(self, now: float) -> None:
        """Fail the job when pods have been unschedulable, failing to pull their image or
        setting up for longer than allowed."""
        if self._failure is None:
            self._check_pull_time(now)
        if self._failure is None:
            self._check_setup_time(now)
        if self._failure is None:
            self._check_held_time(now)
        since, stuck = self._unschedulable_since, self._unschedulable
        if since is None or stuck is None or self._failure is not None:
            return
        if now - since >= self.unschedulable_timeout:
            pod, message = stuck
            failure = explain.unschedulable_failure(pod, now - since, message)
            self._failure = Verdict(Outcome.FAILED, failure)

    def _check_pull_time(self, now: float) -> None:
        for name, since in sorted(self._pull_since.items()):
            pull = explain.image_pull_failure(self.pods.get(name, {}))
            if pull is not None and now - since >= IMAGE_PULL_GRACE_SECONDS:
                self._failure = Verdict(Outcome.FAILED, self._pull_errors.get(name, pull))
                return

    def _check_held_time(self, now: float) -> None:
        held = self._held_by_sidecars()
        if self._held is None or held is None or now - self._held[1] < SIDECAR_GRACE_SECONDS:
            return
        launcher, end, running = held
        if end.get("exitCode") == 0:
            self._held_success = True
        else:
            failure = explain.held_failure(launcher, self.launcher_container, end, running)
            self._failure = Verdict(Outcome.FAILED, failure)

    def _check_setup_time(self, now: float) -> None:
        since = self._setup_since
        if since is None or self._current_launchers() or self._unschedulable_since is not None:
            return
        if self._suspended:
            return
        if now - since < self.setup_timeout:
            return
        workers = sorted(
            (p for p in self.pods.values() if podstatus.role(p) == "worker"), key=podstatus.pod_name
        )
        waiting = [p for p in workers if not podstatus.is_ready(p)]
        mpijob = self.mpijob or {}
        if (
            self._preempted
            and not waiting
            and len(workers) == self.workers
            and podstatus.resume_stalled(mpijob)
        ):
            failure = explain.resume_stall_failure(mpijob, now - since)
        else:
            failure = explain.setup_timeout_failure(waiting[0] if waiting else None, now - since)
        self._failure = Verdict(Outcome.FAILED, failure)

    # -- the outcome -------------------------------------------------------------------------

    @property
    def decided_here(self) -> bool:
        """True when we are giving up on a job the cluster would keep waiting on."""
        return self._failure is not None and not self.finished_on_cluster

    @property
    def finished_on_cluster(self) -> bool:
        job = self.mpijob or {}
        return bool(podstatus.condition(job, "Succeeded") or podstatus.condition(job, "Failed"))

    def verdict(self) -> Verdict | None:
        """How the job ended, or None while it runs."""
        job = self.mpijob or {}
        if podstatus.condition(job, "Succeeded"):
            return Verdict(Outcome.SUCCEEDED)
        if podstatus.condition(job, "Failed"):
            pods = {**self._replaced, **self.last_seen}
            return Verdict(Outcome.FAILED, explain.explain_failed_job(job, pods))
        if self._failure is not None:
            return self._failure
        if self._deleted:
            return Verdict(Outcome.CANCELLED, explain.deleted_failure(self.mpijob_name))
        if self._held_success:
            return Verdict(Outcome.SUCCEEDED)  # its sidecars would keep the job running
        if self.launcher_decides and self._launcher_succeeded():
            return Verdict(Outcome.SUCCEEDED)
        return None

    def _launcher_succeeded(self) -> bool:
        """The launcher pod being followed ended Succeeded, and no queue suspended the job."""
        launcher = self.launcher_to_follow()
        if launcher is None or self._suspended:
            return False
        pod = self.pods.get(launcher) or self.last_seen.get(launcher) or {}
        return bool(pod.get("status", {}).get("phase") == "Succeeded")

    @property
    def steady(self) -> bool:
        """The job runs as it should: its launcher's container runs and every worker is Ready.

        Only a pod change ends this: the operator's terminal conditions follow the launcher pod
        ending or being killed, and deleting or suspending the job deletes its pods.
        """
        launcher = self.launcher_to_follow()
        if self.mpijob is None or self.finished_on_cluster or launcher not in self.pods:
            return False
        workers = 0
        for name, pod in self.pods.items():
            if name == launcher:
                fine = podstatus.is_running(pod)
            elif podstatus.role(pod) == "worker":
                workers += 1
                fine = podstatus.is_running(pod) and podstatus.is_ready(pod)
            else:  # an earlier launcher pod: it must have ended (the Job made a new one)
                fine = podstatus.has_ended(pod)
            if not fine:
                return False
        return workers == self.workers

    def launcher_to_follow(self) -> str | None:
        """The newest launcher pod whose container has started (since the last resume)."""
        current = self._current_launchers()
        return current[-1] if current else None

    def _current_launchers(self) -> list[str]:
        """The launcher pods whose container started since the last resume, oldest first."""
        return self._launchers[self._resumed_after :]

    def running_workers(self) -> list[str]:
        """Worker pods still pending or running."""
        return sorted(
            name
            for name, pod in self.pods.items()
            if podstatus.role(pod) == "worker" and not podstatus.has_ended(pod)
        )
