"""CRI log files written as containerd writes them and read as the kubelet reads them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.scripted_cluster import crilog
from testing.scripted_cluster.crilog import LogFile, LogOptions, format_nano, read_logs

T0 = 1_764_600_000_123_456_000  # 2025-12-01T14:40:00.123456Z


@pytest.fixture(autouse=True)
def berlin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_timestamps_are_rfc3339_nano_in_the_local_zone_trimmed_in_files_fixed_when_served() -> None:
    assert format_nano(T0) == "2025-12-01T15:40:00.123456+01:00"
    assert format_nano(T0, fixed=True) == "2025-12-01T15:40:00.123456000+01:00"
    assert format_nano(T0 - 123_456_000) == "2025-12-01T15:40:00+01:00"


def test_a_record_is_one_line_stamped_by_the_clock_in_the_local_zone(tmp_path: Path) -> None:
    clock = iter(range(T0, T0 + 10**12, 1_000_000_000))
    log = LogFile(tmp_path, 0, lambda: next(clock))
    log.record("stdout", b"x" * 5, partial=True)
    log.record("stderr", b"err", partial=False)
    log.close()
    assert log.path.read_bytes() == (
        b"2025-12-01T15:40:00.123456+01:00 stdout P xxxxx\n"
        b"2025-12-01T15:40:01.123456+01:00 stderr F err\n"
    )


def read(path: Path, **options: object) -> bytes:
    out: list[bytes] = []
    read_logs(path, LogOptions(**options), out.append, lambda: False)  # type: ignore[arg-type]
    return b"".join(out)


def test_reading_joins_partial_records_and_applies_tail_since_and_limit_bytes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "0.log"
    path.write_text(
        "2025-12-01T15:40:00.1+01:00 stdout F a\n"
        "2025-12-01T15:40:01+01:00 stderr P b\n"
        "2025-12-01T15:40:02+01:00 stderr F c\n"
        "2025-12-01T14:40:03Z stdout F d\n"
    )
    assert read(path) == b"a\nbc\nd\n"
    assert read(path, tail=2) == b"c\nd\n"
    assert read(path, limit_bytes=4) == b"a\nbc"
    # Each record is compared with since on its own: the older half of "bc" is dropped.
    assert read(path, since=T0 + 1_000_000_000) == b"c\nd\n"
    # Go's time.Parse keeps the zone a record was written in; the kubelet formats it as parsed.
    assert read(path, tail=1, timestamps=True) == b"2025-12-01T14:40:03.000000000Z d\n"


def test_a_file_over_the_size_limit_is_rotated_and_reading_sees_the_current_file_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crilog, "MAX_SIZE", 100)
    monkeypatch.setattr(crilog, "ROTATE_CHECK_SECONDS", 0.0)
    monkeypatch.setattr(crilog, "MAX_FILES", 3)
    stamps = iter(f"2025120{i}-154000" for i in range(1, 9))
    monkeypatch.setattr(crilog, "rotation_stamp", lambda: next(stamps))
    log = LogFile(tmp_path, 0, lambda: T0)
    for number in range(11):  # about 90 bytes a record: every second one rotates
        log.record("stdout", b"line %d %s" % (number, b"x" * 40), partial=False)
    log.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "0.log",
        "0.log.20251204-154000",
        "0.log.20251205-154000",
    ]
    assert read(log.path) == b"line 10 %s\n" % (b"x" * 40)
