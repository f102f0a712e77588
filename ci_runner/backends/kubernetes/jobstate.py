"""What the follower knows of one job: its object and pods as last seen, what it has decided,
and since when each clock runs. Plain data; :mod:`tracker` and :mod:`timeouts` change it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ci_runner.backends.kubernetes import podstatus
from ci_runner.backends.kubernetes.kueue import WorkloadView
from ci_runner.backends.kubernetes.resources import JSON
from ci_runner.backends.result import Failure


@dataclass
class JobState:
    workers: int  # worker pods the job asks for (its spec's, once seen)
    job: JSON | None = None  # the job's object as last seen
    pods: dict[str, JSON] = field(default_factory=dict)  # pods that exist now
    last_seen: dict[str, JSON] = field(default_factory=dict)  # every pod's, deleted ones too
    # The last state of pods a new pod of the same name replaced (by uid): the operator
    # recreates an evicted worker at once, and the evicted one says why the job failed.
    replaced: dict[str, JSON] = field(default_factory=dict)
    # FailedScheduling Events listed before the pods were: judged once the pods are known
    # (a retried CI job's listing replays those of pods that have a node by now).
    pods_listed: bool = False
    early_scheduling: list[JSON] = field(default_factory=list)
    ready_said: int = 0  # the most workers said Ready
    launchers: list[str] = field(default_factory=list)  # launchers that started, oldest first
    # A kind whose every node is logged: the node pods whose container started, in that order.
    logged: list[str] = field(default_factory=list)
    # How many of them started before the last resume: a resumed job sets up again, and
    # the operator must start a new launcher (the old ones were deleted with the job's pods).
    resumed_after: int = 0
    # Since when the pods are placed and setting up (image pulls, code fetch, pip): None
    # until the first update, reset while a pod waits for a node.
    setup_since: float | None = None
    pull_since: dict[str, float] = field(default_factory=dict)  # pod -> first seen failing
    # pod -> its last ErrImagePull: the registry's own words, which ImagePullBackOff's message
    # in between the kubelet's tries gives only after 'Back-off pulling image "X":
    # ErrImagePull:' (kubelet v1.35), or from older kubelets not at all
    pull_errors: dict[str, Failure] = field(default_factory=dict)
    unschedulable_since: float | None = None
    unschedulable: tuple[str, str] | None = None  # (pod, the scheduler's message)
    failure: Failure | None = None  # decided on our side: the cluster would wait on
    deleted: bool = False
    suspended: bool = False  # by a queue: before the start (queued) or after (preempted)
    preempted: bool = False  # suspended after it started, at least once
    # Since when a queue keeps the job suspended (before it started, or since a preemption).
    queued_since: float | None = None
    workload: WorkloadView | None = None  # Kueue's Workload of the job, as last seen
    admitted_said: bool = False  # Kueue's admission was said since the job was last queued
    eviction_said: str | None = None  # the last Kueue eviction said (its transition time)
    # The followed launcher pod whose container ended while sidecars keep it running, and
    # since when; then whether its exit code 0 decided the job.
    held: tuple[str, float] | None = None
    held_success: bool = False

    def fail(self, failure: Failure | None) -> None:
        """The job fails for ``failure``, unless it has already for something else."""
        if self.failure is None and failure is not None:
            self.failure = failure

    def take_pods(self, pods: Iterable[JSON], deleted: bool) -> None:
        for pod in pods:
            name = podstatus.pod_name(pod)
            earlier = self.last_seen.get(name, {}).get("metadata", {}).get("uid")
            if earlier and earlier != pod.get("metadata", {}).get("uid"):
                self.replaced[str(earlier)] = self.last_seen[name]
            self.last_seen[name] = pod
            if deleted:
                self.pods.pop(name, None)
            else:
                self.pods[name] = pod

    def restart(self, now: float) -> None:
        """The queue admitted the job: it sets up from the start, so what was kept of the pods
        before a preemption (their launchers, progress, pull timers) goes."""
        self.setup_since = now  # setting up starts once the queue admits the job
        self.resumed_after = len(self.launchers)
        self.ready_said = 0
        self.pull_since.clear()
        self.pull_errors.clear()

    def current_launchers(self) -> list[str]:
        """The launcher pods whose container started since the last resume, oldest first."""
        return self.launchers[self.resumed_after :]

    def launcher_to_follow(self) -> str | None:
        """The newest launcher pod whose container has started (since the last resume)."""
        current = self.current_launchers()
        return current[-1] if current else None

    def held_by_sidecars(self, container: str) -> tuple[str, JSON, list[str]] | None:
        """The followed launcher pod, how its ``container`` ended and the sidecars that keep the
        pod running."""
        launcher = self.launcher_to_follow()
        pod = self.pods.get(launcher or "")
        held = None if pod is None else podstatus.held_by_sidecars(pod, container)
        return None if launcher is None or held is None else (launcher, *held)
