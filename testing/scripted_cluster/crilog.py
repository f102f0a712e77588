"""Container log files in the CRI format and the kubelet's way of reading them.

Writing follows containerd's ``pkg/cri/io/logger.go`` (redirectLogs): one line per record,
``<time.RFC3339Nano in the local zone> <stdout|stderr> <F|P> <text>``, P for a line the runtime
cut (the scripted kubelet says where). Rotation follows the kubelet's container log manager
(``pkg/kubelet/logs/container_log_manager.go``): a file over 10 MiB is renamed to
``<name>.<YYYYMMDD-HHMMSS>`` on the next check (every 10 s) and at most 5 files are kept.
Reading follows ``pkg/kubelet/kuberuntime/logs/logs.go`` (kubernetes@04791b4): ReadLogs reads the
current file only; NewLogOptions, logWriter.write (since, timestamps, limitBytes), tail by lines.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

MAX_SIZE = 10 * 1024 * 1024  # kubelet containerLogMaxSize default
MAX_FILES = 5  # kubelet containerLogMaxFiles default
ROTATE_CHECK_SECONDS = 10.0  # container log manager monitor period


def _zone(seconds: int, offset: int | None = None) -> str:
    if offset is None:
        offset = time.localtime(seconds).tm_gmtoff
    if offset == 0:
        return "Z"
    sign = "+" if offset > 0 else "-"
    hours, minutes = divmod(abs(offset) // 60, 60)
    return f"{sign}{hours:02d}:{minutes:02d}"


def format_nano(nanos: int, fixed: bool = False, offset: int | None = None) -> str:
    """Go's RFC3339Nano (trailing zeros trimmed) or RFC3339NanoFixed (9 digits), in the local
    zone or at ``offset`` seconds east of UTC."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    moment = time.localtime(seconds) if offset is None else time.gmtime(seconds + offset)
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", moment)
    digits = f"{fraction:09d}" if fixed else f"{fraction:09d}".rstrip("0")
    return f"{whole}{'.' + digits if digits else ''}{_zone(seconds, offset)}"


def offset_of(text: str) -> int:
    """The zone offset (seconds east of UTC) of an RFC3339 time: Go's time.Parse keeps it, so
    the kubelet's timestamps=true output shows the zone the runtime wrote."""
    if text.endswith("Z"):
        return 0
    sign = -1 if text[-6] == "-" else 1
    return sign * (int(text[-5:-3]) * 3600 + int(text[-2:]) * 60)


def parse_nano(text: str) -> int:
    """Nanoseconds since the epoch from RFC3339 with any fraction and zone."""
    body, zone = (text[:-1], "+00:00") if text.endswith("Z") else (text[:-6], text[-6:])
    whole, _, fraction = body.partition(".")
    moment = datetime.strptime(whole + zone, "%Y-%m-%dT%H:%M:%S%z")
    return int(moment.timestamp()) * 1_000_000_000 + int((fraction + "0" * 9)[:9] or 0)


def rotation_stamp() -> str:
    """The suffix of a rotated file (container_log_manager.go timestampFormat)."""
    return time.strftime("%Y%m%d-%H%M%S", time.localtime())


class LogFile:
    """One container instance's log: ``<dir>/<restartCount>.log``, a record at a time."""

    def __init__(
        self,
        directory: Path,
        restart_count: int,
        clock: Callable[[], int],
        offset: int | None = None,
    ) -> None:
        """``offset``: the runtime's zone, seconds east of UTC (the local zone when None)."""
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{restart_count}.log"
        self._clock = clock
        self._offset = offset
        self._lock = threading.Lock()
        self._file: BinaryIO = open(self.path, "ab")  # noqa: SIM115 (closed in close())
        self._last_check = time.monotonic()
        self.closed = False

    def record(self, stream: str, text: bytes, partial: bool) -> None:
        stamp = format_nano(self._clock(), offset=self._offset).encode()
        line = b"%s %s %s %s\n" % (stamp, stream.encode(), b"P" if partial else b"F", text)
        with self._lock:
            self._file.write(line)
            self._file.flush()
            if time.monotonic() - self._last_check >= ROTATE_CHECK_SECONDS:
                self._last_check = time.monotonic()
                self._rotate_if_needed()

    def _rotate_if_needed(self) -> None:
        if self._file.tell() > MAX_SIZE:
            self._rotate()

    def rotate(self) -> None:
        """Rotate now, whatever the size (as the kubelet's log manager does past its limit)."""
        with self._lock:
            self._rotate()

    def _rotate(self) -> None:
        self._file.close()
        os.rename(self.path, f"{self.path}.{rotation_stamp()}")
        self._file = open(self.path, "ab")  # noqa: SIM115
        rotated = sorted(p for p in self.path.parent.glob(self.path.name + ".*"))
        for old in rotated[: max(0, len(rotated) - (MAX_FILES - 1))]:
            old.unlink()

    def close(self) -> None:
        with self._lock:
            self._file.close()
            self.closed = True


@dataclass
class LogOptions:
    """logs.go NewLogOptions: -1 means everything; since in ns (0: no limit)."""

    tail: int = -1
    limit_bytes: int = -1
    since: int = 0
    follow: bool = False
    timestamps: bool = False


def _tail_start(data: bytes, lines: int) -> int:
    """pkg/util/tail FindTailLineStartIndex: the offset of the n-th line from the end."""
    if lines < 0:
        return 0
    end = len(data) - 1 if data.endswith(b"\n") else len(data)
    position = end
    for _ in range(lines):
        position = data.rfind(b"\n", 0, position)
        if position < 0:
            return 0
    return position + 1 if lines > 0 else len(data)


def _parse(line: bytes) -> tuple[int, int, str, bytes] | None:
    """logs.go parseCRILog: (ns, zone offset, stream, content); a P record loses its
    newline, an F record keeps it."""
    try:
        stamp, stream, rest = line.split(b" ", 2)
        tag, content = rest.split(b" ", 1) if b" " in rest else (rest.rstrip(b"\n"), b"")
        nanos = parse_nano(stamp.decode())
        offset = offset_of(stamp.decode())
    except (ValueError, IndexError):
        return None
    if stream not in (b"stdout", b"stderr"):
        return None
    if tag.split(b":")[0] == b"P" and content.endswith(b"\n"):
        content = content[:-1]
    return nanos, offset, stream.decode(), content


def read_logs(
    path: Path,
    options: LogOptions,
    write: Callable[[bytes], None],
    running: Callable[[], bool],
    stopped: Callable[[], bool] = lambda: False,
) -> None:
    """logs.go ReadLogs over the current file only: tail, then since/timestamps/limitBytes per
    record; with follow, wait for more while the container runs (rotation reopens the file)."""
    handle = open(path, "rb")  # noqa: SIM115
    try:
        data = handle.read()
        start = _tail_start(data, options.tail)
        handle.seek(start)
        limited = options.tail >= 0 and not options.follow
        left = options.tail
        remain = options.limit_bytes if options.limit_bytes >= 0 else None
        pending = b""
        while True:
            if limited and left == 0:
                return
            pending += handle.readline()
            last = False
            if not pending.endswith(b"\n"):
                if options.follow and not stopped():
                    if running():
                        time.sleep(0.05)
                        if _rotated(path, handle):
                            handle.close()
                            handle = open(path, "rb")  # noqa: SIM115
                        continue
                    more = handle.readline()  # what was written before it stopped
                    if more:
                        pending += more
                        continue
                    return  # logs.go: not running and at the end: done (incomplete dropped)
                if not pending:
                    return
                last = True  # logs.go: an incomplete last line is written, then stop
            line, pending = pending, b""
            record = _parse(line)
            if record is None:
                continue
            nanos, offset, _stream, content = record
            if nanos < options.since:
                continue
            if options.timestamps:
                content = format_nano(nanos, fixed=True, offset=offset).encode() + b" " + content
            if remain is not None:
                content = content[:remain]
                remain -= len(content)
            write(content)
            if remain is not None and remain <= 0:
                return
            if limited:
                left -= 1
            if last:
                return
    finally:
        handle.close()


def _rotated(path: Path, handle: BinaryIO) -> bool:
    try:
        return os.stat(path).st_ino != os.fstat(handle.fileno()).st_ino
    except FileNotFoundError:
        return False
