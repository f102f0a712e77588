"""The job's threads: watchers (MPIJob, its pods, Events) and one log thread, feeding one inbox.

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

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.events import about_job
from ci_runner.backends.kubernetes.launcher_log import LauncherLogStream
from ci_runner.backends.kubernetes.resources import EVENTS, MPIJOBS, PODS, job_selector
from ci_runner.backends.kubernetes.watching import Watcher, WatchUpdate
from ci_runner.backends.logsink import LogSink

# Real seconds between checks of the unschedulable timer when nothing happens. Not a poll of
# the API: the inbox wakes us on every change.
WAKE_SECONDS: Final = 1.0
# Seconds to wait for each watcher and log thread to end once told to stop.
THREAD_JOIN_SECONDS: Final = 10.0


class _Cancel:
    """The inbox message :meth:`JobThreads.cancel` posts."""


class _LogDone:
    """The inbox message the log thread posts when the launcher's log has ended."""


class JobThreads:
    """Starts, pauses and stops the threads that follow MPIJob ``mpijob_name``."""

    def __init__(
        self,
        api: KubeApi,
        mpijob_name: str,
        sink: LogSink,
        launcher_container: str,
        warn: Callable[[str], None],
    ) -> None:
        self.api = api
        self.mpijob_name = mpijob_name
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

    def cancel(self) -> None:
        """Wake the reader of the inbox, cancelled. Safe from a signal handler."""
        self.cancelled = True
        self._inbox.put(_Cancel())

    def start(self, job_uid: str) -> None:
        """Watch the MPIJob (of uid ``job_uid``), its pods and its Events; start the log thread."""
        self.watch_mpijob()
        pods = job_selector(self.mpijob_name)
        self._watch(Watcher(self.api, PODS, self._inbox.put, label_selector=pods))
        keep = functools.partial(about_job, mpijob_name=self.mpijob_name, job_uid=job_uid)
        self._events_watcher = self._watch(Watcher(self.api, EVENTS, self._inbox.put, keep=keep))
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
        """Watch the MPIJob (again), from ``resource_version`` when the caller listed it."""
        field, version = self.mpijob_field, resource_version
        self._mpijob_watcher = self._watch(
            Watcher(
                self.api, MPIJOBS, self._inbox.put, field_selector=field, resource_version=version
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
        """Follow launcher ``pod``'s log once the one before it has ended (None: no pod)."""
        if pod is not None and pod not in self._followed:
            self._followed.append(pod)
            self._log_pods.put(pod)

    def drain_log(self) -> bool:
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
            if self.cancelled:
                return False
            if isinstance(item, BaseException):
                raise item  # the log thread's (or a late watcher's) error
            if isinstance(item, _LogDone):
                break
        return not self.cancelled

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
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=THREAD_JOIN_SECONDS)
