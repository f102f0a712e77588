"""One duration formatter (clock.duration): train.yaml's notation for CI log lines, the spaced
form for the MR comment."""

from __future__ import annotations

from ci_runner.clock import duration

SECONDS = (7200, 5400, 3725, 90, 59.6, 5, 0)


def test_as_train_yaml_writes_a_timeout() -> None:
    assert [duration(s) for s in SECONDS] == ["2h", "1h30m", "1h2m5s", "1m30s", "1m", "5s", "0s"]


def test_spaced_for_the_comment() -> None:
    assert [duration(s, spaced=True) for s in SECONDS] == [
        "2h 00m 00s",
        "1h 30m 00s",
        "1h 02m 05s",
        "1m 30s",
        "1m 00s",
        "5s",
        "0s",
    ]
