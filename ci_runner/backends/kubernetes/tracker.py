"""The job as the CI log tells it: a state machine over the job's object, Pod and Event updates.

It prints each phase once, in its kind's words (submitted is printed by the backend; here:
pending and why, workers ready n/N, launcher running) and decides when the job is over
(:mod:`ending`): from the job's conditions, as its
:class:`~ci_runner.backends.kubernetes.jobkind.JobKind` reads them (an MPIJob's never from its
counters), from the followed launcher pod, or when waiting longer is pointless
(:mod:`timeouts`).

What it knows is a :class:`~ci_runner.backends.kubernetes.jobstate.JobState`; what it says is
:mod:`status_lines`', each line said once by its identity, not its wording.
"""

from __future__ import annotations

from ci_runner.backends.kubernetes import ending, events, kueue, podstatus
from ci_runner.backends.kubernetes.jobkind import JobKind, Verdict
from ci_runner.backends.kubernetes.jobstate import JobState
from ci_runner.backends.kubernetes.kueue import QueueInfo
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.resources import EVENTS, JSON, PODS, WORKLOADS
from ci_runner.backends.kubernetes.status_lines import Said
from ci_runner.backends.kubernetes.timeouts import (
    SIDECAR_GRACE_SECONDS,
    Timeouts,
    track_unschedulable,
    watch_image_pull,
)
from ci_runner.backends.kubernetes.traits import traits_of
from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.config.types import KubernetesOptions, OnPreemption


class JobTracker:
    """What we know of one job; :meth:`apply` returns the status lines a change deserves."""

    def __init__(
        self,
        kind: JobKind,
        workers: int,
        unschedulable_timeout: float,
        setup_timeout: float = KubernetesOptions.setup_timeout,
        on_preemption: OnPreemption = KubernetesOptions.on_preemption,
        launcher_decides: bool = True,
        queue: QueueInfo | None = None,
    ) -> None:
        """``launcher_decides``: the launcher pod's Succeeded ends the job; False waits for the
        job's condition (a kept job: the workers ci-runner stops before the operator has seen
        the success would be made again). ``queue``: Kueue's LocalQueue the job waits in."""
        self.kind = kind
        self.queue = queue
        self.traits = traits_of(kind)
        self.launcher_decides = launcher_decides
        self.on_preemption = on_preemption
        self.timeouts = Timeouts(unschedulable_timeout, setup_timeout)
        self.state = JobState(workers)
        self.said = Said()

    @property
    def last_seen(self) -> dict[str, JSON]:
        """Every pod's last state, deleted ones too."""
        return self.state.last_seen

    # -- updates -----------------------------------------------------------------------------

    def apply(self, update: WatchUpdate, now: float) -> list[str]:
        """Take one update; the new status lines (without the ``[ci-runner]`` prefix)."""
        if update.resource == self.kind.resource:
            return self._apply_job(update, now)
        if update.resource == PODS:
            return self._apply_pods(update, now)
        if update.resource == EVENTS:
            return [line for event in update.objects for line in self._apply_event(event, now)]
        if update.resource == WORKLOADS:
            return self._apply_workload(update, now)
        return []

    def _apply_job(self, update: WatchUpdate, now: float) -> list[str]:
        state = self.state
        mine = [o for o in update.objects if podstatus.pod_name(o) == self.kind.name]
        if update.type == "DELETED" or (update.type == SYNC and not mine):
            state.deleted = state.job is not None
            return []
        if not mine:
            return []
        state.job = mine[-1]
        state.workers = self.kind.workers(state.job, state.workers)
        return self._suspension_lines(state.job, now)

    def _suspension_lines(self, job: JSON, now: float) -> list[str]:
        """A queue (Kueue, a preemption) suspends the job: no setup timer runs meanwhile."""
        state = self.state
        suspended = self.kind.suspended(job)
        if suspended == state.suspended:
            return []
        state.suspended = suspended
        if not suspended:
            state.restart(now)
            self.said.forget()
            return [self.kind.resumed_line(job)]
        state.setup_since = None
        state.queued_since = now
        started = (
            state.preempted
            or bool(state.launchers)
            or (state.workers > 0 and state.ready_said >= state.workers)
        )
        if not started:
            # Kueue's Workload says where the job waits and why, when ci-runner may read it.
            seen = self.queue is not None and self.queue.visible
            return [] if seen else [self.kind.queued_line(job)]
        state.preempted = True
        state.admitted_said = False  # a readmission is said as the admission was
        if self.on_preemption == "fail":
            state.fail(self.kind.preempted_failure(job))
            return []
        return [self.kind.preempted_line(job)]

    def _apply_workload(self, update: WatchUpdate, now: float) -> list[str]:
        """Kueue's Workload of the job: why it waits, its admission, an eviction."""
        queue, state = self.queue, self.state
        if queue is None or update.type == "DELETED" or not update.objects:
            return []
        view = kueue.read_workload(update.objects[-1])
        state.workload = view
        waited = 0.0 if state.queued_since is None else now - state.queued_since
        lines = []
        eviction = view.eviction
        if eviction is not None and eviction.since != state.eviction_said:
            # Kept across resumes (unlike Said): the condition may outlive the readmission.
            state.eviction_said = eviction.since
            lines.append(kueue.eviction_line(view, eviction))
        if view.cluster_queue is not None:
            # Evicted, Kueue takes the quota back: the admission it still shows is over.
            if eviction is None and not state.admitted_said:
                state.admitted_said = True
                lines.append(kueue.admitted_line(queue, view, waited))
            return lines
        if not state.suspended or state.queued_since is None:
            return lines
        never = kueue.never_admitted(view)
        if never is not None:
            state.fail(never)
            return lines
        if view.pending_message is not None:
            line = kueue.queued_line(queue, view.pending_reason, view.pending_message, waited)
            lines += self.said.once(line)
        return lines

    @property
    def waiting_in_queue(self) -> bool:
        """Kueue keeps the job waiting: its Workload has no quota yet (or, when ci-runner may
        not read it, the job is suspended)."""
        if self.queue is None or self.queued_since is None:
            return False
        if not self.queue.visible:
            return True
        view = self.state.workload
        return view is not None and view.cluster_queue is None and view.pending_reason is not None

    @property
    def queued_since(self) -> float | None:
        """Since when (monotonic) a queue has kept the job suspended; None while it may run."""
        return self.state.queued_since if self.state.suspended else None

    def _apply_pods(self, update: WatchUpdate, now: float) -> list[str]:
        state = self.state
        if update.type == SYNC:
            state.pods = {}
        state.take_pods(update.objects, deleted=update.type == "DELETED")
        pods = sorted(state.pods.values(), key=podstatus.pod_name)
        if state.setup_since is None:
            state.setup_since = now
        lines = []
        for pod in pods:
            lines += watch_image_pull(state, pod, now)
            self._check_setup(pod)
        lines += [line for pod in pods for line in self._pending_lines(pod)]
        lines += self._ready_lines()
        lines += [line for pod in pods for line in self._launcher_lines(pod)]
        lines += self._held_lines(now)
        track_unschedulable(state, now)
        if update.type == SYNC and not state.pods_listed:
            state.pods_listed = True
            early, state.early_scheduling = state.early_scheduling, []
            lines += [line for event in early for line in self._apply_event(event, now)]
        return lines

    def _check_setup(self, pod: JSON) -> None:
        """A pod failing while it sets up, which the job's controller would wait on (MPI
        Operator v0.8.2 waits for a worker for ever)."""
        state = self.state
        if state.suspended or state.failure is not None:
            return
        state.fail(self.traits.setup_failure(pod, bool(state.current_launchers())))

    def _pending_lines(self, pod: JSON) -> list[str]:
        message = podstatus.unschedulable_message(pod)
        if not message:
            return []
        return self.said.once(self.traits.pending_line(self.kind.role(pod), message))

    def _launcher_lines(self, pod: JSON) -> list[str]:
        name = podstatus.pod_name(pod)
        started = podstatus.container_started(pod)
        logged = self.state.logged
        if started and self.traits.every_node_logged and self.traits.waited_on(pod):
            logged += [] if name in logged else [name]
        launchers = self.state.launchers
        if self.kind.role(pod) is not Role.LAUNCHER or not started or name in launchers:
            return []
        launchers.append(name)
        line = self.traits.started_line(name)
        return self.said.once(line) if line else []

    def _held_lines(self, now: float) -> list[str]:
        state = self.state
        container = self.kind.followed_container
        held = state.held_by_sidecars(container)
        if held is None:
            state.held = None
            return []
        launcher, end, running = held
        if state.held is None or state.held[0] != launcher:
            state.held = (launcher, now)
        grace = SIDECAR_GRACE_SECONDS
        return self.said.once(self.traits.held_line(launcher, container, end, running, grace))

    def _ready_lines(self) -> list[str]:
        state = self.state
        ready = sum(
            1
            for pod in state.pods.values()
            if self.traits.waited_on(pod) and podstatus.is_ready(pod)
        )
        if ready <= state.ready_said:
            return []  # progress only: a worker that stops shows up as the failure's reason
        state.ready_said = ready
        return [self.traits.ready_line(ready, state.workers)]

    def _apply_event(self, event: JSON, now: float) -> list[str]:
        news = self.kind.event(event)
        if news is not None:
            self.state.fail(news.failure)
            return self.said.once(news.line) if news.line else []
        involved = event.get("involvedObject", {})
        if event.get("reason") != "FailedScheduling" or involved.get("kind") != "Pod":
            return []
        state = self.state
        if not state.pods_listed:
            state.early_scheduling.append(event)
            return []
        name = str(involved.get("name", ""))
        message = str(event.get("message", ""))
        if events.stale_scheduling_event(event, state.pods.get(name), state.job):
            return []
        if state.unschedulable_since is None:
            # The Event may come before the pod's status says so: the clock starts now.
            state.unschedulable_since, state.unschedulable = now, (name, message)
        return self.said.once(self.traits.pending_line(self.kind.role_of(name), message))

    def check_time(self, now: float) -> None:
        """Fail the job when pods have been unschedulable, failing to pull their image or
        setting up for longer than allowed, or it waited in Kueue's queue longer than allowed."""
        self.timeouts.check(self.state, self.kind, self.traits, now)
        queue, since = self.queue, self.queued_since
        if queue is None or queue.timeout is None or since is None or now - since < queue.timeout:
            return
        workload, waited = self.state.workload, now - since
        self.state.fail(kueue.queue_timeout_failure(queue, workload, waited, queue.timeout))

    # -- the outcome (:mod:`ending`) ---------------------------------------------------------

    @property
    def decided_here(self) -> bool:
        """True when we are giving up on a job the cluster would keep waiting on."""
        return self.state.failure is not None and not self.finished_on_cluster

    @property
    def finished_on_cluster(self) -> bool:
        return self.kind.finished(self.state.job or {})

    def verdict(self) -> Verdict | None:
        """How the job ended, or None while it runs."""
        return ending.verdict(self.state, self.kind, self.traits, self.launcher_decides)

    @property
    def steady(self) -> bool:
        """The job runs as it should: its launcher's container runs and every worker is Ready."""
        return ending.steady(self.state, self.kind, self.traits)

    def launcher_to_follow(self) -> str | None:
        """The newest launcher pod whose container has started (since the last resume)."""
        return self.state.launcher_to_follow()

    def logs_to_follow(self) -> list[str]:
        """The pods whose logs are the job's: the launcher to follow, or (a kind whose every
        node is logged) every node pod whose container has started, in the order they did."""
        if self.traits.every_node_logged:
            return list(self.state.logged)
        launcher = self.state.launcher_to_follow()
        return [] if launcher is None else [launcher]

    def running_workers(self) -> list[str]:
        """Worker pods still pending or running."""
        return ending.running_workers(self.state, self.kind)
