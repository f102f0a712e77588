"""Stream the launcher's log into the LogSink as it is written, surviving dropped connections.

We ask for ``timestamps=true`` so every line carries the kubelet's RFC 3339 time. After a drop
we reconnect with ``sinceTime`` (whole seconds, so a little early) and skip what we already
passed on: lines older than the last one seen, and as many lines with exactly its timestamp as
we had already seen. A partial line cut by the drop is dropped and comes again, whole.
Only the current line is held in memory.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ci_runner.backends.kubernetes.api import MAX_RECONNECT_FAILURES, KubeApi, StreamReader
from ci_runner.backends.kubernetes.errors import KubeError, NotFound
from ci_runner.backends.kubernetes.resources import PODS
from ci_runner.backends.logsink import LogSink


def parse_timestamp(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 UTC time such as ``2026-01-01T00:00:01.5Z``."""
    if not text.endswith("Z") or "T" not in text:
        return None
    whole, _, fraction = text[:-1].partition(".")
    try:
        moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
        nanos = int((fraction + "000000000")[:9]) if fraction else 0
    except ValueError:
        return None
    return int(moment.timestamp()) * 1_000_000_000 + nanos


def since_time(nanos: int) -> str:
    """``sinceTime`` for a reconnect: the second containing ``nanos``, RFC 3339."""
    moment = datetime.fromtimestamp(nanos // 1_000_000_000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class LogFollower(StreamReader):
    """Follows one pod's log to the end of its container, feeding ``sink``."""

    def __init__(self, api: KubeApi, pod: str, sink: LogSink) -> None:
        super().__init__()
        self.api = api
        self.pod = pod
        self.sink = sink
        self.reconnects = 0
        self._last: int | None = None  # timestamp of the last line passed on
        self._at_last = 0  # lines passed on with exactly that timestamp
        self._skip = 0  # lines at ``_last`` still to skip on this connection
        self._opened = False  # the current connection was established

    def run(self) -> None:
        """Follow until the container has ended (or :meth:`stop`); raises :class:`KubeError`."""
        failures = 0
        while not self._stopped.is_set():
            self._opened = False
            try:
                if self._follow_once():
                    return
            except NotFound:
                return  # the pod is gone, and its log with it
            except KubeError as err:
                # 400 means the container is not running yet; the rest we retry if we may.
                if self._stopped.is_set():
                    return
                if self._opened:
                    failures = 0  # the connection worked, then broke: not a failing server
                if not (err.retryable or err.status == 400) or failures >= MAX_RECONNECT_FAILURES:
                    raise
                self.reconnects += 1
                self.api.clock.sleep(self.api.retry.delay(failures, err.retry_after))
                failures += 1

    def _follow_once(self) -> bool:
        """Read one connection; True when the log is complete."""
        since = since_time(self._last) if self._last is not None else None
        self._skip = self._at_last
        stream = self.api.follow_log(self.pod, since)
        self._opened = True
        pending = b""
        with self.reading(stream):
            for chunk in stream.chunks():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._line(line)
        if self._stopped.is_set():
            return True
        # A clean end: the container finished, or the server ended the request early.
        if not self._container_ended():
            self.api.clock.sleep(self.api.retry.base_delay)
            self.reconnects += 1
            return False
        if pending:
            self._line(pending, newline=False)
        return True

    def _line(self, raw: bytes, newline: bool = True) -> None:
        stamp, _, content = raw.partition(b" ")
        nanos = parse_timestamp(stamp.decode("ascii", errors="replace"))
        if nanos is None:
            content = raw  # no timestamp: pass it on as it is
        elif self._last is not None and nanos < self._last:
            return
        elif nanos == self._last:
            if self._skip > 0:
                self._skip -= 1
                return
            self._at_last += 1
        else:
            self._last, self._at_last, self._skip = nanos, 1, 0
        self.sink.feed(content + b"\n" if newline else content)

    def _container_ended(self) -> bool:
        pod = self.api.get(PODS, self.pod)
        status = pod.get("status", {})
        if status.get("phase") in ("Succeeded", "Failed"):
            return True
        states = [c.get("state", {}) for c in status.get("containerStatuses", [])]
        return bool(states) and all("terminated" in state for state in states)
