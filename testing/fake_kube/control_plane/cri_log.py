"""Container logs as a node keeps them: CRI-format files, rotated, read with the kubelet's rules.

A line in a file is ``<RFC3339Nano in the node's zone> <stdout|stderr> <F|P> <text>``
(``pkg/kubelet/kuberuntime/logs/logs.go`` parseCRILog); ``P`` marks a partial line whose rest
follows. stdout and stderr go to the same file in the order the runtime read them, so their
timestamps need not be ordered. :meth:`ContainerLog.read` answers ``/containerLogs`` like
``ReadLogs``: only the current file (rotated files are never served), ``sinceTime`` /
``sinceSeconds`` compared with each line's time, ``tailLines``, ``limitBytes``, ``timestamps``
printed as RFC3339NanoFixed in the node's zone, and with ``follow`` new lines (across a rotation,
the new file) until the container has stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from testing.fake_kube.server import parse_rfc3339, rfc3339_nano


@dataclass(frozen=True)
class Entry:
    nanos: int
    stream: str  # "stdout" | "stderr"
    tag: str  # "F" full line, "P" partial
    text: str

    def cri(self, zone: timedelta) -> str:
        """The line as it is written in the log file."""
        return f"{rfc3339_nano(self.nanos, zone)} {self.stream} {self.tag} {self.text}"


@dataclass
class ContainerLog:
    """One container instance's log files (the last is the current one)."""

    zone: timedelta
    cond: threading.Condition
    files: list[list[Entry]] = field(default_factory=lambda: [[]])
    running: bool = True
    cuts: set[tuple[int, int]] = field(default_factory=set)  # (file, entry) to cut streams at

    def write(self, entry: Entry, cut: bool = False) -> None:
        with self.cond:
            self.files[-1].append(entry)
            if cut:
                self.cuts.add((len(self.files) - 1, len(self.files[-1]) - 1))
            self.cond.notify_all()

    def rotate(self) -> None:
        """The kubelet's log rotation (containerLogManager): the current file is renamed away
        and the runtime reopens an empty one."""
        with self.cond:
            self.files.append([])
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.running = False
            self.cond.notify_all()

    def file_text(self, index: int = -1) -> str:
        """A log file's content, exactly as on the node's disk."""
        with self.cond:
            return "".join(e.cri(self.zone) + "\n" for e in self.files[index])

    def read(
        self, query: dict[str, str], now: Callable[[], float], stopping: Callable[[], bool]
    ) -> Iterator[tuple[str, bool]]:
        """The response body in pieces, each with whether the stream is cut after it."""
        since = None
        if query.get("sinceTime"):
            since = parse_rfc3339(query["sinceTime"])
        elif query.get("sinceSeconds"):
            since = int((now() - int(query["sinceSeconds"])) * 1_000_000_000)
        stamps = query.get("timestamps") == "true"
        follow = query.get("follow") == "true"
        limit = int(query["limitBytes"]) if query.get("limitBytes") else None
        with self.cond:
            file_index = len(self.files) - 1
            start = 0
            if query.get("tailLines"):
                start = max(0, len(self.files[file_index]) - int(query["tailLines"]))
        position, sent = start, 0
        while True:
            with self.cond:
                while not (
                    len(self.files[file_index]) > position
                    or len(self.files) - 1 > file_index
                    or not self.running
                    or not follow
                    or stopping()
                ):
                    self.cond.wait(timeout=0.05)
                new = self.files[file_index][position:]
                first, position = position, len(self.files[file_index])
                cuts = {i for f, i in self.cuts if f == file_index}
                rotated = len(self.files) - 1 > file_index
                ended = not self.running or not follow or stopping()
            for offset, entry in enumerate(new):
                if since is not None and entry.nanos < since:
                    continue  # ReadLogs: `!msg.timestamp.Before(opts.since)`
                text = entry.text + ("\n" if entry.tag == "F" else "")
                if stamps:
                    text = f"{rfc3339_nano(entry.nanos, self.zone)} {text}"
                if limit is not None and sent + len(text.encode()) > limit:
                    yield text.encode()[: limit - sent].decode(errors="ignore"), False
                    return
                sent += len(text.encode())
                if first + offset in cuts:
                    with self.cond:
                        self.cuts.discard((file_index, first + offset))
                    yield text[: len(text) // 2], True
                    return
                yield text, False
            if rotated and follow:
                file_index, position = file_index + 1, 0  # waitLogs: reopen after rotation
                continue
            if ended:
                with self.cond:
                    if len(self.files[file_index]) == position:
                        return
