"""Stream the launcher's log (or each node's) into the LogSink as it is written, surviving
dropped connections.

We ask for ``timestamps=true``: every line carries the kubelet's RFC 3339 time, in the node's
own zone (``+02:00`` as well as ``Z``), and stdout and stderr lines may be stamped out of order.
After a drop we reconnect with ``sinceTime`` (whole seconds, ``SLACK_SECONDS`` before the newest
line seen, so a line stamped a little early is not filtered out) and skip exactly the lines we
already passed on: the kubelet sends the lines of the current file stamped at or after
``sinceTime`` in file order, so they begin with the ones we passed on that are stamped so. When
they do not (the file was rotated while we were away), lines may be lost: we say so once.
A partial line cut by the drop is dropped and comes again, whole. The timestamps are stripped.

kube-apiserver ends ``pods/log`` cleanly (its terminating chunk) when the kubelet's stream
breaks, so a clean end is not the end of the log: while the container runs it is a drop, and
once it has terminated a clean end that leaves half a record is checked by one more connection,
opened now that the container is known to be done (:func:`after_clean_end`).
"""

from __future__ import annotations

import enum
import functools
import re
import threading
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Final, Protocol

from ci_runner.backends.kubernetes import podstatus
from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import KubeError, NotFound
from ci_runner.backends.kubernetes.reconnecting import Lines, ReconnectingStream
from ci_runner.backends.kubernetes.resources import PODS
from ci_runner.backends.logsink import LogSink

NANOS: Final = 1_000_000_000
# How much earlier than the line before it a line may be stamped (stdout and stderr are
# stamped as the runtime reads each pipe) and still be found again after a reconnect.
SLACK_SECONDS: Final = 5
ROTATION_WARNING: Final = (
    "the launcher's log file was rotated while its stream was down: "
    "lines written meanwhile may be missing here"
)
STAMP_CACHE: Final = 64  # seconds whose epoch value is kept (lines stamped out of order)
_STAMP: Final = re.compile(
    r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", re.ASCII
)


class LineSink(Protocol):
    """Where a log stream's lines go: a :class:`LogSink`, or one of several streams' share of
    it (:class:`WholeLines`)."""

    def feed(self, data: bytes | str) -> None: ...


class WholeLines:
    """One of several log streams feeding one sink (every node's log): it passes on whole lines
    only, under the sink's ``lock``, so the streams' lines never mix mid-line; :meth:`close`
    ends a last line the stream left unterminated."""

    def __init__(self, sink: LineSink, lock: threading.Lock) -> None:
        self._sink = sink
        self._lock = lock
        self._rest = b""

    def feed(self, data: bytes | str) -> None:
        self._rest += data.encode() if isinstance(data, str) else data
        cut = self._rest.rfind(b"\n") + 1
        if cut:
            whole, self._rest = self._rest[:cut], self._rest[cut:]
            with self._lock:
                self._sink.feed(whole)

    def close(self) -> None:
        if self._rest:
            self.feed(b"\n")


def parse_timestamp(text: str) -> int | None:
    """Nanoseconds since the epoch of an RFC 3339 time: ``2026-01-01T02:00:01.5+02:00``."""
    match = _STAMP.fullmatch(text)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    seconds = _epoch_seconds(whole, zone)
    if seconds is None:
        return None
    return seconds * NANOS + (int((fraction + "00000000")[:9]) if fraction else 0)


# The lines of a second share its whole part: strptime (slow) runs once per second of log.
@functools.lru_cache(maxsize=STAMP_CACHE)
def _epoch_seconds(whole: str, zone: str) -> int | None:
    """Seconds since the epoch of ``2026-01-01T02:00:01`` in ``zone`` (``Z``, ``+02:00``)."""
    try:
        moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    offset = timedelta()
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        offset = sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    return int((moment - offset).replace(tzinfo=timezone.utc).timestamp())


def since_time(nanos: int) -> str:
    """``sinceTime`` for a reconnect: the second containing ``nanos``, RFC 3339 UTC."""
    moment = datetime.fromtimestamp(nanos // NANOS, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class CleanEnd(enum.Enum):
    """What a cleanly ended connection means for the log."""

    COMPLETE = "complete"  # the whole log was read: pass on what is left, stop
    RECONNECT = "reconnect"  # a drop: reconnect after the back-off, hold the unterminated rest
    CONFIRM = "confirm"  # reconnect at once to learn whether the rest is the last words


def after_clean_end(unterminated: bytes, ended: bool, opened_after_end: bool) -> CleanEnd:
    """A connection ended cleanly leaving ``unterminated`` (bytes after the last newline).

    ``opened_after_end``: it was opened once the container was known to have terminated (it
    then held the whole file); ``ended``: the container has terminated now. A container that
    still runs means a drop. One that ended meanwhile may have written more after the break:
    half a record then is not its last words until a connection opened after the end says so.
    """
    if opened_after_end:
        return CleanEnd.COMPLETE
    if not ended:
        return CleanEnd.RECONNECT
    return CleanEnd.CONFIRM if unterminated else CleanEnd.COMPLETE


class LauncherLogStream(ReconnectingStream):
    """Follows one container's log to its end (or :meth:`stop`), feeding ``sink`` (through
    ``lines``, one of several streams' share of it, when given); ``warn`` hears of possible
    loss. :meth:`run` raises :class:`KubeError` when it cannot go on."""

    def __init__(
        self,
        api: KubeApi,
        pod: str,
        sink: LogSink,
        container: str | None = None,
        warn: Callable[[str], None] | None = None,
        rotation_warning: str = ROTATION_WARNING,
        lines: WholeLines | None = None,
    ) -> None:
        super().__init__(api)
        self.rotation_warning = rotation_warning
        self._out: LineSink = sink if lines is None else lines
        self.pod = pod
        self.container = container
        self.sink = sink
        self.warn = warn or (lambda _message: None)
        self._newest: int | None = None  # the latest timestamp passed on
        # Lines passed on stamped within SLACK_SECONDS (+1 s) of the newest: those a reconnect
        # can send again.
        self._recent: deque[tuple[int, bytes]] = deque()
        self._again: deque[tuple[int, bytes]] = deque()  # still expected on this connection
        self._warned = False
        self._after_end = False  # the current connection was opened after the container ended

    def _connect_once(self) -> bool:
        self._progress = False  # until the connection is established
        try:
            return self._follow_once()
        except NotFound:
            if self._pod_gone():
                return True  # the pod is gone, and its log with it
            # The pod is there but its node's kubelet does not know it: not yet (just bound),
            # or not again (restarted). Its 404 is no end: ask again.
            raise

    def _pod_gone(self) -> bool:
        try:
            self.api.get(PODS, self.pod)
        except NotFound:
            return True
        return False

    def _may_retry(self, err: KubeError) -> bool:
        # 400: the container is not running yet; 404 of a pod that exists (_connect_once): its
        # kubelet does not know it yet. The rest we retry if we may.
        return err.retryable or err.status in (400, 404)

    def _follow_once(self) -> bool:
        """Read one connection; True when the log is complete."""
        since: str | None = None
        self._again.clear()
        if self._newest is not None:
            since = since_time(self._newest - SLACK_SECONDS * NANOS)
            start = (self._newest - SLACK_SECONDS * NANOS) // NANOS * NANOS
            self._again.extend(line for line in self._recent if line[0] >= start)
        stream = self.api.follow_log(self.pod, since, self.container)
        self._progress = True  # it broke after this: not a failing server
        lines = Lines()
        with self.reading(stream):
            for chunk in stream.batches():
                self._pass_on(lines.feed(chunk))
        pending = lines.rest
        if self._stopped.is_set():
            return True
        # A clean end: the container finished, or the stream broke (kube-apiserver ends it
        # cleanly then too).
        ended = self._after_end or self._container_ended()
        verdict = after_clean_end(pending, ended, self._after_end)
        if verdict is CleanEnd.COMPLETE:
            if pending:
                self._pass_on([pending], newline=False)
            return True
        if verdict is CleanEnd.RECONNECT:
            self.api.clock.sleep(self.api.retry.base_delay)
        self._after_end = verdict is CleanEnd.CONFIRM
        self.reconnects += 1
        return False

    def _pass_on(self, lines: list[bytes], newline: bool = True) -> None:
        """Strip the timestamps of a chunk's lines and feed the sink the new ones at once (one
        feed per chunk, not per line: 256 ranks write hundreds of lines a second)."""
        end = b"\n" if newline else b""
        batch: list[bytes] = []
        for raw in lines:
            stamp, _, content = raw.partition(b" ")
            nanos = parse_timestamp(stamp.decode("ascii", errors="replace"))
            if nanos is None:
                batch.append(raw + end)  # no timestamp: as it is
                continue
            if self._again:
                if self._again[0] == (nanos, content):
                    self._again.popleft()
                    continue
                self._again.clear()  # what we had passed on is not in the file any more
                if not self._warned:
                    self._warned = True
                    self._feed(batch)  # the lines before it, then the warning
                    batch = []
                    self.warn(self.rotation_warning)
            self._remember(nanos, content)
            batch.append(content + end)
        self._feed(batch)

    def _feed(self, batch: list[bytes]) -> None:
        if batch:
            self._out.feed(b"".join(batch))

    def _remember(self, nanos: int, content: bytes) -> None:
        self._newest = nanos if self._newest is None else max(self._newest, nanos)
        self._recent.append((nanos, content))
        oldest = self._newest - (SLACK_SECONDS + 1) * NANOS
        while self._recent and self._recent[0][0] < oldest:
            self._recent.popleft()

    def _container_ended(self) -> bool:
        return podstatus.containers_ended(self.api.get(PODS, self.pod), self.container)
