"""Where a waiting job stands in its LocalQueue, from Kueue's visibility API (an aggregated API
that Kueue serves through kube-apiserver, on by default since Kueue v0.9: its VisibilityOnDemand
feature gate). A cluster that does not serve it, or a Role without its right, gives no position:
asked once, then not again."""

from __future__ import annotations

from typing import NamedTuple

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import KubeError
from ci_runner.backends.kubernetes.resources import PENDING_WORKLOADS


class Position(NamedTuple):
    """1-based place among the LocalQueue's pending Workloads, and how many there are."""

    place: int
    pending: int


class QueuePosition:
    """Asks Kueue for a Workload's position in its LocalQueue, until an answer says it cannot."""

    def __init__(self, api: KubeApi, local_queue: str) -> None:
        self.api = api
        self.local_queue = local_queue
        self.served = True

    def of(self, workload: str) -> Position | None:
        """``workload``'s position; None when it is not pending or the API gives none."""
        if not self.served:
            return None
        try:
            summary = self.api.get(PENDING_WORKLOADS, self.local_queue)
        except KubeError as err:
            # Not served (404, an APIService unavailable: 503), or not allowed (403): no
            # position for this run. Anything else may pass: ask again next time.
            self.served = err.status not in (403, 404, 503)
            return None
        items = summary.get("items") or []
        for item in items:
            if (item.get("metadata") or {}).get("name") == workload:
                place = item.get("positionInLocalQueue")
                return Position(int(place) + 1, len(items)) if isinstance(place, int) else None
        return None
