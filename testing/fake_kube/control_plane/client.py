"""How a controller talks to the fake API server: every read and write through its API
(:meth:`FakeKubeServer.handle`), never into the store, and Events through a recorder that
aggregates repeats as client-go's does."""

from __future__ import annotations

import copy
from typing import Any

from testing.fake_kube.server import FakeKubeServer
from testing.fake_kube.store import KINDS, ApiError

JSON = dict[str, Any]


def owner_reference(owner: JSON, controller: bool = True) -> JSON:
    """apimachinery/pkg/apis/meta/v1/controller_ref.go NewControllerRef."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: JSON, owner: JSON) -> bool:
    """metav1.IsControlledBy: the controller ownerReference names ``owner``'s uid."""
    return any(
        ref.get("controller") and ref.get("uid") == owner["metadata"]["uid"]
        for ref in obj["metadata"].get("ownerReferences") or []
    )


def condition_true(obj: JSON, kind: str) -> JSON | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


class LocalApi:
    """An API client for one component (its Events name it as their source)."""

    def __init__(self, server: FakeKubeServer, component: str, host: str = "") -> None:
        self.server = server
        self.component = component
        self.host = host

    @property
    def now(self) -> float:
        return self.server.store.now

    def timestamp(self) -> str:
        return self.server.store.timestamp()

    def get(self, key: str, namespace: str, name: str) -> JSON | None:
        try:
            return self.server.handle("get", key, namespace, name)[1]
        except ApiError as err:
            if err.code == 404:
                return None
            raise

    def list(self, key: str, namespace: str, labels: str | None = None) -> list[JSON]:
        query = {"labelSelector": labels} if labels else {}
        items: list[JSON] = self.server.handle("list", key, namespace, query=query)[1]["items"]
        return items

    def create(self, key: str, namespace: str, obj: JSON) -> JSON:
        return self.server.handle("create", key, namespace, body=copy.deepcopy(obj))[1]

    def update(self, key: str, namespace: str, obj: JSON) -> JSON:
        name = obj["metadata"]["name"]
        return self.server.handle("update", key, namespace, name, body=copy.deepcopy(obj))[1]

    def patch(self, key: str, namespace: str, name: str, patch: JSON) -> JSON:
        return self.server.handle("patch", key, namespace, name, body=patch)[1]

    def update_status(self, key: str, namespace: str, obj: JSON) -> JSON:
        name = obj["metadata"]["name"]
        body = {"status": copy.deepcopy(obj.get("status", {}))}
        return self.server.handle("update", key, namespace, name, body=body, sub="status")[1]

    def delete(
        self,
        key: str,
        namespace: str,
        name: str,
        propagation: str | None = None,
        grace: int | None = None,
    ) -> None:
        body: JSON = {}
        if propagation:
            body["propagationPolicy"] = propagation
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        try:
            self.server.handle("delete", key, namespace, name, body=body)
        except ApiError as err:
            if err.code != 404:
                raise

    def bind(self, namespace: str, pod: str, node: str) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.server.handle("create", "pods", namespace, pod, body=binding, sub="binding")

    def event(self, about: JSON, kind: str, reason: str, message: str) -> JSON:
        """Record an Event; an identical one (same object, reason, message, source) has its
        count and lastTimestamp raised instead (client-go tools/record/events_cache.go
        EventCorrelator / eventObserve)."""
        meta = about["metadata"]
        namespace = meta.get("namespace") or "default"
        source = {"component": self.component, **({"host": self.host} if self.host else {})}
        for existing in self.list("events", namespace):
            involved = existing.get("involvedObject", {})
            if (
                involved.get("uid") == meta.get("uid")
                and existing.get("reason") == reason
                and existing.get("message") == message
                and existing.get("type") == kind
                and existing.get("source") == source
            ):
                patch = {
                    "count": int(existing.get("count", 1)) + 1,
                    "lastTimestamp": self.timestamp(),
                }
                return self.patch("events", namespace, existing["metadata"]["name"], patch)
        kind_info = next(k for k in KINDS.values() if k.kind == about.get("kind"))
        # tools/record/event.go makeEvent: name is the object's name and a unique hex suffix.
        stamp = int(self.now * 1e9) + len(self.server.store.history)
        return self.create(
            "events",
            namespace,
            {
                "metadata": {"name": f"{meta['name']}.{stamp:x}"},
                "involvedObject": {
                    "apiVersion": about.get("apiVersion", kind_info.api_version),
                    "kind": about["kind"],
                    "name": meta["name"],
                    "namespace": meta.get("namespace", ""),
                    "uid": meta.get("uid", ""),
                    "resourceVersion": meta.get("resourceVersion", ""),
                },
                "type": kind,
                "reason": reason,
                "message": message[:1024],
                "source": source,
                "count": 1,
                "firstTimestamp": self.timestamp(),
                "lastTimestamp": self.timestamp(),
                "reportingComponent": self.component,
                "reportingInstance": self.host,
            },
        )
