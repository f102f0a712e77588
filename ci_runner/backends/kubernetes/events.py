"""Which Events are news about this job: pure functions over Event dicts.

The namespace's Events watch hears of every object; only the MPIJob's, its launcher Job's and
its pods' Events reach the tracker, and a scheduling Event a relist replays from before what we
know is not news.
"""

from __future__ import annotations

import re
from datetime import datetime

from ci_runner.backends.kubernetes.podstatus import is_scheduled
from ci_runner.backends.kubernetes.resources import JSON


def about_job(event: JSON, mpijob_name: str, job_uid: str) -> bool:
    """The Event is about MPIJob ``mpijob_name`` (of uid ``job_uid``: not an earlier job of
    that name), its launcher Job or one of its pods."""
    involved = event.get("involvedObject", {})
    name = str(involved.get("name", ""))
    if involved.get("kind") == "MPIJob":
        return name == mpijob_name and involved.get("uid") in (None, "", job_uid)
    if involved.get("kind") == "Job":  # the launcher Job's (the Job controller's FailedCreate)
        return name == f"{mpijob_name}-launcher"
    job = re.escape(mpijob_name)
    return involved.get("kind") == "Pod" and bool(
        re.fullmatch(rf"{job}-(worker-\d+|launcher-[a-z0-9]+)", name)
    )


def _moment(text: object) -> datetime | None:
    """An API timestamp (RFC 3339, ``Z`` or an offset, MicroTime's fraction too)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def event_time(event: JSON) -> datetime | None:
    """When an Event last happened: its series' last observation, lastTimestamp (core/v1),
    else eventTime (events.k8s.io writers fill only that)."""
    series = event.get("series") or {}
    for text in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
    ):
        moment = _moment(text)
        if moment is not None:
            return moment
    return None


def stale_scheduling_event(event: JSON, pod: JSON | None, mpijob: JSON | None) -> bool:
    """A FailedScheduling Event older than what we know (a relist replays every Event kept,
    an hour by default): about a pod that has a node by now or an earlier pod of that name,
    or from before this MPIJob was created (an earlier job of the same name)."""
    if pod is not None:
        uid = event.get("involvedObject", {}).get("uid")
        if is_scheduled(pod) or (uid and uid != pod.get("metadata", {}).get("uid")):
            return True
    created = _moment((mpijob or {}).get("metadata", {}).get("creationTimestamp"))
    happened = event_time(event)
    return created is not None and happened is not None and happened < created
