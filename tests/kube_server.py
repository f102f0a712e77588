"""A fake kube-apiserver on loopback that the real ``kubernetes`` client talks to over real HTTP.

It keeps objects with increasing resourceVersions and serves get / list / watch / create / patch
/ delete for the resources ci-runner uses (pods, pod logs, secrets, configmaps, services,
events, batch Jobs, kubeflow.org MPIJobs), answering errors with ``Status`` bodies the way the
API server does (404 NotFound, 409 AlreadyExists, 422 Invalid, 410 Gone, 401, 403).
Watches stream chunked JSON events (ADDED / MODIFIED / DELETED / BOOKMARK / ERROR) and end when
the client hangs up (``open_watches`` counts the live ones); pod logs
stream with ``follow``, ``timestamps`` and ``sinceTime``. Deletes cascade along
ownerReferences like the garbage collector.

Faults on demand: :meth:`FakeKubeServer.fail_next` (bursts of 5xx, 429 with Retry-After),
:meth:`~FakeKubeServer.drop_watches` (cut every open watch mid-event),
:meth:`~FakeKubeServer.expire_history` (reconnects get 410 Gone), :meth:`~FakeKubeServer.forbid`
(403 with the API server's message), :meth:`~FakeKubeServer.reject_credentials` (401),
:meth:`Store.bookmark` (a BOOKMARK to every watch). Tests synchronise with the backend through
:meth:`~FakeKubeServer.wait_for_watches`, :meth:`~FakeKubeServer.wait_until` and
:meth:`~FakeKubeServer.count`; :meth:`~FakeKubeServer.verbs_used` is what RBAC must allow.

The MPI Operator and the kubelet are in ``tests/kube_operator.py``; a scenario drives them.
Usage::

    with FakeKubeServer() as server:
        api_client = kubernetes.client.ApiClient(server.configuration())
        ...
"""

from __future__ import annotations

import base64
import copy
import json
import re
import select
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import kubernetes.client

from tests import crd

JSON = dict[str, Any]
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
TOKEN = "fake-cluster-token"
CUT = -1  # fail_next(CUT): answer 200 but drop the connection half-way through the body
CLIENT_CHECK_SECONDS = 0.05  # how often an idle watch looks whether its client has hung up


@dataclass(frozen=True)
class Kind:
    """A resource the fake serves."""

    group: str
    version: str
    plural: str
    kind: str

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
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


def rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_nano(nanos: int) -> str:
    """Go's RFC3339Nano: trailing zeros of the fraction trimmed."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    text = (EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    digits = f"{fraction:09d}".rstrip("0")
    return f"{text}.{digits}Z" if digits else f"{text}Z"


def parse_rfc3339(text: str) -> int:
    """Nanoseconds after :data:`EPOCH`."""
    whole, _, fraction = text.rstrip("Z").partition(".")
    moment = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    nanos = int((fraction + "000000000")[:9]) if fraction else 0
    return int((moment - EPOCH).total_seconds()) * 1_000_000_000 + nanos


def _path_value(obj: JSON, dotted: str) -> Any:
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def matches(obj: JSON, label_selector: str | None, field_selector: str | None) -> bool:
    """Equality-based label and field selectors (``a=b,c=d``)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (label_selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key.rstrip("=")) != value.lstrip("="):
            return False
    for term in filter(None, (field_selector or "").split(",")):
        key, _, value = term.partition("=")
        if str(_path_value(obj, key.rstrip("=")) or "") != value.lstrip("="):
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class PodLog:
    """A container's log as the kubelet keeps it: (timestamp in ns, text) per line."""

    lines: list[tuple[int, str]] = field(default_factory=list)
    started: bool = False
    ended: bool = False
    cut_at: set[int] = field(default_factory=set)  # line indexes to cut mid-line, once
    unterminated: set[int] = field(default_factory=set)  # a last line with no newline


@dataclass
class Fault:
    code: int
    times: int
    retry_after: int | None
    verb: str | None
    resource: str | None

    def applies(self, verb: str, resource: str) -> bool:
        return self.times > 0 and self.verb in (None, verb) and self.resource in (None, resource)


@dataclass(frozen=True)
class Request:
    """A request as RBAC sees it."""

    verb: str
    group: str
    resource: str  # "pods", "pods/log", "mpijobs"
    name: str | None
    namespace: str
    query: tuple[tuple[str, str], ...] = ()

    def param(self, key: str) -> str | None:
        return dict(self.query).get(key)


class Store:
    """Objects, resourceVersions, the watch history and the logs. All under ``cond``."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.rv = 1
        self.objects: dict[tuple[str, str, str], JSON] = {}
        # (resourceVersion, kind key, namespace, event type, object)
        self.history: list[tuple[int, str, str, str, JSON]] = []
        self.compacted = 0  # a watch from below this resourceVersion gets 410 Gone
        self.logs: dict[tuple[str, str], PodLog] = {}
        self.on_create: list[Callable[[str, JSON], None]] = []
        self.on_delete: list[Callable[[str, JSON], None]] = []
        self._uids = 0

    # Every method below expects ``cond`` held (it is reentrant).

    def _record(self, key: str, event: str, obj: JSON) -> None:
        self.history.append((self.rv, key, obj["metadata"]["namespace"], event, copy.deepcopy(obj)))
        self.cond.notify_all()

    def _bump(self, obj: JSON) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def get(self, key: str, namespace: str, name: str) -> JSON:
        with self.cond:
            obj = self.objects.get((key, namespace, name))
            if obj is None:
                raise ApiError(404, "NotFound", f'{key} "{name}" not found')
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
        with self.cond:
            items = [
                copy.deepcopy(obj)
                for (k, ns, _), obj in sorted(self.objects.items())
                if k == key and ns == namespace and matches(obj, label_selector, field_selector)
            ]
            return items, self.rv

    def create(self, key: str, namespace: str, obj: JSON) -> JSON:
        kind = KINDS[key]
        with self.cond:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            meta["namespace"] = namespace
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{self._uids:05x}"
            name = meta.get("name")
            if not name:
                raise ApiError(422, "Invalid", f"{kind.kind} is invalid: metadata.name: Required")
            if (key, namespace, name) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{key} "{name}" already exists')
            self._uids += 1
            meta["uid"] = f"uid-{self._uids:04d}"
            meta["creationTimestamp"] = rfc3339(EPOCH)
            obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
            if key == "secrets":
                _encode_string_data(obj)
            self._bump(obj)
            self.objects[(key, namespace, name)] = obj
            self._record(key, "ADDED", obj)
            for hook in self.on_create:
                hook(key, copy.deepcopy(obj))
            return copy.deepcopy(obj)

    def update(self, key: str, namespace: str, name: str, change: Callable[[JSON], None]) -> JSON:
        """Apply ``change`` to the stored object (a MODIFIED event when it changed)."""
        with self.cond:
            stored = self.objects.get((key, namespace, name))
            if stored is None:
                raise ApiError(404, "NotFound", f'{key} "{name}" not found')
            before = copy.deepcopy(stored)
            change(stored)
            if key == "secrets":
                _encode_string_data(stored)
            if stored != before:
                self._bump(stored)
                self._record(key, "MODIFIED", stored)
            return copy.deepcopy(stored)

    def patch(self, key: str, namespace: str, name: str, patch: JSON) -> JSON:
        def apply(obj: JSON) -> None:
            merged = merge_patch(obj, patch)
            obj.clear()
            obj.update(merged)

        return self.update(key, namespace, name, apply)

    def delete(self, key: str, namespace: str, name: str, propagation: str = "Background") -> JSON:
        with self.cond:
            obj = self.objects.pop((key, namespace, name), None)
            if obj is None:
                raise ApiError(404, "NotFound", f'{key} "{name}" not found')
            uid = obj["metadata"]["uid"]
            self._bump(obj)
            self._record(key, "DELETED", obj)
            if key == "pods":
                log = self.logs.get((namespace, name))
                if log is not None:
                    log.ended = True
            for hook in self.on_delete:
                hook(key, copy.deepcopy(obj))
            for (dkey, dns, dname), dependent in list(self.objects.items()):
                refs = dependent["metadata"].get("ownerReferences") or []
                if dns != namespace or not any(r.get("uid") == uid for r in refs):
                    continue
                if propagation == "Orphan":
                    self.update(dkey, dns, dname, _without_owner(uid))
                elif (dkey, dns, dname) in self.objects:
                    self.delete(dkey, dns, dname, "Background")
            return copy.deepcopy(obj)

    def bookmark(self) -> None:
        """A BOOKMARK for every watch that allows them, at the current resourceVersion."""
        with self.cond:
            obj = {"metadata": {"resourceVersion": str(self.rv), "namespace": ""}}
            self.history.append((self.rv, "*", "", "BOOKMARK", obj))
            self.cond.notify_all()

    def log(self, namespace: str, pod: str) -> PodLog:
        with self.cond:
            return self.logs.setdefault((namespace, pod), PodLog())


def _without_owner(uid: str) -> Callable[[JSON], None]:
    def orphan(obj: JSON) -> None:
        refs = obj["metadata"].get("ownerReferences") or []
        obj["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]

    return orphan


def _encode_string_data(secret: JSON) -> None:
    for key, value in (secret.pop("stringData", None) or {}).items():
        secret.setdefault("data", {})[key] = base64.b64encode(value.encode()).decode()


ROUTE = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>log|status))?$"
)


class FakeKubeServer:
    """The API server; :attr:`store` holds the objects, :attr:`requests` every request seen."""

    def __init__(self, token: str = TOKEN) -> None:
        self.store = Store()
        self.token = token  # what configuration() gives clients
        self.accepted_token = token
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.forbidden: set[tuple[str, str]] = set()  # (verb, resource)
        self.user = "system:serviceaccount:ci:gitlab-runner"
        self._drops = 0  # bumped by drop_watches()
        self.open_watches: dict[str, int] = {}  # kind key -> watches waiting for events
        self._stopping = False
        self._lock = threading.Lock()
        self._httpd = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def configuration(self, token: str | None = None) -> kubernetes.client.Configuration:
        """A client configuration for this server (bearer token auth, like a kubeconfig)."""
        config = kubernetes.client.Configuration(host=self.url)
        config.api_key = {"BearerToken": token or self.token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
        return config

    def start(self) -> FakeKubeServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        with self.store.cond:
            self._stopping = True
            for log in self.store.logs.values():
                log.ended = True
            self.store.cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeKubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults ------------------------------------------------------------------------------

    def fail_next(
        self,
        code: int,
        times: int = 1,
        retry_after: int | None = None,
        verb: str | None = None,
        resource: str | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``code`` (500, 429, 410, or CUT)."""
        with self._lock:
            self.faults.append(Fault(code, times, retry_after, verb, resource))

    def drop_watches(self) -> None:
        """Cut every open watch, half-way through writing an event."""
        with self.store.cond:
            self._drops += 1
            self.store.cond.notify_all()

    def expire_history(self) -> None:
        """Compact: any watch resuming from a resourceVersion seen so far gets 410 Gone."""
        with self.store.cond:
            self.store.rv += 1  # as if other objects changed meanwhile
            self.store.compacted = self.store.rv

    def forbid(self, verb: str, resource: str) -> None:
        """RBAC denies ``verb`` on ``resource`` ("pods", "pods/log", "mpijobs", ...)."""
        self.forbidden.add((verb, resource))

    def reject_credentials(self) -> None:
        """Every request gets 401 (as with an expired token)."""
        self.accepted_token = "no token is accepted"

    def verbs_used(self) -> set[tuple[str, str, str]]:
        """(apiGroup, resource, verb) of every request seen: what RBAC must allow."""
        return {(r.group, r.resource, r.verb) for r in self.requests}

    def _take_fault(self, verb: str, resource: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.applies(verb, resource):
                    fault.times -= 1
                    return fault
        return None

    # -- HTTP --------------------------------------------------------------------------------

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                server._serve(self, "GET")

            def do_POST(self) -> None:
                server._serve(self, "POST")

            def do_PATCH(self) -> None:
                server._serve(self, "PATCH")

            def do_PUT(self) -> None:
                server._serve(self, "PUT")

            def do_DELETE(self) -> None:
                server._serve(self, "DELETE")

        return Handler

    def _serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(handler.path)
        query = dict(parse_qsl(url.query))
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            route = ROUTE.match(url.path)
            if route is None:
                raise ApiError(404, "NotFound", f"the server could not find {url.path}")
            group = route["group"] or ""
            key = f"{route['plural']}.{group}" if group else route["plural"]
            if key not in KINDS:
                raise ApiError(404, "NotFound", f"the server could not find {url.path}")
            name, namespace, sub = route["name"], route["ns"], route["sub"]
            resource = f"{route['plural']}/{sub}" if sub else route["plural"]
            verb = _verb(method, name, query)
            with self.store.cond:
                self.requests.append(
                    Request(verb, group, resource, name, namespace, tuple(sorted(query.items())))
                )
                self.store.cond.notify_all()
            self._authorize(handler, verb, group, resource, namespace)
            fault = self._take_fault(verb, resource)
            if fault is not None and fault.code == CUT:
                _send_cut(handler)
                return
            if fault is not None:
                headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after else {}
                reason = "TooManyRequests" if fault.code == 429 else "InternalError"
                raise ApiError(fault.code, reason, f"injected {fault.code}", headers)
            body = json.loads(raw) if raw else {}
            if sub == "log":
                self._serve_log(handler, namespace, name or "", query)
            elif verb == "watch":
                self._serve_watch(handler, key, namespace, query)
            else:
                _send_json(handler, *self._answer(verb, key, namespace, name, query, body))
        except ApiError as err:
            _send_json(handler, err.code, err.status(), err.headers)

    def _authorize(
        self, handler: BaseHTTPRequestHandler, verb: str, group: str, resource: str, ns: str
    ) -> None:
        if handler.headers.get("Authorization") != f"Bearer {self.accepted_token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if (verb, resource) in self.forbidden:
            plural, _, sub = resource.partition("/")
            what = f'resource "{plural}"' + (f' in subresource "{sub}"' if sub else "")
            raise ApiError(
                403,
                "Forbidden",
                f'{resource} is forbidden: User "{self.user}" cannot {verb} {what} '
                f'in API group "{group}" in the namespace "{ns}"',
            )

    def _answer(
        self, verb: str, key: str, namespace: str, name: str | None, query: JSON, body: JSON
    ) -> tuple[int, JSON]:
        store = self.store
        if verb == "get":
            return 200, store.get(key, namespace, name or "")
        if verb == "list":
            items, rv = store.list(
                key, namespace, query.get("labelSelector"), query.get("fieldSelector")
            )
            kind = KINDS[key]
            return 200, {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            }
        if verb == "create":
            if key == "mpijobs.kubeflow.org":
                _validate_mpijob(body)
            return 201, store.create(key, namespace, body)
        if verb == "patch":
            return 200, store.patch(key, namespace, name or "", body)
        if verb == "delete":
            propagation = body.get("propagationPolicy") or query.get("propagationPolicy")
            store.delete(key, namespace, name or "", propagation or "Background")
            return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        raise ApiError(405, "MethodNotAllowed", f"{verb} is not supported by this fake")

    # -- streams -----------------------------------------------------------------------------

    def _serve_watch(
        self, handler: BaseHTTPRequestHandler, key: str, namespace: str, query: JSON
    ) -> None:
        store = self.store
        since = int(query.get("resourceVersion") or 0)
        _start_chunked(handler, "application/json")
        with store.cond:
            drops = self._drops
            if since < store.compacted:
                gone = ApiError(
                    410, "Expired", f"too old resource version: {since} ({store.compacted})"
                )
                _chunk(handler, json.dumps({"type": "ERROR", "object": gone.status()}) + "\n")
                _end_chunked(handler)
                return
            position = next((i for i, h in enumerate(store.history) if h[0] > since), None)
            position = len(store.history) if position is None else position
            self.open_watches[key] = self.open_watches.get(key, 0) + 1
            store.cond.notify_all()
        try:
            self._stream_watch(handler, key, namespace, since, position, drops, query)
        finally:
            with store.cond:
                self.open_watches[key] -= 1
                store.cond.notify_all()

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 20.0) -> None:
        """Block until ``predicate()`` holds (checked on every change and request)."""
        with self.store.cond:
            if not self.store.cond.wait_for(predicate, timeout=timeout):
                raise AssertionError("the fake API server never reached the expected state")

    def count(self, verb: str, resource: str) -> int:
        """How many ``verb`` requests on ``resource`` were made."""
        return sum(1 for r in self.requests if r.verb == verb and r.resource == resource)

    def wait_for_watches(self, *keys: str, timeout: float = 20.0) -> None:
        """Block until a watch is open on each of ``keys`` (e.g. "pods")."""
        with self.store.cond:
            if not self.store.cond.wait_for(
                lambda: all(self.open_watches.get(k, 0) > 0 for k in keys), timeout=timeout
            ):
                raise AssertionError(f"no watch on {keys}; open: {self.open_watches}")

    def _stream_watch(
        self,
        handler: BaseHTTPRequestHandler,
        key: str,
        namespace: str,
        since: int,
        position: int,
        drops: int,
        query: JSON,
    ) -> None:
        store = self.store
        bookmarks = query.get("allowWatchBookmarks") == "true"
        labels, fields = query.get("labelSelector"), query.get("fieldSelector")
        while True:
            with store.cond:
                while not (len(store.history) > position or self._drops != drops or self._stopping):
                    store.cond.wait(timeout=CLIENT_CHECK_SECONDS)
                    if _client_gone(handler):
                        return  # as the API server ends a watch whose client hung up
                if self._stopping:
                    _end_chunked(handler)
                    return
                new, position = store.history[position:], len(store.history)
                dropped = self._drops != drops
            for rv, hkey, hns, event, obj in new:
                if event == "BOOKMARK":
                    if bookmarks and rv > since:
                        bookmark = {"kind": KINDS[key].kind, "apiVersion": KINDS[key].api_version}
                        bookmark["metadata"] = obj["metadata"]
                        _chunk(handler, json.dumps({"type": "BOOKMARK", "object": bookmark}) + "\n")
                    continue
                mine = hkey == key and hns == namespace and matches(obj, labels, fields)
                if mine and not _chunk(handler, json.dumps({"type": event, "object": obj}) + "\n"):
                    return
            if dropped:
                _chunk(handler, '{"type":"MODIFIED","object":{"metadata":{"na')
                _abort(handler)
                return

    def _serve_log(
        self, handler: BaseHTTPRequestHandler, namespace: str, pod: str, query: JSON
    ) -> None:
        store = self.store
        store.get("pods", namespace, pod)
        log = store.log(namespace, pod)
        if not log.started:
            raise ApiError(
                400,
                "BadRequest",
                f'container "launcher" in pod "{pod}" is waiting to start: ContainerCreating',
            )
        since = parse_rfc3339(query["sinceTime"]) if query.get("sinceTime") else None
        stamps = query.get("timestamps") == "true"
        follow = query.get("follow") == "true"
        _start_chunked(handler, "text/plain")
        index = 0
        while True:
            with store.cond:
                while not (len(log.lines) > index or log.ended or not follow or self._stopping):
                    store.cond.wait()
                new = log.lines[index:]
                start, index = index, len(log.lines)
                ended = log.ended or not follow or self._stopping
            for offset, (nanos, text) in enumerate(new):
                if since is not None and nanos < since:
                    continue
                end = "" if start + offset in log.unterminated else "\n"
                line = f"{rfc3339_nano(nanos)} {text}{end}" if stamps else f"{text}{end}"
                with store.cond:
                    cut = start + offset in log.cut_at
                    log.cut_at.discard(start + offset)
                if cut:
                    _chunk(handler, line[: len(line) // 2])
                    _abort(handler)
                    return
                if not _chunk(handler, line):
                    return
            if ended and len(log.lines) == index:
                _end_chunked(handler)
                return


def _send_cut(handler: BaseHTTPRequestHandler) -> None:
    """A 200 whose body breaks off half-way (the connection drops)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100")
    handler.end_headers()
    handler.wfile.write(b'{"kind": "Pod", "metad')
    _abort(handler)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients hanging up (we drop streams on purpose, the backend closes them) are normal."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def _verb(method: str, name: str | None, query: JSON) -> str:
    if method == "GET":
        if name:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    return {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}[method]


def _validate_mpijob(manifest: JSON) -> None:
    """422 for what the API server checks (the CRD schema, object rules); the MPI Operator's own
    checks become a ValidationError Event later (tests/kube_operator.py)."""
    controller = set(crd._controller_rules(manifest))
    errors = [e for e in crd.validate_mpijob(manifest) if e not in controller]
    if errors:
        name = manifest.get("metadata", {}).get("name", "")
        listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
        raise ApiError(422, "Invalid", f'MPIJob.kubeflow.org "{name}" is invalid: {listed}')


def _send_json(
    handler: BaseHTTPRequestHandler, code: int, body: JSON, headers: dict[str, str] | None = None
) -> None:
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def _start_chunked(handler: BaseHTTPRequestHandler, content_type: str) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    handler.wfile.flush()


def _chunk(handler: BaseHTTPRequestHandler, text: str) -> bool:
    """Write one chunk; False when the client has gone away."""
    data = text.encode()
    try:
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True
        return False
    return True


def _end_chunked(handler: BaseHTTPRequestHandler) -> None:
    try:
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True


def _client_gone(handler: BaseHTTPRequestHandler) -> bool:
    """The client closed the connection (it sends nothing else while a watch streams)."""
    connection = handler.connection
    try:
        readable, _, _ = select.select([connection], [], [], 0)
        return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _abort(handler: BaseHTTPRequestHandler) -> None:
    """Drop the connection without ending the chunked body: the client sees a broken stream."""
    handler.close_connection = True
    try:
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
