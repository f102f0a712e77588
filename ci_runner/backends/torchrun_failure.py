"""The first failing rank of a torchrun run, in one line: pure functions over its log's lines.

Two sources, read in one pass (:mod:`ci_runner.torchrun_output` has their format):

* the ranks' own lines, ``[1]<std>:...``: the traceback Python writes for an uncaught exception
  (inside torch's ``[rank1]: `` once the rank called ``init_process_group``), and each rank's last
  line;
* torchrun's report when it ends on a failure (``ChildFailedError``): under its root cause, the
  rank, its exit code (negative: the signal that ended it) and, when the rank's entry point is
  decorated with ``@record``, the traceback of its error file.

The first failing rank is the report's root cause; with several reports (a log of every node)
the earliest, a rank that only failed because another did (torchrun's SIGTERM to the rest of
its group, a collective whose peer died) after any other. Without a report (a log cut short),
the first rank whose traceback ends in an exception. Where the exception was raised is the
innermost frame of the user's code: under ``code_dir`` when given, and never a library's
(site-packages, the standard library).
"""

from __future__ import annotations

import posixpath
import re
import signal
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from ci_runner.torchrun_output import (
    CLOSING_SIGNAL,
    EXCEPTHOOK_PREFIX,
    LINE_PREFIX,
    NOT_AVAILABLE,
    PEER_GONE,
    REPORT_BORDER,
    REPORT_CONTINUATION_INDENT,
    REPORT_EXITCODE,
    REPORT_FAILURE_INDEX,
    REPORT_FIELD,
    REPORT_RANK,
    ROOT_CAUSE_HEADING,
)

# Python's traceback module: a traceback's first line, and each frame's.
TRACEBACK_START: Final = "Traceback (most recent call last):"
_FRAME: Final = re.compile(r'\s*File "(?P<path>[^"]+)", line (?P<line>[0-9]{1,9})\b')
_LIBRARY: Final = re.compile(r"/(?:site|dist)-packages/|/lib/python[0-9.]*/|^<")
_SITE: Final = re.compile(r".*/(?:site|dist)-packages/")
_FRAMES_KEPT: Final = 256  # the innermost ones: where it was raised
_TEXT_KEPT: Final = 300  # characters of an exception's message or a last line, in the one line
# Bytes of the saved log's end a backend reads back for the first failure: torchrun's reports
# (about 2 KB a node) and the failing rank's traceback, among every other rank's (their
# tracebacks of a collective whose peer died come after it).
LOG_READ_BYTES: Final = 1024 * 1024


@dataclass(frozen=True)
class RankFailure:
    """How the first failing rank failed, and the line that says so (:meth:`line`)."""

    rank: int
    exitcode: int | None = None  # torchrun's report's; negative: the signal's number
    signal_name: str | None = None  # e.g. SIGKILL, when a signal ended the rank
    exception: str | None = None  # "ValueError: boom" (the type, then its message's first line)
    where: str | None = None  # "train.py:12": where the user's code raised it
    last_line: str | None = None  # the rank's last line in the log
    host: str | None = None  # the report's host name, when there is a report

    def line(self) -> str:
        """``rank 1 raised ValueError: boom (train.py:12)``, ``rank 1 was killed by signal 9
        (SIGKILL)``, ``rank 1 exited with code 3; its last line: giving up``."""
        if self.exitcode is not None and self.exitcode < 0:
            name = f" ({self.signal_name})" if self.signal_name else ""
            return f"rank {self.rank} was killed by signal {-self.exitcode}{name}"
        if self.exception is not None:
            where = f" ({self.where})" if self.where else ""
            return f"rank {self.rank} raised {self.exception}{where}"
        said = f"; its last line: {self.last_line}" if self.last_line else ""
        code = "an unknown code" if self.exitcode is None else f"code {self.exitcode}"
        return f"rank {self.rank} exited with {code}{said}"


def failure_line(lines: Iterable[str], code_dir: str = "") -> str | None:
    """The one line of :func:`first_failure`, or None when the lines show no failed rank."""
    failure = first_failure(lines, code_dir)
    return None if failure is None else failure.line()


def first_failure(lines: Iterable[str], code_dir: str = "") -> RankFailure | None:
    """The first failing rank of the log ``lines`` (one node's or every node's, with their
    prefixes; the whole log, or enough of its end to hold torchrun's report and the rank's
    traceback), or None when they show none. ``code_dir``: the checkout the ranks ran in; paths
    under it are shown relative to it, others by their file's name."""
    reader = _LogReader()
    for line in lines:
        reader.feed(line.rstrip("\r\n"))
    causes = sorted(reader.causes, key=lambda cause: _cause_order(cause, reader))
    if causes:
        return _explained(causes[0], reader, code_dir)
    raised = sorted(
        (rank for rank in reader.ranks.values() if rank.tracebacks.last is not None),
        key=lambda rank: (_peer_gone(rank.tracebacks.last), rank.tracebacks.last_at),
    )
    if not raised:
        return None
    return _explained(_RootCause(raised[0].rank), reader, code_dir)


@dataclass
class _Traceback:
    frames: deque[tuple[str, int]] = field(default_factory=lambda: deque(maxlen=_FRAMES_KEPT))
    exception: str = ""


class _Tracebacks:
    """Reads one stream of lines for Python tracebacks; keeps the last one that ended."""

    def __init__(self) -> None:
        self.reading: _Traceback | None = None
        self.last: _Traceback | None = None
        self.last_at = 0  # the number of the line that ended it

    def feed(self, text: str, number: int) -> None:
        if text == TRACEBACK_START:
            self.reading = _Traceback()
            return
        if self.reading is None:
            return
        frame = _FRAME.match(text)
        if frame is not None:
            self.reading.frames.append((frame["path"], int(frame["line"])))
        elif text.strip() and not text[0].isspace():  # the exception's line ends it
            self.reading.exception = text.strip()
            self.last, self.last_at, self.reading = self.reading, number, None


@dataclass
class _Rank:
    rank: int
    tracebacks: _Tracebacks = field(default_factory=_Tracebacks)
    last_line: str = ""


@dataclass
class _RootCause:
    """One report's root cause, as far as read."""

    rank: int
    exitcode: int | None = None
    signal_name: str | None = None
    time: str = ""
    host: str | None = None
    tracebacks: _Tracebacks = field(default_factory=_Tracebacks)
    order: int = 0  # the report's place among the log's reports


class _LogReader:
    """One pass over a torchrun log: each rank's tracebacks and last line, each report's root
    cause."""

    def __init__(self) -> None:
        self.ranks: dict[int, _Rank] = {}
        self.causes: list[_RootCause] = []
        self._cause: _RootCause | None = None  # the root cause being read
        self._field = ""  # the field being read
        self._number = 0

    def feed(self, line: str) -> None:
        self._number += 1
        prefix = LINE_PREFIX.match(line)
        if prefix is None:
            self._report_line(line)
            return
        number = int(prefix.group(1))
        rank = self.ranks.setdefault(number, _Rank(number))
        text = line[prefix.end() :]
        hooked = EXCEPTHOOK_PREFIX.match(text)
        text = text[hooked.end() :] if hooked else text
        rank.tracebacks.feed(text, self._number)
        if text.strip():
            rank.last_line = text.strip()

    def _report_line(self, line: str) -> None:
        """A line of torchrun's own: the report's root cause is read, field by field."""
        cause = self._cause
        if cause is None:
            if line.strip() == ROOT_CAUSE_HEADING:
                self._cause, self._field = _RootCause(-1, order=len(self.causes)), ""
            return
        if REPORT_BORDER.fullmatch(line):
            if cause.rank >= 0:
                self.causes.append(cause)
            self._cause = None
            return
        found = REPORT_FIELD.fullmatch(line)
        if found is not None:
            self._field = found["name"]
            _set_field(cause, found["name"], found["value"].strip(), self._number)
        elif self._field == "traceback" and line.startswith(REPORT_CONTINUATION_INDENT):
            text = line[len(REPORT_CONTINUATION_INDENT) :]
            cause.tracebacks.feed(text, self._number)
        elif not REPORT_FAILURE_INDEX.fullmatch(line):
            self._field = ""


def _set_field(cause: _RootCause, name: str, value: str, number: int) -> None:
    """One ``name : value`` field of the report's root cause."""
    if name == "rank" and (rank := REPORT_RANK.match(value)):
        cause.rank = int(rank["rank"])
    elif name == "exitcode" and (code := REPORT_EXITCODE.match(value)):
        cause.exitcode = int(code["code"])
        cause.signal_name = code["signal"] or _signal_name(cause.exitcode)
    elif name == "time":
        cause.time = value
    elif name == "host" and value and value != NOT_AVAILABLE:
        cause.host = value
    elif name == "traceback":
        cause.tracebacks.feed(value, number)


def _signal_name(exitcode: int) -> str | None:
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


def _peer_gone(traceback: _Traceback | None) -> bool:
    return traceback is not None and PEER_GONE.search(traceback.exception) is not None


def _cause_order(cause: _RootCause, reader: _LogReader) -> tuple[bool, str, int]:
    """Root causes by: failed by itself first, then the report's time, then the log's order."""
    rank = reader.ranks.get(cause.rank)
    traceback = cause.tracebacks.last or (rank.tracebacks.last if rank else None)
    consequence = cause.exitcode == -CLOSING_SIGNAL or _peer_gone(traceback)
    return consequence, cause.time, cause.order


def _explained(cause: _RootCause, reader: _LogReader, code_dir: str) -> RankFailure:
    """What is known of ``cause``'s rank: the report's traceback, else the rank's own in the log
    when its exit code is Python's for an uncaught exception (1), or unknown."""
    rank = reader.ranks.get(cause.rank, _Rank(cause.rank))
    traceback = cause.tracebacks.last
    if traceback is None and cause.exitcode in (None, 1):
        traceback = rank.tracebacks.last
    exception = where = None
    if traceback is not None:
        exception = _shortened(traceback.exception)
        where = _where(list(traceback.frames), code_dir)
    return RankFailure(
        rank=cause.rank,
        exitcode=cause.exitcode,
        signal_name=cause.signal_name,
        exception=exception,
        where=where,
        last_line=_shortened(rank.last_line) or None,
        host=cause.host,
    )


def _shortened(text: str) -> str:
    return text if len(text) <= _TEXT_KEPT else text[: _TEXT_KEPT - 3].rstrip() + "..."


def _where(frames: list[tuple[str, int]], code_dir: str) -> str | None:
    """``file:line`` of the innermost frame of the user's code (under ``code_dir`` when given,
    never a library's), else of the innermost frame."""
    if not frames:
        return None
    root = posixpath.normpath(code_dir) + "/" if code_dir else ""
    paths = [(posixpath.normpath(path), line) for path, line in frames]
    user = [(path, line) for path, line in paths if not _LIBRARY.search(path)]
    under = [(path, line) for path, line in user if root and path.startswith(root)]
    path, line = (under or user or paths)[-1]
    if root and path.startswith(root):
        shown = path[len(root) :]
    elif _SITE.match(path):
        shown = _SITE.sub("", path, count=1)
    else:
        shown = posixpath.basename(path)
    return f"{shown}:{line}"
