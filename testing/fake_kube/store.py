"""The fake kube-apiserver's storage and its object rules: what etcd plus the generic registry do.

:class:`Store` keeps objects with increasing resourceVersions and the watch history. Its
``create`` / ``update`` / ``delete`` follow kube-apiserver's registry (cited beside each rule):
generated names, 409 texts (``object is being deleted: ...``), graceful deletion of pods
(``deletionTimestamp`` first, the object goes only when the kubelet deletes it with grace 0) and
finalizers (``foregroundDeletion`` / ``orphan`` set from the propagation policy; no garbage
collector works them off here, so such an object stays terminating, as on a cluster whose
controller manager is down).

Timestamps are :attr:`Store.now` (seconds after :data:`EPOCH`), which nothing moves.
"""

from __future__ import annotations

import base64
import copy
import random
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from testing.kube_faults import status

JSON = dict[str, Any]
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
# apimachinery/pkg/util/rand/rand.go: the alphabet of generated name suffixes (no vowels).
SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


@dataclass(frozen=True)
class Kind:
    """A resource the fake serves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def key(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS = {
    k.key: k
    for k in (
        Kind("", "v1", "pods", "Pod"),
        Kind("", "v1", "secrets", "Secret"),
        Kind("", "v1", "configmaps", "ConfigMap"),
        Kind("", "v1", "services", "Service"),
        Kind("", "v1", "events", "Event"),
        Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
        Kind("", "v1", "nodes", "Node", namespaced=False),
        Kind("batch", "v1", "jobs", "Job"),
        Kind("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    )
}


class ApiError(Exception):
    """An error answer: HTTP status plus a ``Status`` body."""

    def __init__(
        self, code: int, reason: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.headers = headers or {}

    def status(self) -> JSON:
        return status(self.code, self.message, self.reason)


def not_found(key: str, name: str) -> ApiError:
    # apimachinery/pkg/api/errors/errors.go NewNotFound: `%s "%s" not found`, qualified resource.
    return ApiError(404, "NotFound", f'{key} "{name}" not found')


def rfc3339(moment: datetime | float) -> str:
    if not isinstance(moment, datetime):
        moment = EPOCH + timedelta(seconds=moment)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(nanos: int, offset: timedelta = timedelta(0)) -> str:
    """The kubelet's log timestamp (pkg/kubelet/kuberuntime/logs/logs.go timeFormatOut =
    RFC3339NanoFixed: always 9 fraction digits) in a zone ``offset`` from UTC."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    moment = (EPOCH + timedelta(seconds=seconds)).astimezone(timezone(offset))
    zone = "Z" if offset == timedelta(0) else moment.strftime("%z")
    if zone != "Z":
        zone = f"{zone[:3]}:{zone[3:]}"
    return f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{fraction:09d}{zone}"


def parse_rfc3339(text: str) -> int:
    """Nanoseconds after :data:`EPOCH` of an RFC 3339 time with any zone."""
    match = re.match(r"^(.{19})(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    zone = timezone.utc if match[3] == "Z" else datetime.strptime(match[3], "%z").tzinfo
    moment = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=zone)
    nanos = int(((match[2] or "") + "000000000")[:9])
    return int((moment - EPOCH).total_seconds()) * 1_000_000_000 + nanos


def _path_value(obj: JSON, dotted: str) -> Any:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def matches(obj: JSON, label_selector: str | None, field_selector: str | None) -> bool:
    """Equality-based label and field selectors (``a=b,c=d``, ``a!=b``)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, _, value = term.partition("=")
        negate = key.endswith("!")
        found = labels.get(key.rstrip("!=")) == value.lstrip("=")
        if found == negate:
            return False
    for term in filter(None, (field_selector or "").split(",")):
        key, _, value = term.partition("=")
        negate = key.endswith("!")
        found = str(_path_value(obj, key.rstrip("!=")) or "") == value.lstrip("=")
        if found == negate:
            return False
    return True


# k8s.io/api: the patchMergeKey of lists a strategic merge patch merges item by item (other
# lists are replaced, as in a JSON merge patch).
MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ownerReferences": "uid",
    "addresses": "type",
    "taints": "key",
}


def strategic_merge(
    target: Any, patch: Any, field: str = "", keys: dict[str, str] = MERGE_KEYS
) -> Any:
    """apimachinery/pkg/util/strategicpatch: a merge patch whose keyed lists (``keys``) merge by
    key."""
    key = keys.get(field)
    if isinstance(patch, list) and key and isinstance(target, list):
        merged = [copy.deepcopy(item) for item in target]
        for item in patch:
            at = next((i for i, old in enumerate(merged) if old.get(key) == item.get(key)), None)
            if item.get("$patch") == "delete":
                if at is not None:
                    merged.pop(at)
            elif at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = strategic_merge(merged[at], item, keys=keys)
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = strategic_merge(result.get(name), value, name, keys)
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: every list replaced."""
    return strategic_merge(target, patch, keys={})


def json_patch(target: JSON, operations: list[JSON]) -> JSON:
    """RFC 6902 add / replace / remove / test (apiserver: application/json-patch+json)."""
    doc = copy.deepcopy(target)
    for op in operations:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] == "test":
            current = node[int(last)] if isinstance(node, list) else node.get(last)
            if current != op["value"]:
                raise ApiError(
                    422, "Invalid", f"the server rejected our request: test failed at {op['path']}"
                )
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        elif isinstance(node, list):
            index = len(node) if last == "-" else int(last)
            if op["op"] == "add":
                node.insert(index, copy.deepcopy(op["value"]))
            else:
                node[index] = copy.deepcopy(op["value"])
        else:
            node[last] = copy.deepcopy(op["value"])
    return doc


class Store:
    """Objects, resourceVersions, the watch history and the control-plane clock (under ``cond``)."""

    def __init__(self, seed: int = 7) -> None:
        self.cond = threading.Condition()
        self.rv = 1
        self.now = 0.0  # seconds after EPOCH: the time of every timestamp the store writes
        self.objects: dict[tuple[str, str, str], JSON] = {}
        # (resourceVersion, kind key, namespace, event type, object)
        self.history: list[tuple[int, str, str, str, JSON]] = []
        self.compacted = 0  # a watch from below this resourceVersion gets 410 Gone
        self.rng = random.Random(seed)
        self._uids = 0

    # Every method below takes ``cond`` (it is reentrant).

    def timestamp(self) -> str:
        return rfc3339(self.now)

    def _record(self, key: str, event: str, obj: JSON) -> None:
        namespace = obj["metadata"].get("namespace", "")
        self.history.append((self.rv, key, namespace, event, copy.deepcopy(obj)))
        self.cond.notify_all()

    def _bump(self, obj: JSON) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def get(self, key: str, namespace: str, name: str) -> JSON:
        with self.cond:
            obj = self.objects.get((key, namespace, name))
            if obj is None:
                raise not_found(key, name)
            return copy.deepcopy(obj)

    def find(self, key: str, namespace: str, name: str) -> JSON | None:
        with self.cond:
            obj = self.objects.get((key, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        key: str,
        namespace: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> tuple[list[JSON], int]:
        """Matching objects in ``namespace`` ("" for every namespace), ordered by name."""
        with self.cond:
            items = [
                copy.deepcopy(obj)
                for (k, ns, _), obj in sorted(self.objects.items())
                if k == key
                and (ns == namespace or not namespace)
                and matches(obj, label_selector, field_selector)
            ]
            return items, self.rv

    def create(self, key: str, namespace: str, obj: JSON) -> JSON:
        kind = KINDS[key]
        with self.cond:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            namespace = namespace if kind.namespaced else ""
            if kind.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                # apiserver/pkg/storage/names/generate.go: base + 5 random characters.
                suffix = "".join(self.rng.choice(SUFFIX_ALPHABET) for _ in range(5))
                meta["name"] = f"{meta['generateName']}{suffix}"
            name = meta.get("name")
            if not name:
                raise ApiError(422, "Invalid", f"{kind.kind} is invalid: metadata.name: Required")
            existing = self.objects.get((key, namespace, name))
            if existing is not None:
                message = f'{key} "{name}" already exists'
                if existing["metadata"].get("deletionTimestamp"):
                    # apiserver/pkg/registry/generic/registry/store.go Create: the name of an
                    # object still terminating is refused with this prefix.
                    message = f"object is being deleted: {message}"
                raise ApiError(409, "AlreadyExists", message)
            self._uids += 1
            meta["uid"] = f"uid-{self._uids:04d}"
            meta["creationTimestamp"] = self.timestamp()
            meta.pop("deletionTimestamp", None)
            obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
            if key == "secrets":
                _encode_string_data(obj)
            if key == "jobs.batch":
                _default_job(obj)
            self._bump(obj)
            self.objects[(key, namespace, name)] = obj
            self._record(key, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(self, key: str, namespace: str, name: str, change: Callable[[JSON], None]) -> JSON:
        """Apply ``change`` to the stored object (a MODIFIED event when it changed)."""
        with self.cond:
            stored = self.objects.get((key, namespace, name))
            if stored is None:
                raise not_found(key, name)
            before = copy.deepcopy(stored)
            change(stored)
            if key == "secrets":
                _encode_string_data(stored)
            if stored == before:
                return copy.deepcopy(stored)
            meta = stored["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers") and key != "pods":
                # registry/store.go: an update that removes the last finalizer of an object being
                # deleted deletes it.
                return self._remove(key, namespace, name)
            self._bump(stored)
            self._record(key, "MODIFIED", stored)
            return copy.deepcopy(stored)

    def patch(self, key: str, namespace: str, name: str, patch: JSON) -> JSON:
        def apply(obj: JSON) -> None:
            merged = merge_patch(obj, patch)
            obj.clear()
            obj.update(merged)

        return self.update(key, namespace, name, apply)

    def delete(
        self,
        key: str,
        namespace: str,
        name: str,
        propagation: str | None = None,
        grace: int | None = None,
    ) -> JSON:
        """DELETE as the API serves it; the object, which may still exist (terminating)."""
        with self.cond:
            stored = self.objects.get((key, namespace, name))
            if stored is None:
                raise not_found(key, name)
            meta = stored["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            # registry/store.go updateForGracefulDeletionAndFinalizers: Foreground and Orphan
            # become finalizers the garbage collector works off before the object goes.
            wanted = {"Foreground": FOREGROUND, "Orphan": ORPHAN}.get(propagation or "")
            if wanted and wanted not in finalizers:
                finalizers = [f for f in finalizers if f not in (FOREGROUND, ORPHAN)] + [wanted]
            if propagation == "Background":
                finalizers = [f for f in finalizers if f not in (FOREGROUND, ORPHAN)]
            period = self._grace_period(key, stored, grace)
            if not finalizers and period == 0:
                return self._remove(key, namespace, name)

            def terminating(obj: JSON) -> None:
                m = obj["metadata"]
                if finalizers:
                    m["finalizers"] = finalizers
                if not m.get("deletionTimestamp") or period < int(
                    m.get("deletionGracePeriodSeconds") or 0
                ):
                    m["deletionTimestamp"] = rfc3339(self.now + period)
                    m["deletionGracePeriodSeconds"] = period

            return self.update(key, namespace, name, terminating)

    def _grace_period(self, key: str, pod: JSON, grace: int | None) -> int:
        """pkg/registry/core/pod/strategy.go CheckGracefulDelete: the pod's own grace period
        (default 30 s, pkg/apis/core/v1/defaults.go), 0 for a pod never bound to a node or that
        has ended; other kinds are deleted at once."""
        if key != "pods":
            return 0
        status = pod.get("status") or {}
        if not pod.get("spec", {}).get("nodeName") or status.get("phase") in (
            "Succeeded",
            "Failed",
        ):
            return 0
        if grace is not None:
            return grace
        return int(pod.get("spec", {}).get("terminationGracePeriodSeconds", 30))

    def _remove(self, key: str, namespace: str, name: str) -> JSON:
        obj = self.objects.pop((key, namespace, name))
        self._bump(obj)
        self._record(key, "DELETED", obj)
        return copy.deepcopy(obj)

    def bookmark(self) -> None:
        """A BOOKMARK for every watch that allows them, at the current resourceVersion."""
        with self.cond:
            obj = {"metadata": {"resourceVersion": str(self.rv), "namespace": ""}}
            self.history.append((self.rv, "*", "", "BOOKMARK", obj))
            self.cond.notify_all()


def _encode_string_data(secret: JSON) -> None:
    for key, value in (secret.pop("stringData", None) or {}).items():
        secret.setdefault("data", {})[key] = base64.b64encode(value.encode()).decode()


def _default_job(job: JSON) -> None:
    """What the API server adds to a new batch/v1 Job: pkg/registry/batch/job/strategy.go
    generateSelector (the controller-uid selector and the template's labels) and
    pkg/apis/batch/v1/defaults.go SetDefaults_Job (one pod, backoffLimit 6)."""
    meta, spec = job["metadata"], job.setdefault("spec", {})
    uid, name = meta["uid"], meta["name"]
    labels = {
        "batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": name,
        "controller-uid": uid,
        "job-name": name,
    }
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
    spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = 6
    for unset in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if spec.get(unset) is None:
            spec.pop(unset, None)
