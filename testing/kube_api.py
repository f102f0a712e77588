"""A small client of the Kubernetes API for the tests' clusters (the control plane, the scripted
and the emulated cluster, their harnesses): plain HTTP, as any controller talks to the API
server (list, watch with resourceVersion, status subresource, events)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

JSON = dict[str, Any]
WATCH_TIMEOUT_SECONDS = 60  # watches end cleanly after this and are resumed


class Gone(Exception):
    """410: the resourceVersion a watch resumed from was compacted; list again."""


class ApiFailure(Exception):
    def __init__(self, code: int, text: str) -> None:
        super().__init__(f"{code}: {text}")
        self.code = code
        self.message = _status_message(text)


def _status_message(text: str) -> str:
    """A Status answer's message (what client-go's errors print), else the answer's text."""
    try:
        body = json.loads(text)
    except ValueError:
        return text
    message = body.get("message") if isinstance(body, dict) else None
    return message if isinstance(message, str) else text


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Api:
    """HTTP(S) against one API server as one user: a bearer token or a client certificate
    (``cert``: certificate and key files), the server checked against ``ca``."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        ca: Path | None = None,
        cert: tuple[Path, Path] | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self._session = requests.Session()
        if token is not None:
            self._session.headers["Authorization"] = f"Bearer {token}"
        if ca is not None:
            # Only this CA, whatever REQUESTS_CA_BUNDLE or a proxy variable says.
            self._session.trust_env = False
            self._session.verify = str(ca)
        if cert is not None:
            self._session.cert = (str(cert[0]), str(cert[1]))
        self._lock = threading.Lock()

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self._session.request(method, self.url + path, timeout=30, **kwargs)

    def _json(self, method: str, path: str, **kwargs: Any) -> JSON | None:
        response = self._request(method, path, **kwargs)
        if response.status_code == 404:
            return None
        if response.status_code >= 300:
            raise ApiFailure(response.status_code, response.text)
        body: JSON = response.json()
        return body

    def get(self, path: str) -> JSON | None:
        """The object, or None when the API answers 404."""
        return self._json("GET", path)

    def list(self, path: str, params: dict[str, str] | None = None) -> tuple[list[JSON], str]:
        body = self._json("GET", path, params=params or {})
        if body is None:
            raise ApiFailure(404, f"{path} is not served")
        return list(body.get("items") or []), str(body["metadata"].get("resourceVersion", ""))

    def create(self, path: str, obj: JSON) -> JSON | None:
        return self._json("POST", path, json=obj)

    def text(self, path: str) -> str:
        """A plain-text answer (a pod's log)."""
        response = self._request("GET", path)
        if response.status_code >= 300:
            raise ApiFailure(response.status_code, response.text)
        return response.text

    def merge_patch(self, path: str, patch: JSON) -> JSON | None:
        headers = {"Content-Type": "application/merge-patch+json"}
        return self._json("PATCH", path, data=json.dumps(patch), headers=headers)

    def strategic_merge_patch(self, path: str, patch: JSON) -> JSON | None:
        """A strategic merge patch (lists with a merge key, e.g. conditions, merge by it)."""
        headers = {"Content-Type": "application/strategic-merge-patch+json"}
        return self._json("PATCH", path, data=json.dumps(patch), headers=headers)

    def delete(self, path: str, body: JSON | None = None) -> JSON | None:
        return self._json("DELETE", path, json=body or {})

    def watch(
        self, path: str, resource_version: str, params: dict[str, str], stopped: Callable[[], bool]
    ) -> Iterator[tuple[str, JSON]]:
        """Events after ``resource_version`` until the server ends the watch; raises Gone."""
        query = {
            **params,
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
        }
        with self._request("GET", path, params=query, stream=True) as response:
            if response.status_code == 410:
                raise Gone(response.text)
            if response.status_code >= 300:
                raise ApiFailure(response.status_code, response.text)
            # chunk_size None: each HTTP chunk whole as it arrives (kube-apiserver flushes one
            # per event). Read a byte at a time, a pod event of a few KiB costs thousands of
            # Python calls under the GIL; with every kubelet, the DNS and the tests' informers
            # in one process that was seconds of lag for each of them on 2 cores (bench 6).
            for line in response.iter_lines(chunk_size=None):
                if stopped():
                    return
                if not line:
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise Gone(str(status.get("message")))
                    raise ApiFailure(int(status.get("code") or 500), str(status.get("message")))
                yield str(event["type"]), event["object"]

    # -- pods -------------------------------------------------------------------------------

    def pod_path(self, namespace: str, name: str, sub: str = "") -> str:
        return f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{sub}" if sub else "")

    def delete_pod_now(self, namespace: str, name: str, uid: str) -> None:
        """The kubelet's last word on a pod: delete with grace 0, for this uid only."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self.delete(self.pod_path(namespace, name), body)
        except ApiFailure as err:
            if err.code != 409:  # a newer pod of the same name: not ours to delete
                raise

    def event(
        self,
        about: JSON,
        kind: str,
        reason: str,
        message: str,
        component: str,
        host: str,
        field_path: str | None = None,
    ) -> None:
        """A core/v1 Event about ``about`` (as record.EventRecorder posts it)."""
        meta = about["metadata"]
        namespace = meta.get("namespace") or "default"
        stamp = now_rfc3339()
        involved: JSON = {
            "kind": about.get("kind", "Pod"),
            "apiVersion": about.get("apiVersion", "v1"),
            "namespace": namespace,
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        }
        if field_path:
            involved["fieldPath"] = field_path
        suffix = f"{datetime.now(timezone.utc).timestamp():.9f}".replace(".", "")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{int(suffix):x}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": component, "host": host},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": host,
        }
        # Events are best effort, as in record.EventRecorder.
        with contextlib.suppress(ApiFailure, requests.RequestException):
            self.create(f"/api/v1/namespaces/{namespace}/events", body)


class Informer:
    """List then watch one kind, resuming from the last resourceVersion and listing again on
    410, calling ``on_event(type, obj)`` with ADDED/MODIFIED/DELETED (a relist replays as
    ADDED, and DELETED for what vanished meanwhile)."""

    def __init__(
        self,
        api: Api,
        path: str,
        params: dict[str, str],
        on_event: Callable[[str, JSON], None],
        name: str,
    ) -> None:
        self.api = api
        self.path = path
        self.params = params
        self.on_event = on_event
        self.known: dict[str, JSON] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.synced = threading.Event()

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _relist(self) -> str:
        items, rv = self.api.list(self.path, self.params)
        seen = set()
        for obj in items:
            key = _key(obj)
            seen.add(key)
            self.known[key] = obj
            self.on_event("ADDED", obj)
        for key in [k for k in self.known if k not in seen]:
            self.on_event("DELETED", self.known.pop(key))
        self.synced.set()
        return rv

    def _run(self) -> None:
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist()
                for kind, obj in self.api.watch(self.path, rv, self.params, self._stop.is_set):
                    rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                    if kind == "BOOKMARK":
                        continue
                    key = _key(obj)
                    if kind == "DELETED":
                        self.known.pop(key, None)
                    else:
                        self.known[key] = obj
                    self.on_event(kind, obj)
            except Gone:
                rv = ""
            except (ApiFailure, requests.RequestException, ValueError):
                if self._stop.wait(0.5):
                    return
                rv = ""


def _key(obj: JSON) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"
