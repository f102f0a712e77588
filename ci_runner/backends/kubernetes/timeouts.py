"""When waiting longer for a job is pointless: pods unschedulable, failing to pull their image,
setting up, or a launcher pod its sidecars keep running, for longer than allowed. Each clock
lives in :class:`~ci_runner.backends.kubernetes.jobstate.JobState`; a job that waited too long
gets its failure there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ci_runner.backends.kubernetes import explain, podstatus, status_lines
from ci_runner.backends.kubernetes.jobkind import JobKind
from ci_runner.backends.kubernetes.jobstate import JobState
from ci_runner.backends.kubernetes.resources import JSON
from ci_runner.backends.kubernetes.traits import KindTraits

# How long the kubelet may keep failing to pull an image (ErrImagePull, ImagePullBackOff: it
# retries with back-off, and registries have bad minutes) before the job fails.
IMAGE_PULL_GRACE_SECONDS: Final = 300.0
# How long the launcher's pod may go on after its launcher container ended because other
# containers still run (sidecars injected as plain containers never stop) before the launcher's
# exit code decides the job; a pod that ends by itself does so within seconds.
SIDECAR_GRACE_SECONDS: Final = 60.0


def watch_image_pull(state: JobState, pod: JSON, now: float) -> list[str]:
    """A bad image name fails now; other pull errors the kubelet retries: give it time."""
    name = podstatus.pod_name(pod)
    pull = explain.image_pull_failure(pod)
    if pull is None:
        state.pull_since.pop(name, None)
        state.pull_errors.pop(name, None)
        return []
    reason = podstatus.image_pull_reason(pod)
    if reason == "ErrImagePull":
        state.pull_errors[name] = pull
    if reason in podstatus.PERMANENT_PULL_REASONS:
        state.fail(pull)
        return []
    if name in state.pull_since:
        return []  # said once per pod: ErrImagePull and ImagePullBackOff alternate
    state.pull_since[name] = now
    return [status_lines.pull_retried(name, reason, IMAGE_PULL_GRACE_SECONDS)]


def track_unschedulable(state: JobState, now: float) -> None:
    """Start the unschedulable clock when a pod waits for a node; stop it, and start setting up
    again, once every pod has one."""
    stuck = [
        (podstatus.pod_name(pod), message)
        for pod in sorted(state.pods.values(), key=podstatus.pod_name)
        if (message := podstatus.unschedulable_message(pod))
    ]
    if not stuck:
        if state.unschedulable_since is not None:
            state.setup_since = now  # setting up starts once every pod has a node
        state.unschedulable_since, state.unschedulable = None, None
        return
    state.unschedulable = stuck[0]
    if state.unschedulable_since is None:
        state.unschedulable_since = now


@dataclass(frozen=True)
class Timeouts:
    """kubernetes.unschedulable_timeout and kubernetes.setup_timeout, in seconds."""

    unschedulable: float
    setup: float

    def check(self, state: JobState, kind: JobKind, traits: KindTraits, now: float) -> None:
        """Fail the job when pods have been unschedulable, failing to pull their image or
        setting up for longer than allowed."""
        if state.failure is None:
            _check_pull_time(state, now)
        if state.failure is None:
            self._check_setup_time(state, kind, traits, now)
        if state.failure is None:
            _check_held_time(state, kind.followed_container, traits, now)
        since, stuck = state.unschedulable_since, state.unschedulable
        if since is None or stuck is None or state.failure is not None:
            return
        if now - since >= self.unschedulable:
            pod, message = stuck
            state.fail(explain.unschedulable_failure(pod, now - since, message))

    def _check_setup_time(
        self, state: JobState, kind: JobKind, traits: KindTraits, now: float
    ) -> None:
        since = state.setup_since
        if since is None or state.unschedulable_since is not None:
            return
        if state.suspended or now - since < self.setup:
            return
        workers = sorted(
            (p for p in state.pods.values() if traits.waited_on(p)), key=podstatus.pod_name
        )
        waiting = [p for p in workers if not traits.set_up(p)]
        launcher_started = bool(state.current_launchers())
        if traits.setup_done(launcher_started, len(workers) - len(waiting), state.workers):
            return
        stalled = None
        if state.preempted and not waiting and len(workers) == state.workers:
            stalled = kind.stalled_resume(state.job or {}, now - since)
        not_ready = waiting[0] if waiting else None
        state.fail(stalled or traits.setup_timeout_failure(not_ready, now - since))


def _check_pull_time(state: JobState, now: float) -> None:
    for name, since in sorted(state.pull_since.items()):
        pull = explain.image_pull_failure(state.pods.get(name, {}))
        if pull is not None and now - since >= IMAGE_PULL_GRACE_SECONDS:
            state.fail(state.pull_errors.get(name, pull))
            return


def _check_held_time(state: JobState, container: str, traits: KindTraits, now: float) -> None:
    """The followed launcher's exit code decides once its sidecars held the pod long enough."""
    held = state.held_by_sidecars(container)
    if state.held is None or held is None or now - state.held[1] < SIDECAR_GRACE_SECONDS:
        return
    launcher, end, running = held
    if end.get("exitCode") == 0:
        state.held_success = True
    else:
        state.fail(traits.held_failure(launcher, container, end, running))
