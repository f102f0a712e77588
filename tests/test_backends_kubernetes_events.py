"""events: which Events are news about this job."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ci_runner.backends.kubernetes.events import about_job, event_time, stale_scheduling_event

JSON = dict[str, Any]


def involving(kind: str, name: str, uid: str | None = None) -> JSON:
    return {"involvedObject": {"kind": kind, "name": name, **({"uid": uid} if uid else {})}}


def test_the_jobs_own_events_are_kept_and_others_left() -> None:
    kept = [
        involving("MPIJob", "j", "u1"),
        involving("MPIJob", "j"),
        involving("Job", "j-launcher"),
        involving("Pod", "j-worker-0"),
        involving("Pod", "j-launcher-x7k2p"),
    ]
    assert [about_job(event, "j", "u1") for event in kept] == [True] * len(kept)
    left = [
        involving("MPIJob", "j", "u0"),  # an earlier job of that name
        involving("MPIJob", "j2", "u1"),
        involving("Job", "j2-launcher"),
        involving("Pod", "j-worker-x"),
        involving("Pod", "j2-worker-0"),
        involving("Pod", "j-launcher-X"),
        involving("Service", "j-worker-0"),
    ]
    assert [about_job(event, "j", "u1") for event in left] == [False] * len(left)
    # The name is matched as it is, not as a pattern.
    assert not about_job(involving("Pod", "jx-worker-0"), "j.", "")


def test_an_events_time_is_its_series_then_last_timestamp_then_event_time() -> None:
    series = {
        "series": {"lastObservedTime": "2026-01-01T00:00:03.5+02:00"},
        "lastTimestamp": "2026-01-01T00:00:02Z",
        "eventTime": "2026-01-01T00:00:01.000001Z",
    }
    moment = datetime(2025, 12, 31, 22, 0, 3, 500000, tzinfo=timezone.utc)
    assert event_time(series) == moment
    assert event_time({**series, "series": None}) == datetime(
        2026, 1, 1, 0, 0, 2, tzinfo=timezone.utc
    )
    assert event_time({"lastTimestamp": None, "eventTime": "2026-01-01T00:00:01.000001Z"}) == (
        datetime(2026, 1, 1, 0, 0, 1, 1, tzinfo=timezone.utc)
    )
    assert event_time({"lastTimestamp": "not a time"}) is None


def test_a_scheduling_event_from_before_what_we_know_is_stale() -> None:
    event = {**involving("Pod", "j-worker-0", "p1"), "lastTimestamp": "2026-01-01T00:00:00Z"}
    pending = {"metadata": {"uid": "p1"}, "spec": {}, "status": {"phase": "Pending"}}
    job = {"metadata": {"creationTimestamp": "2025-12-31T23:00:00Z"}}
    assert not stale_scheduling_event(event, pending, job)
    assert not stale_scheduling_event(event, None, None)
    scheduled = {**pending, "spec": {"nodeName": "node-1"}}
    assert stale_scheduling_event(event, scheduled, job)
    earlier_pod = {**pending, "metadata": {"uid": "p0"}}
    assert stale_scheduling_event(event, earlier_pod, job)
    later_job = {"metadata": {"creationTimestamp": "2026-01-01T00:00:01Z"}}
    assert stale_scheduling_event(event, pending, later_job)
