"""List, then watch from the list's resourceVersion; survive drops, 410 Gone and server errors.

One :class:`Watcher` per resource, each on its own thread, hands every change to ``deliver``.
It never polls: between changes it blocks reading the watch stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ci_runner.backends.kubernetes.api import KubeApi
from ci_runner.backends.kubernetes.errors import Gone, KubeError, error_class
from ci_runner.backends.kubernetes.reconnecting import ReconnectingStream, split_lines
from ci_runner.backends.kubernetes.resources import JSON, Resource

SYNC: Final = "SYNC"  # a full listing: objects not in it are gone
CHANGES: Final = ("ADDED", "MODIFIED", "DELETED")


@dataclass(frozen=True)
class WatchUpdate:
    """A change to watched objects: one ADDED/MODIFIED/DELETED object, or a SYNC of all."""

    resource: Resource
    type: str
    objects: tuple[JSON, ...]


class Watcher(ReconnectingStream):
    """Follows one resource (optionally filtered) until stopped or a non-retryable error
    (:meth:`run` raises it).

    Given a ``resource_version`` (from a list the caller made), it watches from there at once.
    """

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        deliver: Callable[[WatchUpdate], None],
        label_selector: str | None = None,
        field_selector: str | None = None,
        keep: Callable[[JSON], bool] | None = None,
        resource_version: str | None = None,
    ) -> None:
        super().__init__(api)
        self.resource = resource
        self.deliver = deliver
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.keep = keep or (lambda _obj: True)
        # Where the next watch resumes; None: list first. Kept here so a dropped connection
        # resumes after the last change we delivered.
        self.resource_version = resource_version

    def _connect_once(self) -> bool:
        """List when we must, then watch one connection to its end; never the end of it all."""
        try:
            if self.resource_version is None:
                self.resource_version = self._list()
            events = self._watch()
        except Gone:
            self.resource_version = None
            return False
        if not events and not self._stopped.is_set():
            # The server ended an idle watch (its timeout): come back, gently.
            self.api.clock.sleep(self.api.retry.base_delay)
        return False

    def _list(self) -> str:
        listing = self.api.list(self.resource, self.label_selector, self.field_selector)
        items = tuple(item for item in listing.get("items", []) if self.keep(item))
        self.deliver(WatchUpdate(self.resource, SYNC, items))
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    def _watch(self) -> int:
        """Read one watch connection to its end; how many changes it brought."""
        stream = self.api.watch(
            self.resource, self.resource_version or "", self.label_selector, self.field_selector
        )
        events = 0
        self._progress = False  # until this connection brings something
        with self.reading(stream):
            for line in split_lines(stream.chunks()):
                if self._stopped.is_set():
                    break
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # not an event: nothing we could act on
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    raise self._status_error(obj)
                version = obj.get("metadata", {}).get("resourceVersion")
                self._progress = True
                if kind == "BOOKMARK":
                    self.resource_version = version or self.resource_version
                    continue
                if kind not in CHANGES:
                    continue  # a type newer than us: skip it
                self.resource_version = version or self.resource_version
                events += 1
                if self.keep(obj):
                    self.deliver(WatchUpdate(self.resource, kind, (obj,)))
        return events

    def _status_error(self, status: JSON) -> KubeError:
        code = int(status.get("code") or 500)
        message = str(status.get("message") or status.get("reason") or "watch error")
        cls = error_class(code)
        return cls("watch", self.resource, self.api.namespace, code, message, self.api.host)
