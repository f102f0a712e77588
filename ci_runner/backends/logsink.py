"""The training log's one way out: mask secrets, echo to the CI log, save to a file, keep a tail.

Backends feed it chunks as they arrive (bytes or text, split anywhere, even inside a UTF-8
character or a secret); it passes on whole lines, all those a chunk completes at once: the work per
chunk is a few C-level passes over its text, none per line. Memory stays bounded however long the
log or a line.
"""

from __future__ import annotations

import codecs
from collections import deque
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Final, TextIO

from ci_runner.masking import SecretMasker

# A line longer than this is passed on in pieces so one huge line cannot exhaust memory.
MAX_SINK_LINE_CHARS: Final = 64 * 1024
# Characters of a line kept in the tail (in memory, or read back from a saved log).
KEPT_TAIL_LINE_CHARS: Final = 2000
_TAIL_KEPT: Final = (
    2 * KEPT_TAIL_LINE_CHARS
)  # room for the trailing "\r"s cut when the tail is read


class LogSink:
    """Receives a log stream, writes its complete lines (masked) to the echo and to ``path``.

    Each call of ``echo`` gets one or more whole lines (a piece of an overlong line at most).

    Use as a context manager, or call :meth:`close` to flush a final unterminated line.
    """

    def __init__(
        self,
        path: Path,
        echo: Callable[[str], None],
        masker: SecretMasker | None = None,
        tail_size: int = 60,
        max_line_chars: int = MAX_SINK_LINE_CHARS,
    ) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = path.open("w", encoding="utf-8", newline="\n")
        self._echo = echo
        self._masker = masker or SecretMasker()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._tail: deque[str] = deque(maxlen=tail_size)
        self._max_line = max(max_line_chars, 2 * self._masker.longest + 1)
        self._continuing = False  # the last piece written ended mid-line
        self._shown: list[str] = []  # written, to be echoed once flushed
        self.lines = 0
        self.closed = False

    def feed(self, data: bytes | str) -> None:
        """Take the next piece of the stream, however it is split."""
        text = self._decoder.decode(data) if isinstance(data, bytes) else data
        if not text:
            return
        last = text.rfind("\n")
        if last < 0:
            self._pending += text
        else:
            lines = self._pending + text[: last + 1]
            self._pending = text[last + 1 :]
            self._emit(lines)
        if len(self._pending) > self._max_line:
            # Mask what we have, then hold back only what could be the start of a secret that
            # the next piece completes: every whole occurrence is already replaced.
            masked = self._masker.mask(self._pending)
            cut = len(masked) - max(self._masker.longest - 1, 0)
            self._pending = masked[cut:]
            self._emit(masked[:cut], already_masked=True)
        self._publish()

    def _publish(self) -> None:
        # On disk before it is shown: whatever the CI log shows, a killed ci-runner (a
        # cancelled CI job) has left in the saved log for `ci-runner cancel` and the artifacts.
        if not self._shown:
            return
        self._file.flush()
        # Taken before echoing: Ctrl-C inside an echo must not show these lines twice.
        shown, self._shown = self._shown, []
        for text in shown:
            self._echo(text)

    def _emit(self, piece: str, already_masked: bool = False) -> None:
        """Save and show ``piece``: whole lines, or a part of an overlong one."""
        masked = piece if already_masked else self._masker.mask(piece)
        self._file.write(masked)
        self._shown.append(masked)
        newlines = masked.count("\n")
        self.lines += newlines
        self._remember(masked, newlines)

    def _remember(self, masked: str, newlines: int) -> None:
        """Keep the last lines of ``masked`` in the tail: split only as far as the tail reaches."""
        keep = self._tail.maxlen or 0
        segments = masked.rsplit("\n", keep + 1)
        complete = masked.endswith("\n")
        if complete:
            segments.pop()  # the empty text after the last newline
        first = 0
        if newlines > keep + 1:
            first = 1  # the lines before the tail, unsplit
        elif self._continuing and self._tail:
            self._tail[-1] = (self._tail[-1] + segments[0])[:_TAIL_KEPT]
            first = 1
        # Kept as they are, cut to a readable length when read: no work per line here.
        kept = segments[first:]
        if kept and max(map(len, kept)) > _TAIL_KEPT:
            kept = [segment[:_TAIL_KEPT] for segment in kept]
        self._tail.extend(kept)
        self._continuing = not complete

    def mask(self, text: str) -> str:
        """``text`` masked as this sink masks the log: for output shown beside it (pip's)."""
        return self._masker.mask(text)

    def flush(self) -> None:
        self._file.flush()

    @property
    def tail(self) -> tuple[str, ...]:
        """The last complete (or final partial) lines, masked, each cut to a readable length."""
        return tuple(_tail_text(line) for line in self._tail)

    def saved_lines(self, max_bytes: int) -> tuple[str, ...]:
        """The saved log's whole lines in its last ``max_bytes``, masked as written, each cut to a
        readable length: more of its end than :attr:`tail` keeps, to read a failure back."""
        if not self.closed:
            self._file.flush()
        return tail_lines(self.path, max_bytes, max_bytes)  # at most a line a byte

    def close(self) -> None:
        """Flush the decoder and any unterminated last line, then close the file."""
        if self.closed:
            return
        self._pending += self._decoder.decode(b"", final=True)
        if self._pending:
            self._emit(self._pending + "\n")
            self._pending = ""
        self._publish()
        self._file.close()
        self.closed = True

    def __enter__(self) -> LogSink:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _tail_text(line: str) -> str:
    return line.rstrip("\r")[:KEPT_TAIL_LINE_CHARS]


def tail_lines(path: Path, count: int, max_bytes: int = 256 * 1024) -> tuple[str, ...]:
    """The last ``count`` lines of a (possibly huge) log file, reading at most ``max_bytes``."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(size - max_bytes, 0))
            data = file.read()
    except FileNotFoundError:
        return ()
    lines = data.decode("utf-8", errors="replace").splitlines()
    if len(data) == max_bytes and lines:
        lines = lines[1:]  # the first line read is most likely cut
    return tuple(line[:KEPT_TAIL_LINE_CHARS] for line in lines[-count:])
