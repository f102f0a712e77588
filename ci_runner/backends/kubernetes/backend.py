"""Run one training job on Kubernetes: submit, follow to the end with its log, explain, clean up.

The job is an MPIJob or a batch/v1 Indexed Job (its :mod:`~ci_runner.backends.kubernetes.kinds`,
from the rendered object's ``kind``); the MPIJob's words below hold for both.

Watcher threads (MPIJob, its pods, Events) and the log threads feed an inbox
(:mod:`~ci_runner.backends.kubernetes.supervision`); the calling thread alone owns the job's
state, prints status lines and decides. :meth:`KubernetesBackend.cancel` only posts to the
inbox, so a signal handler may call it.

Each watch asks the API server to end it after 5 minutes and is then made again (a request), so
while the job runs steadily (launcher running, every worker Ready) only its pods are watched.
The Events watch stops for good then: Events matter before the job runs (scheduling, image
pulls, the operator's ValidationError), and a relaunched launcher stuck pending shows in its
pod's status. The MPIJob watch pauses: its terminal conditions always follow a pod change (the
launcher ends or is killed at the deadline; deleting or suspending the job deletes its pods).
The first pod change that ends the steady state lists the MPIJob at once, then watches it again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Final

from ci_runner.backends.kubernetes import explain, kueue
from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.cleanup import (
    cancel_job,
    delete_expired,
    delete_workers,
    expired_line,
    keep_until,
    remove_finished_job,
)
from ci_runner.backends.kubernetes.errors import KubeError
from ci_runner.backends.kubernetes.jobkind import Verdict
from ci_runner.backends.kubernetes.kinds import MPIJOB, job_kind
from ci_runner.backends.kubernetes.options import JobOptions
from ci_runner.backends.kubernetes.queue_position import Position, QueuePosition
from ci_runner.backends.kubernetes.resources import PODS
from ci_runner.backends.kubernetes.submit import submit
from ci_runner.backends.kubernetes.supervision import JobThreads
from ci_runner.backends.kubernetes.tracker import JobTracker
from ci_runner.backends.kubernetes.traits import traits_of
from ci_runner.backends.kubernetes.watching import SYNC, WatchUpdate
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome, QueueWait, RunResult
from ci_runner.clock import Clock
from ci_runner.console import StatusOutput
from ci_runner.http_policy import KUBERNETES_RETRY

# Lines of a failed container's log shown when it ends the job (pip's error, the script's fix).
FAILED_CONTAINER_TAIL: Final = 20
# Seconds between questions of Kueue's visibility API while the job waits in its queue.
POSITION_SECONDS: Final = 30.0


class KubernetesBackend:
    """Runs a rendered MPIJob (or Indexed Job) on the cluster and returns how it ended: the job's
    lifecycle."""

    def __init__(
        self,
        options: JobOptions,
        sink: LogSink,
        console: StatusOutput,
        clock: Clock,
        on_queue: Callable[[QueueWait | None], None] | None = None,
    ) -> None:
        """``on_queue``: told when Kueue starts keeping the job waiting (and since when), and
        when that ends (None)."""
        self.options = options
        self.on_queue = on_queue
        self._queued = False
        self._position: Position | None = None
        self._position_asked = -math.inf
        self.sink = sink
        self.console = console
        self.clock = clock
        self.api = KubeApi(options.api_client, options.namespace, clock, options.retry)
        # Kueue's Workload and the position are followed only where RBAC lets ci-runner read
        # them. The position is asked once a while: one try, so an unanswering API never holds
        # the job's follower up.
        queue = options.queue
        self.position: QueuePosition | None = None
        if queue is not None and queue.visible:
            one_try = replace(KUBERNETES_RETRY, attempts=1)
            once = KubeApi(options.api_client, options.namespace, clock, one_try)
            self.position = QueuePosition(once, queue.local_queue)
        self.mpijob_name = options.mpijob_name
        kind = str(options.manifest.get("kind", MPIJOB))
        self.kind = job_kind(
            kind,
            options.mpijob_name,
            options.launcher_container,
            ranks_per_node=options.ranks_per_node,
            code_dir=options.code_dir,
        )
        self.traits = traits_of(self.kind)
        self.tracker = JobTracker(
            self.kind,
            options.workers,
            options.unschedulable_timeout,
            options.setup_timeout,
            options.on_preemption,
            launcher_decides=options.keep_finished == 0,
            queue=options.queue,
        )
        self.threads = JobThreads(
            self.api,
            options.mpijob_name,
            sink,
            options.launcher_container,
            console.warning,
            self.kind,
            watch_workload=self.position is not None,
        )

    # -- public --------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask :meth:`run` to delete the job and return CANCELLED. Safe from a signal handler."""
        self.threads.cancel()

    def run(self) -> RunResult:
        """Submit (or attach), follow to the end, and say how it went.

        Raises :class:`~ci_runner.errors.ClusterError` when the API refuses us.
        """
        started = self.clock.now()
        try:
            verdict = self._run()
        finally:
            self.threads.stop()
            self.sink.close()
        return self._result(verdict, started)

    # -- the steps -----------------------------------------------------------------------------

    def _run(self) -> Verdict:
        if self.threads.cancelled:
            return Verdict(Outcome.CANCELLED, _cancelled_failure())
        self.threads.start(self._submit())
        verdict = self._await_verdict()
        if verdict is None:
            return self._cancel_on_cluster()
        self.threads.stop_watchers()
        if self.tracker.decided_here:
            verdict = self._with_container_log(verdict)
            self._say(f"{self.traits.noun} {self.mpijob_name} failed: {_message(verdict)}")
            self._cancel_job()
            self._say(f"deleted {self.traits.noun} {self.mpijob_name} and its pods")
            return verdict
        # The end as the cluster says it: look at the pods once more so the explanation does not
        # depend on which watch spoke first, and finish the log before the last word.
        pods = self.api.list(PODS, label_selector=self.traits.pod_selector)
        self._apply(WatchUpdate(PODS, SYNC, tuple(pods.get("items", []))))
        self._follow_logs()
        if not self.threads.drain_log():
            return self._cancel_on_cluster()
        return self._end(self.tracker.verdict() or verdict)

    def _submit(self) -> str:
        """Submit the job (or attach to it), delete the expired ones; the job's uid."""
        options = self.options
        lifetime = options.lifetime
        reap = None if lifetime is None else self.clock.now() + timedelta(seconds=lifetime)
        scripts = None if options.scripts is None else dict(options.scripts)
        service = None if options.service is None else dict(options.service)
        submission = submit(
            self.api, dict(options.manifest), options.secret, reap, scripts, service
        )
        where = f"{self.traits.noun} {self.mpijob_name} in namespace {self.api.namespace}"
        if submission.attached:
            self._say(f"attached to {where}: it was already submitted (the CI job restarted)")
        else:
            self._say(f"submitted {where}")
        self._delete_expired()
        return submission.uid

    def _end(self, verdict: Verdict) -> Verdict:
        """The cluster ended the job: say how, stop what it left running, clean up."""
        if verdict.failure is not None:
            read = self.traits.failure_log_bytes
            log = self.sink.saved_lines(read) if read else self.sink.tail
            failure = self.traits.refine(verdict.failure, log, self.tracker.last_seen)
            verdict = replace(verdict, failure=failure)
        # Workers the operator left running (cleanPodPolicy None) stop now when the MPIJob is
        # kept; otherwise its deletion below takes them (the garbage collector), and the CI job
        # does not wait for the API server to delete each of 256 pods (0.6 s for 64).
        kept = self.options.keep_finished > 0 or verdict.outcome is Outcome.CANCELLED
        if kept and self.tracker.running_workers():
            delete_workers(self.api, self.mpijob_name, self.traits.worker_selector)
        if verdict.outcome is Outcome.SUCCEEDED:
            self._say(f"{self.traits.noun} {self.mpijob_name} succeeded")
        elif verdict.outcome is Outcome.CANCELLED:
            self._say(_message(verdict))
        else:
            self._say(f"{self.traits.noun} {self.mpijob_name} failed: {_message(verdict)}")
        if verdict.outcome is not Outcome.CANCELLED:
            self._clean_up()
        return verdict

    def _with_container_log(self, verdict: Verdict) -> Verdict:
        """Show the last lines of the container that failed (pip's error, the script's "fix:"),
        in the CI log and the saved log; its last line becomes the reason's end."""
        failure = verdict.failure
        if failure is None or failure.pod is None or failure.container is None:
            return verdict
        try:
            text = self.api.log_tail(failure.pod, failure.container, FAILED_CONTAINER_TAIL)
        except KubeError:
            return verdict  # it never ran (a missing Secret key): its status says it all
        lines = explain.container_log_lines(text)
        if not lines:
            return verdict
        self._say(f"the last lines of container {failure.container} in pod {failure.pod}:")
        with self.threads.sink_lock:  # every node's log may still stream into it
            for line in lines:
                self.sink.feed(line.encode() + b"\n")
            self.sink.flush()
        last = self.sink.mask(lines[-1].strip())
        return Verdict(verdict.outcome, explain.with_log_line(failure, last))

    def _clean_up(self) -> None:
        """The log is saved and the verdict known: the finished job and all it owns go."""
        keep_finished, noun, name = self.options.keep_finished, self.traits.noun, self.mpijob_name
        resource = self.kind.resource
        if keep_finished > 0:
            until = self.clock.now() + timedelta(seconds=keep_finished)
            stamp = keep_until(self.api, name, until, resource)
            self._say(
                f"keeping {noun} {name} until {stamp} (kubernetes.keep_finished): the "
                f"first ci-runner train in namespace {self.api.namespace} after that deletes it; "
                "ci-runner cancel deletes it now"
            )
        else:
            remove_finished_job(self.api, name, self.options.secret.name, resource)
            self._say(f"deleted {noun} {name}, {self.traits.owned}")

    def _delete_expired(self) -> None:
        """Delete the namespace's jobs whose ``ci-runner/delete-after`` has passed: kept by an
        earlier run, or left by a CI job killed before it cleaned up."""
        now, resource = self.clock.now(), self.kind.resource
        for name in delete_expired(self.api, now, spare=self.mpijob_name, resource=resource):
            self._say(expired_line(name, self.traits.noun))

    def _await_verdict(self) -> Verdict | None:
        """Take updates until the job is decided (None: cancelled)."""
        while True:
            update = self.threads.next_update()
            if self.threads.cancelled:
                return None
            if update is not None:
                self._apply(update)
                self._fit_watches()
            self.tracker.check_time(self.clock.monotonic())
            self._say_position()
            self._follow_logs()
            verdict = self.tracker.verdict()
            if verdict is not None:
                return verdict

    def _say_position(self) -> None:
        """Where the waiting job stands in its LocalQueue, when that changes (asked every
        :data:`POSITION_SECONDS` while Kueue keeps it waiting)."""
        queue, view = self.options.queue, self.tracker.state.workload
        now = self.clock.monotonic()
        if self.position is None or queue is None or view is None:
            return
        if not self.tracker.waiting_in_queue or now - self._position_asked < POSITION_SECONDS:
            return
        self._position_asked = now
        position = self.position.of(view.name)
        if position is not None and position != self._position:
            self._say(kueue.position_line(queue, position.place, position.pending))
        self._position = position

    def _follow_logs(self) -> None:
        for pod in self.tracker.logs_to_follow():
            self.threads.follow(pod)

    def _cancel_job(self) -> None:
        resource, pods = self.kind.resource, self.traits.pod_selector
        cancel_job(self.api, self.mpijob_name, self.options.secret.name, resource, pods)

    def _apply(self, update: WatchUpdate) -> None:
        for line in self.tracker.apply(update, self.clock.monotonic()):
            self._say(line)
        queue = self.options.queue
        waiting = self.tracker.waiting_in_queue
        if queue is None or self.on_queue is None or waiting == self._queued:
            return
        self._queued = waiting
        now = self.clock.now()
        self.on_queue(QueueWait(queue.local_queue, queue.cluster_queue, now) if waiting else None)

    def _fit_watches(self) -> None:
        """Only the pods while the job runs steadily; the MPIJob again when that ends."""
        if self.tracker.steady:
            self.threads.pause()
        elif self.threads.mpijob_paused and self.tracker.verdict() is None:
            self._resume_mpijob_watch()

    def _resume_mpijob_watch(self) -> None:
        """List the MPIJob now, then watch it from there unless that listing decided the job.

        Listing here rather than on the watcher's thread: an ended job is decided at once,
        without opening a watch that would only be closed again.
        """
        resource = self.kind.resource
        listing = self.api.list(resource, field_selector=self.threads.mpijob_field)
        self._apply(WatchUpdate(resource, SYNC, tuple(listing.get("items", []))))
        if self.tracker.verdict() is None:
            version = str(listing.get("metadata", {}).get("resourceVersion", ""))
            self.threads.watch_mpijob(version or None)

    def _cancel_on_cluster(self) -> Verdict:
        noun = self.traits.noun
        self._say(f"cancelling: deleting {noun} {self.mpijob_name}, {self.traits.owned}")
        self.threads.stop()
        self._cancel_job()
        self._say(f"{noun} {self.mpijob_name} cancelled")
        return Verdict(Outcome.CANCELLED, _cancelled_failure())

    def _say(self, line: str) -> None:
        self.console.status(line)

    def _result(self, verdict: Verdict, started: datetime) -> RunResult:
        return RunResult(
            outcome=verdict.outcome,
            mpijob_name=self.mpijob_name,
            log_path=self.sink.path,
            log_tail=self.sink.tail,
            failure=verdict.failure,
            started_at=started,
            finished_at=self.clock.now(),
        )


def _message(verdict: Verdict) -> str:
    return verdict.failure.message if verdict.failure else "no reason given"


def _cancelled_failure() -> Failure:
    return Failure(FailureKind.CANCELLED, "cancelled before the job finished")
