"""One stream read connection after connection: what the watches and the launcher's log share.

:class:`ReconnectingStream` owns the reconnect loop (back off by the API's retry policy, start
the count afresh after a connection that worked, give up after
:data:`~ci_runner.http_policy.MAX_RECONNECT_FAILURES` in a row or on an error no retry mends);
:class:`Lines` owns the splitting of a chunked body into whole lines.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator

from ci_runner.backends.kubernetes.api import KubeApi, StreamReader
from ci_runner.backends.kubernetes.errors import KubeError
from ci_runner.http_policy import MAX_RECONNECT_FAILURES


class Lines:
    """Whole lines out of a chunked body; what follows the last newline waits in :attr:`rest`."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines ``chunk`` completes (without their newlines)."""
        self.rest += chunk
        *lines, self.rest = self.rest.split(b"\n")
        return lines


def split_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Whole non-blank lines from a chunked stream; a trailing partial line is dropped."""
    lines = Lines()
    for chunk in chunks:
        yield from (line for line in lines.feed(chunk) if line.strip())


class ReconnectingStream(StreamReader, abc.ABC):
    """Reads connection after connection (:meth:`_connect_once`) until one says the stream is
    done, :meth:`stop` is called, or an error may not be retried (then :meth:`run` raises it)."""

    def __init__(self, api: KubeApi) -> None:
        super().__init__()
        self.api = api
        self.reconnects = 0  # connections made again after the first
        # The current connection worked (the subclass says when): the back-off starts afresh.
        self._progress = False

    def run(self) -> None:
        """Read until done or :meth:`stop`; raises :class:`KubeError` if it cannot go on."""
        failures = 0
        while not self._stopped.is_set():
            try:
                if self._connect_once():
                    return
            except KubeError as err:
                if self._stopped.is_set():
                    return
                if self._progress:
                    failures = 0  # it worked for a while: start the backoff afresh
                if not self._may_retry(err) or failures >= MAX_RECONNECT_FAILURES:
                    raise
                self.reconnects += 1
                self.api.clock.sleep(self.api.retry.delay(failures, err.retry_after))
                failures += 1

    @abc.abstractmethod
    def _connect_once(self) -> bool:
        """Read one connection to its end; True when nothing more is to be read."""

    def _may_retry(self, err: KubeError) -> bool:
        """Whether another connection may mend ``err`` (429, 5xx, a broken connection)."""
        return err.retryable
