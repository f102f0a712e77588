"""The garbage collector, as a client of the fake API server.

Rules from kubernetes ``pkg/controller/garbagecollector/garbagecollector.go``: a dependent whose
owners are all gone is deleted (attemptToDeleteItem, propagation Background, or Foreground when
an owner is itself waiting for its dependents); an owner being deleted with the
``foregroundDeletion`` finalizer keeps it until its blocking dependents are gone
(processDeletingDependentsItem); with ``orphan`` its dependents lose their ownerReference to it
(orphanDependents) and then the finalizer goes.
"""

from __future__ import annotations

from typing import Any

from testing.fake_kube.control_plane.client import LocalApi
from testing.fake_kube.server import FakeKubeServer
from testing.fake_kube.store import BY_KIND, FOREGROUND, KINDS, ORPHAN

JSON = dict[str, Any]


class GarbageCollector:
    def __init__(self, server: FakeKubeServer) -> None:
        self.api = LocalApi(server, "garbage-collector")
        server.store.listeners.append(self.on_change)

    def on_change(self, event: str, key: str, obj: JSON) -> None:
        meta = obj["metadata"]
        # The graph changes only when an object goes, starts terminating, or is added (its owner
        # may be gone already); the rest cannot make anything collectable.
        relevant = (
            event == "DELETED"
            or meta.get("deletionTimestamp")
            or (event == "ADDED" and meta.get("ownerReferences"))
        )
        if key == "events" or not relevant:
            return
        objects = [o for k in KINDS if k != "events" for o in self.api.list(k, "")]
        by_uid = {o["metadata"]["uid"]: o for o in objects}
        for owner in objects:
            meta = owner["metadata"]
            finalizers = meta.get("finalizers") or []
            if meta.get("deletionTimestamp") and ORPHAN in finalizers:
                self._orphan(owner, objects)
            elif meta.get("deletionTimestamp") and FOREGROUND in finalizers:
                self._foreground(owner, objects)
        for dependent in objects:
            meta = dependent["metadata"]
            refs = meta.get("ownerReferences") or []
            gone = all(by_uid.get(r["uid"]) is None for r in refs)
            if refs and gone and not meta.get("deletionTimestamp"):
                self._delete(dependent, "Background")

    def _dependents(self, owner: JSON, objects: list[JSON]) -> list[JSON]:
        uid = owner["metadata"]["uid"]
        return [
            o
            for o in objects
            if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
        ]

    def _foreground(self, owner: JSON, objects: list[JSON]) -> None:
        blocking = []
        for dependent in self._dependents(owner, objects):
            ref = next(
                r
                for r in dependent["metadata"]["ownerReferences"]
                if r["uid"] == owner["metadata"]["uid"]
            )
            if not dependent["metadata"].get("deletionTimestamp"):
                self._delete(dependent, "Foreground")
            if ref.get("blockOwnerDeletion") and self._exists(dependent):
                blocking.append(dependent)
        if not blocking:
            self._drop_finalizer(owner, FOREGROUND)

    def _orphan(self, owner: JSON, objects: list[JSON]) -> None:
        uid = owner["metadata"]["uid"]
        for dependent in self._dependents(owner, objects):
            refs = [r for r in dependent["metadata"]["ownerReferences"] if r["uid"] != uid]
            key = BY_KIND[dependent["kind"]].key
            meta = dependent["metadata"]
            self.api.patch(
                key,
                meta.get("namespace", ""),
                meta["name"],
                {"metadata": {"ownerReferences": refs}},
            )
        self._drop_finalizer(owner, ORPHAN)

    def _exists(self, obj: JSON) -> bool:
        meta = obj["metadata"]
        found = self.api.get(BY_KIND[obj["kind"]].key, meta.get("namespace", ""), meta["name"])
        return found is not None and found["metadata"]["uid"] == meta["uid"]

    def _delete(self, obj: JSON, propagation: str) -> None:
        meta = obj["metadata"]
        self.api.delete(
            BY_KIND[obj["kind"]].key, meta.get("namespace", ""), meta["name"], propagation
        )

    def _drop_finalizer(self, owner: JSON, finalizer: str) -> None:
        meta = owner["metadata"]
        key = BY_KIND[owner["kind"]].key
        current = self.api.get(key, meta.get("namespace", ""), meta["name"])
        if current is None:
            return
        left = [f for f in current["metadata"].get("finalizers") or [] if f != finalizer]
        self.api.patch(
            key, meta.get("namespace", ""), meta["name"], {"metadata": {"finalizers": left}}
        )
