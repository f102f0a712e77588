"""Run one training job on Kubernetes: submit, follow to the end with its log, explain, clean up.

Watcher threads (MPIJob, its pods, Events) and one log thread feed an inbox; the calling thread
alone owns the job's state, prints status lines and decides. :meth:`cancel` only posts to the
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

import functools
import queue
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final

from kubernetes.client import ApiClient

from ci_runner.backends.kubernetes import explain
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
from ci_runner.backends.kubernetes.events import about_job
from ci_runner.backends.kubernetes.launcher_log import LauncherLogStream
from ci_runner.backends.kubernetes.resources import EVENTS, JSON, MPIJOBS, PODS, job_selector
from ci_runner.backends.kubernetes.submit import submit
from ci_runner.backends.kubernetes.tracker import JobTracker, Verdict
from ci_runner.backends.kubernetes.watching import SYNC, Watcher, WatchUpdate
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.clock import Clock
from ci_runner.config.types import KubernetesOptions, OnPreemption
from ci_runner.console import StatusOutput
from ci_runner.http_policy import RetryPolicy
from ci_runner.plan.run_plan import JobSecret

# Real seconds between checks of the unschedulable timer when nothing happens. Not a poll of
# the API: the inbox wakes us on every change.
WAKE_SECONDS: Final = 1.0
# Lines of a failed container's log shown when it ends the job (pip's error, the script's fix).
FAILED_CONTAINER_TAIL: Final = 20
# Seconds to wait for each watcher and log thread to end once told to stop.
THREAD_JOIN_SECONDS: Final = 10.0


class _Cancel:
    """The inbox message :meth:`KubernetesBackend.cancel` posts."""


class _LogDone:
    """The inbox message the log thread posts when the launcher's log has ended."""


class KubernetesBackend:
    """Runs a rendered MPIJob on the cluster and returns how it ended."""

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        manifest: Mapping[str, Any],
        secret: JobSecret,
        sink: LogSink,
        console: StatusOutput,
        clock: Clock,
        unschedulable_timeout: float,
        retry: RetryPolicy | None = None,
        setup_timeout: float = KubernetesOptions.setup_timeout,
        keep_finished: float = 0,
        on_preemption: OnPreemption = KubernetesOptions.on_preemption,
        scripts: Mapping[str, Any] | None = None,
    ) -> None:
        self.keep_finished = keep_finished
        self.scripts: JSON | None = dict(scripts) if scripts is not None else None
        self.api = KubeApi(api_client, namespace, clock, retry)
        self.manifest: JSON = dict(manifest)
        self.secret = secret
        self.sink = sink
        self.console = console
        self.clock = clock
        self.mpijob_name = str(manifest["metadata"]["name"])
        self._mpijob_field = f"metadata.name={self.mpijob_name}"
        specs = manifest["spec"]["mpiReplicaSpecs"]
        workers = specs.get("Worker", {}).get("replicas", 1)
        # Named in every log request: a sidecar injected into the pod makes it one of several.
        self._launcher_container = str(
            specs["Launcher"]["template"]["spec"]["containers"][0]["name"]
        )
        self.tracker = JobTracker(
            self.mpijob_name, int(workers), unschedulable_timeout, setup_timeout, on_preemption
        )
        # The latest the job's pods can run: a worker's own deadline once it has started, after
        # at most unschedulable_timeout waiting for a node (render.pod_deadlines).
        worker_deadline = specs.get("Worker", {}).get("template", {}).get("spec", {})
        deadline = worker_deadline.get("activeDeadlineSeconds")
        self._lifetime = None if deadline is None else unschedulable_timeout + float(deadline)
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._cancelled = False
        self._watchers: list[Watcher] = []  # the watchers running
        self._mpijob_watcher: Watcher | None = None  # None while paused
        self._events_watcher: Watcher | None = None  # None once stopped for good
        self._threads: list[threading.Thread] = []
        self._log_pods: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._followed: list[str] = []
        self._log_stream: LauncherLogStream | None = None
        self._log_thread: threading.Thread | None = None
        self._job_uid = ""

    # -- public --------------------------------------------------------------------------------

    def cancel(self) -> None:
        """Ask :meth:`run` to delete the job and return CANCELLED. Safe from a signal handler."""
        self._cancelled = True
        self._inbox.put(_Cancel())

    def run(self) -> RunResult:
        """Submit (or attach), follow to the end, and say how it went.

        Raises :class:`~ci_runner.errors.ClusterError` when the API refuses us.
        """
        started = self.clock.now()
        try:
            verdict = self._run()
        finally:
            self._stop_threads()
            self.sink.close()
        return self._result(verdict, started)

    # -- the steps -----------------------------------------------------------------------------

    def _run(self) -> Verdict:
        if self._cancelled:
            return Verdict(Outcome.CANCELLED, _cancelled_failure())
        reap = (
            None if self._lifetime is None else self.clock.now() + timedelta(seconds=self._lifetime)
        )
        submission = submit(self.api, self.manifest, self.secret, reap, self.scripts)
        self._job_uid = submission.uid
        where = f"MPIJob {self.mpijob_name} in namespace {self.api.namespace}"
        if submission.attached:
            self._say(f"attached to {where}: it was already submitted (the CI job restarted)")
        else:
            self._say(f"submitted {where}")
        self._delete_expired()
        self._start_watchers()
        self._start_log_thread()
        verdict = self._await_verdict()
        if verdict is None:
            return self._cancel_on_cluster()
        for watcher in self._watchers:
            watcher.stop()
        if self.tracker.decided_here:
            verdict = self._with_container_log(verdict)
            self._say(f"MPIJob {self.mpijob_name} failed: {_message(verdict)}")
            cancel_job(self.api, self.mpijob_name, self.secret.name)
            self._say(f"deleted MPIJob {self.mpijob_name} and its pods")
            return verdict
        # The end as the cluster says it: look at the pods once more so the explanation does not
        # depend on which watch spoke first, and finish the log before the last word.
        pods = self.api.list(PODS, label_selector=job_selector(self.mpijob_name))
        self._apply(WatchUpdate(PODS, SYNC, tuple(pods.get("items", []))))
        self._queue_launcher_pod()
        if not self._drain_log():
            return self._cancel_on_cluster()
        verdict = self.tracker.verdict() or verdict
        if verdict.failure is not None:
            failure = explain.rank_signal(verdict.failure, self.sink.tail, self.tracker.last_seen)
            verdict = replace(verdict, failure=failure)
        # Workers the operator left running (cleanPodPolicy None) stop now when the MPIJob is
        # kept; otherwise its deletion below takes them (the garbage collector), and the CI job
        # does not wait for the API server to delete each of 256 pods (0.6 s for 64).
        kept = self.keep_finished > 0 or verdict.outcome is Outcome.CANCELLED
        if kept and self.tracker.running_workers():
            delete_workers(self.api, self.mpijob_name)
        if verdict.outcome is Outcome.SUCCEEDED:
            self._say(f"MPIJob {self.mpijob_name} succeeded")
        elif verdict.outcome is Outcome.CANCELLED:
            self._say(_message(verdict))
        else:
            self._say(f"MPIJob {self.mpijob_name} failed: {_message(verdict)}")
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
        for line in lines:
            self.sink.feed(line.encode() + b"\n")
        self.sink.flush()
        last = self.sink.mask(lines[-1].strip())
        return Verdict(verdict.outcome, explain.with_log_line(failure, last))

    def _clean_up(self) -> None:
        """The log is saved and the verdict known: the finished MPIJob and all it owns go."""
        if self.keep_finished > 0:
            until = self.clock.now() + timedelta(seconds=self.keep_finished)
            stamp = keep_until(self.api, self.mpijob_name, until)
            self._say(
                f"keeping MPIJob {self.mpijob_name} until {stamp} (kubernetes.keep_finished): the "
                f"first ci-runner train in namespace {self.api.namespace} after that deletes it; "
                "ci-runner cancel deletes it now"
            )
        else:
            remove_finished_job(self.api, self.mpijob_name, self.secret.name)
            self._say(f"deleted MPIJob {self.mpijob_name}, its pods and its Secret")

    def _delete_expired(self) -> None:
        """Delete the namespace's jobs whose ``ci-runner/delete-after`` has passed: kept by an
        earlier run, or left by a CI job killed before it cleaned up."""
        for name in delete_expired(self.api, self.clock.now(), spare=self.mpijob_name):
            self._say(expired_line(name))

    def _await_verdict(self) -> Verdict | None:
        """Take updates until the job is decided (None: cancelled)."""
        while True:
            try:
                item = self._inbox.get(timeout=WAKE_SECONDS)
            except queue.Empty:
                item = None
            if self._cancelled:
                return None
            if isinstance(item, WatchUpdate):
                self._apply(item)
                self._fit_watches()
            elif isinstance(item, BaseException):
                raise item
            self.tracker.check_time(self.clock.monotonic())
            self._queue_launcher_pod()
            verdict = self.tracker.verdict()
            if verdict is not None:
                return verdict

    def _apply(self, update: WatchUpdate) -> None:
        for line in self.tracker.apply(update, self.clock.monotonic()):
            self._say(line)

    def _cancel_on_cluster(self) -> Verdict:
        self._say(f"cancelling: deleting MPIJob {self.mpijob_name}, its pods and its Secret")
        self._stop_threads()
        cancel_job(self.api, self.mpijob_name, self.secret.name)
        self._say(f"MPIJob {self.mpijob_name} cancelled")
        return Verdict(Outcome.CANCELLED, _cancelled_failure())

    # -- threads -------------------------------------------------------------------------------

    def _start_watchers(self) -> None:
        self._mpijob_watcher = self._watch_mpijob()
        pods = job_selector(self.mpijob_name)
        self._watch(Watcher(self.api, PODS, self._inbox.put, label_selector=pods))
        keep = functools.partial(about_job, mpijob_name=self.mpijob_name, job_uid=self._job_uid)
        self._events_watcher = self._watch(Watcher(self.api, EVENTS, self._inbox.put, keep=keep))

    def _watch_mpijob(self, resource_version: str | None = None) -> Watcher:
        field, version = self._mpijob_field, resource_version
        return self._watch(
            Watcher(
                self.api, MPIJOBS, self._inbox.put, field_selector=field, resource_version=version
            )
        )

    def _watch(self, watcher: Watcher) -> Watcher:
        self._watchers.append(watcher)
        self._spawn(watcher.run, f"watch-{watcher.resource.plural}")
        return watcher

    def _fit_watches(self) -> None:
        """Only the pods while the job runs steadily; the MPIJob again when that ends."""
        if self.tracker.steady:
            for watcher in (self._events_watcher, self._mpijob_watcher):
                if watcher is not None:
                    watcher.stop()  # what it had already delivered is still read: harmless
                    self._watchers.remove(watcher)
            self._events_watcher = self._mpijob_watcher = None
        elif self._mpijob_watcher is None and self.tracker.verdict() is None:
            self._resume_mpijob_watch()

    def _resume_mpijob_watch(self) -> None:
        """List the MPIJob now, then watch it from there unless that listing decided the job.

        Listing here rather than on the watcher's thread: an ended job is decided at once,
        without opening a watch that would only be closed again.
        """
        listing = self.api.list(MPIJOBS, field_selector=self._mpijob_field)
        self._apply(WatchUpdate(MPIJOBS, SYNC, tuple(listing.get("items", []))))
        if self.tracker.verdict() is None:
            version = str(listing.get("metadata", {}).get("resourceVersion", ""))
            self._mpijob_watcher = self._watch_mpijob(version or None)

    def _start_log_thread(self) -> None:
        self._log_thread = self._spawn(self._stream_launcher_log, "launcher-log")

    def _spawn(self, target: Callable[[], None], name: str) -> threading.Thread:
        def guarded() -> None:
            try:
                target()
            except BaseException as exc:  # handed to the main thread, which raises it
                self._inbox.put(exc)

        thread = threading.Thread(target=guarded, name=f"ci-runner-{name}", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()]  # paused watchers' ended
        self._threads.append(thread)
        thread.start()
        return thread

    def _stream_launcher_log(self) -> None:
        """The log thread: follow each launcher pod in turn (a relaunch makes a new one)."""
        while (pod := self._log_pods.get()) is not None:
            log_stream = LauncherLogStream(
                self.api, pod, self.sink, self._launcher_container, self.console.warning
            )
            self._log_stream = log_stream
            if self._cancelled:
                return
            log_stream.run()
        self._inbox.put(_LogDone())

    def _queue_launcher_pod(self) -> None:
        pod = self.tracker.launcher_to_follow()
        if pod is not None and pod not in self._followed:
            self._followed.append(pod)
            self._log_pods.put(pod)

    def _drain_log(self) -> bool:
        """Wait for the launcher's log to end; False when cancelled meanwhile."""
        self._log_pods.put(None)
        thread = self._log_thread
        while thread is not None:
            try:
                item = self._inbox.get(timeout=WAKE_SECONDS)
            except queue.Empty:
                if thread.is_alive():
                    continue
                break  # it ended, and said so before we looked
            if self._cancelled:
                return False
            if isinstance(item, BaseException):
                raise item  # the log thread's (or a late watcher's) error
            if isinstance(item, _LogDone):
                break
        return not self._cancelled

    def _stop_threads(self) -> None:
        for watcher in self._watchers:
            watcher.stop()
        self._log_pods.put(None)
        if self._log_stream is not None:
            self._log_stream.stop()  # when the log was drained it has already ended
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=THREAD_JOIN_SECONDS)

    # -- helpers -------------------------------------------------------------------------------

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
