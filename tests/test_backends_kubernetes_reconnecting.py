"""reconnecting: the reconnect loop and the line splitting the watches and the log share."""

from __future__ import annotations

from collections.abc import Callable

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import KubeError, error_class
from ci_runner.backends.kubernetes.reconnecting import Lines, ReconnectingStream, split_lines
from ci_runner.backends.kubernetes.resources import PODS
from ci_runner.clock import ManualClock
from ci_runner.http_policy import KUBERNETES_RETRY, MAX_RECONNECT_FAILURES


def test_split_lines_keeps_only_whole_lines() -> None:
    chunks = [b'{"a":', b'1}\n{"b":2}\n\n{"c"', b":3}\n", b'{"partial"']
    assert list(split_lines(chunks)) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']


def test_lines_hold_the_unterminated_rest() -> None:
    lines = Lines()
    assert lines.feed(b"a\nb") == [b"a"]
    assert lines.feed(b"c\n\n") == [b"bc", b""]
    assert lines.feed(b"d") == []
    assert lines.rest == b"d"


def failure(status: int) -> KubeError:
    return error_class(status)("watch", PODS, "ml", status, "m")


Step = Callable[["Scripted"], bool]


class Scripted(ReconnectingStream):
    """Each connection does the next step: returns (True: done) or raises."""

    def __init__(self, steps: list[Step], may_retry_400: bool = False) -> None:
        client = kubernetes.client.ApiClient(kubernetes.client.Configuration())
        super().__init__(KubeApi(client, "ml", ManualClock(), KUBERNETES_RETRY))
        self.steps = steps
        self.may_retry_400 = may_retry_400
        self.connections = 0

    @property
    def sleeps(self) -> list[float]:
        assert isinstance(self.api.clock, ManualClock)
        return self.api.clock.sleeps

    def _connect_once(self) -> bool:
        self.connections += 1
        return self.steps.pop(0)(self)

    def _may_retry(self, err: KubeError) -> bool:
        return err.retryable or (self.may_retry_400 and err.status == 400)


def fails(status: int, progress: bool = False) -> Step:
    def step(stream: Scripted) -> bool:
        stream._progress = progress
        raise failure(status)

    return step


def done(_stream: Scripted) -> bool:
    return True


def test_retryable_errors_back_off_until_a_connection_is_done() -> None:
    stream = Scripted([fails(500), fails(503), fails(429), done])
    stream.run()
    assert stream.connections == 4
    assert stream.reconnects == 3
    assert stream.sleeps == [1.0, 2.0, 4.0]


def test_a_connection_that_worked_starts_the_back_off_afresh() -> None:
    stream = Scripted([fails(500), fails(500), fails(500, progress=True), done])
    stream.run()
    assert stream.sleeps == [1.0, 2.0, 1.0]


def test_it_gives_up_after_max_failures_in_a_row() -> None:
    stream = Scripted([fails(500)] * (MAX_RECONNECT_FAILURES + 1))
    with pytest.raises(KubeError, match="500"):
        stream.run()
    assert stream.connections == MAX_RECONNECT_FAILURES + 1
    assert len(stream.sleeps) == MAX_RECONNECT_FAILURES


def test_an_error_no_retry_mends_is_raised_at_once_unless_the_stream_may_retry_it() -> None:
    with pytest.raises(KubeError, match="400"):
        Scripted([fails(400)]).run()
    stream = Scripted([fails(400), done], may_retry_400=True)
    stream.run()
    assert stream.sleeps == [1.0]


def test_a_stopped_stream_reads_no_more_and_raises_nothing() -> None:
    def stopped_then_broke(stream: Scripted) -> bool:
        stream.stop()
        raise failure(403)

    stream = Scripted([stopped_then_broke, done])
    stream.run()
    assert stream.connections == 1
    assert stream.sleeps == []
