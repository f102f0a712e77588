"""The job's threads: watchers (the job's object, its pods, Events) and the log threads, feeding
one inbox: one log thread follows the launcher pods in turn (an MPIJob), or one thread per node
pod follows each node's log at once (a kind whose every node is logged: an Indexed Job), their
lines whole in the one sink.

Only the calling thread reads the inbox (:meth:`JobThreads.next_update`); what a thread raises
reaches it there and is raised again. :meth:`JobThreads.cancel` only posts to the inbox, so a
signal handler may call it.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import Final

from ci_runner import kueue_names
from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.jobkind import JobKind
from ci_runner.backends.kubernetes.launcher_log import LauncherLogStream, WholeLines
from ci_runner.backends.kubernetes.mpijob import MpiJobKind
from ci_runner.backends.kubernetes.resources import EVENTS, PODS, WORKLOADS
from ci_runner.backends.kubernetes.traits import traits_of
from ci_runner.backends.kubernetes.watching import Watcher, WatchUpdate
from ci_runner.backends.logsink import LogSink

# Real seconds between checks of the unschedulable timer when nothing happens. Not a poll of
# the API: the inbox wakes us on every change.
WAKE_SECONDS: Final = 1.0
# Seconds to wait for each watcher and log thread to end once told to stop.
THREAD_JOIN_SECONDS: Final = 10.0
# Seconds the job's end waits for the logs of nodes still running (node 0's success decided it;
# the others end within seconds, unless one hangs): then their streams stop, said.
NODE_LOG_GRACE_SECONDS: Final = 60.0


class _Cancel:
    """The inbox message :meth:`JobThreads.cancel` posts."""


class _LogDone:
    """The inbox message the log thread posts when the launcher's log has ended."""


def rotation_warning(pod: str) -> str:
    """What a node's log stream warns of (:data:`~.launcher_log.ROTATION_WARNING`'s twin)."""
    return (
        f"the log file of pod {pod} was rotated while its stream was down: lines written "
        "meanwhile may be missing here"
    )


class JobThreads:
    """Starts, pauses and stops the threads that follow job ``mpijob_name`` (of ``kind``: an
    MPIJob unless given)."""

    def __init__(
        self,
        api: KubeApi,
        mpijob_name: str,
        sink: LogSink,
        launcher_container: str,
        warn: Callable[[str], None],
        kind: JobKind | None = None,
        watch_workload: bool = False,
    ) -> None:
        """``watch_workload``: also watch Kueue's Workload of the job (kubernetes.local_queue,
        when RBAC lets ci-runner read it)."""
        self.api = api
        self.watch_workload = watch_workload
        self.mpijob_name = mpijob_name
        self.kind = kind or MpiJobKind(mpijob_name, launcher_container)
        self.traits = traits_of(self.kind)
        self.sink = sink
        self.launcher_container = launcher_container
        self.warn = warn
        self.cancelled = False
        self.mpijob_field = f"metadata.name={mpijob_name}"  # the MPIJob watch's selector
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._watchers: list[Watcher] = []  # the watchers running
        self._mpijob_watcher: Watcher | None = None  # None while paused
        self._events_watcher: Watcher | None = None  # None once stopped for good
        self._threads: list[threading.Thread] = []
        self._log_pods: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._followed: list[str] = []
        self._log_stream: LauncherLogStream | None = None
        self._log_thread: threading.Thread | None = None
        self._node_streams: list[LauncherLogStream] = []  # every node's, when each is logged
        self._node_threads: list[threading.Thread] = []
        # Held by whoever feeds the sink while every node's log streams into it.
        self.sink_lock = threading.Lock()

    def cancel(self) -> None:
        """Wake the reader of the inbox, cancelled. Safe from a signal handler."""
        self.cancelled = True
        self._inbox.put(_Cancel())

    def start(self, job_uid: str) -> None:
        """Watch the job (of uid ``job_uid``), its pods, its Events and (``watch_workload``)
        its Workload; start the log thread
        (a kind whose every node is logged starts one per node pod, as each is followed)."""
        self.watch_mpijob()
        pods = self.traits.pod_selector
        self._watch(Watcher(self.api, PODS, self._inbox.put, label_selector=pods))
        keep = functools.partial(self.traits.about, job_uid=job_uid)
        self._events_watcher = self._watch(Watcher(self.api, EVENTS, self._inbox.put, keep=keep))
        if self.watch_workload:
            # Never paused: Kueue's eviction of a steadily running job comes through it.
            workload = f"{kueue_names.JOB_UID_LABEL}={job_uid}"
            self._watch(Watcher(self.api, WORKLOADS, self._inbox.put, label_selector=workload))
        if not self.traits.every_node_logged:
            self._log_thread = self._spawn(self._stream_launcher_log, "launcher-log")

    def next_update(self) -> WatchUpdate | None:
        """The next watch update; None after :data:`WAKE_SECONDS` without one, for another
        message, or once cancelled. Raises what a thread raised."""
        try:
            item = self._inbox.get(timeout=WAKE_SECONDS)
        except queue.Empty:
            return None
        if self.cancelled:
            return None
        if isinstance(item, BaseException):
            raise item
        return item if isinstance(item, WatchUpdate) else None

    # -- the watches ---------------------------------------------------------------------------

    def watch_mpijob(self, resource_version: str | None = None) -> None:
        """Watch the job's object (again), from ``resource_version`` when the caller listed it."""
        field, version, resource = self.mpijob_field, resource_version, self.kind.resource
        self._mpijob_watcher = self._watch(
            Watcher(
                self.api, resource, self._inbox.put, field_selector=field, resource_version=version
            )
        )

    @property
    def mpijob_paused(self) -> bool:
        return self._mpijob_watcher is None

    def pause(self) -> None:
        """Only the pods from now on: the Events watch stops for good, the MPIJob's until
        :meth:`watch_mpijob`."""
        for watcher in (self._events_watcher, self._mpijob_watcher):
            if watcher is not None:
                watcher.stop()  # what it had already delivered is still read: harmless
                self._watchers.remove(watcher)
        self._events_watcher = self._mpijob_watcher = None

    def stop_watchers(self) -> None:
        for watcher in self._watchers:
            watcher.stop()

    def _watch(self, watcher: Watcher) -> Watcher:
        self._watchers.append(watcher)
        self._spawn(watcher.run, f"watch-{watcher.resource.plural}")
        return watcher

    # -- the launcher's log --------------------------------------------------------------------

    def follow(self, pod: str | None) -> None:
        """Follow launcher ``pod``'s log once the one before it has ended (None: no pod); a
        node pod's at once, beside the others (a kind whose every node is logged)."""
        if pod is None or pod in self._followed:
            return
        self._followed.append(pod)
        if not self.traits.every_node_logged:
            self._log_pods.put(pod)
        elif not self.cancelled:
            lines = WholeLines(self.sink, self.sink_lock)
            container, warning = self.kind.followed_container, rotation_warning(pod)
            stream = LauncherLogStream(
                self.api, pod, self.sink, container, self.warn, warning, lines
            )
            self._node_streams.append(stream)
            run = functools.partial(self._stream_node_log, stream, lines)
            self._node_threads.append(self._spawn(run, f"log-{pod}"))

    def drain_log(self) -> bool:
        """Wait for the launcher's log (every node's) to end; False when cancelled meanwhile."""
        if self.traits.every_node_logged:
            return self._drain_node_logs()
        self._log_pods.put(None)
        thread = self._log_thread
        while thread is not None:
            try:
                item = self._inbox.get(timeout=WAKE_SECONDS)
            except queue.Empty:
                if thread.is_alive():
                    continue
                break  # it ended, and said so before we looked
            if self.cancelled:
                return False
            if isinstance(item, BaseException):
                raise item  # the log thread's (or a late watcher's) error
            if isinstance(item, _LogDone):
                break
        return not self.cancelled

    def _drain_node_logs(self) -> bool:
        clock = self.api.clock
        since = clock.monotonic()
        while any(thread.is_alive() for thread in self._node_threads):
            if clock.monotonic() - since >= NODE_LOG_GRACE_SECONDS:
                self._cut_node_logs()
                break
            try:
                item = self._inbox.get(timeout=WAKE_SECONDS)
            except queue.Empty:
                continue
            if self.cancelled:
                return False
            if isinstance(item, BaseException):
                raise item  # a log thread's (or a late watcher's) error
        while True:  # what a thread said before it ended
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return not self.cancelled
            if isinstance(item, BaseException):
                raise item

    def _cut_node_logs(self) -> None:
        """Stop the logs of nodes still running after the job's end, and say so."""
        for stream, thread in zip(self._node_streams, self._node_threads, strict=True):
            if thread.is_alive():
                self.warn(
                    f"pod {stream.pod} still runs {NODE_LOG_GRACE_SECONDS:.0f}s after the job "
                    "ended: its log is cut here"
                )
                stream.stop()

    @staticmethod
    def _stream_node_log(stream: LauncherLogStream, lines: WholeLines) -> None:
        """A node's log thread: its stream to the end, then its last line ended."""
        try:
            stream.run()
        finally:
            lines.close()

    def _stream_launcher_log(self) -> None:
        """The log thread: follow each launcher pod in turn (a relaunch makes a new one)."""
        while (pod := self._log_pods.get()) is not None:
            log_stream = LauncherLogStream(
                self.api, pod, self.sink, self.launcher_container, self.warn
            )
            self._log_stream = log_stream
            if self.cancelled:
                return
            log_stream.run()
        self._inbox.put(_LogDone())

    # -- every thread --------------------------------------------------------------------------

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

    def stop(self) -> None:
        """Stop every thread and wait for each (a while)."""
        self.stop_watchers()
        self._log_pods.put(None)
        if self._log_stream is not None:
            self._log_stream.stop()  # when the log was drained it has already ended
        for stream in self._node_streams:
            stream.stop()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=THREAD_JOIN_SECONDS)
