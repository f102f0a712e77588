"""A fake kube-apiserver on loopback that the real ``kubernetes`` client talks to over real HTTP.

What it is for: the unit tests of ci-runner's Kubernetes client that must run fast and without
root (``make unit``): connecting (kubeconfigs, the GitLab agent's contexts), HTTP handling and
retries, watches and their faults, the API's error answers (tests/test_backends_kubernetes_api.py,
_connect.py, _watching.py, tests/test_commands_cancel.py). No controller, scheduler or kubelet
runs here: everything a cluster does is tested on the real control plane, the scripted cluster
(``testing/scripted_cluster``) and the emulated one (``testing/emulated_cluster``).

Only a store with the Kubernetes API (``testing/fake_kube/store.py``): get / list / watch / create /
update / patch / delete for pods, secrets, configmaps, services, events, nodes, batch Jobs and
kubeflow.org MPIJobs, and the ``status`` subresource. Errors are ``Status`` bodies with
kube-apiserver's texts (404, 409, 410, 422, 401, 403; the upstream file beside each rule);
creates go through admission (injected webhook denials, ``admission.py``). Watches stream
chunked JSON events and get the store's BOOKMARKs when they allow them.

Faults on demand: :meth:`FakeKubeServer.fail_next` (bursts of 5xx, 429 with Retry-After),
:meth:`~FakeKubeServer.drop_watches` (cut every open watch mid-event),
:meth:`~FakeKubeServer.expire_history` (reconnects get 410 Gone), :meth:`~FakeKubeServer.forbid`
(RBAC 403), :meth:`~FakeKubeServer.reject_credentials` (401), :attr:`~FakeKubeServer.admission`
(webhook 403s). Tests synchronise through :meth:`~FakeKubeServer.wait_for_watches`,
:meth:`~FakeKubeServer.wait_until` and :meth:`~FakeKubeServer.count`;
:meth:`~FakeKubeServer.verbs_used` is what RBAC must allow.

Usage::

    with FakeKubeServer() as server:
        api_client = kubernetes.client.ApiClient(server.configuration())
        ...
"""

from __future__ import annotations

import copy
import json
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import kubernetes.client

from testing.fake_kube.admission import Admission, validate_create
from testing.fake_kube.http import (
    QuietServer,
    abort,
    chunk,
    client_gone,
    end_chunked,
    send_cut,
    start_chunked,
)
from testing.fake_kube.store import (
    EPOCH,
    KINDS,
    ApiError,
    Kind,
    Store,
    json_patch,
    matches,
    merge_patch,
    parse_rfc3339,
    rfc3339,
    rfc3339_nano,
    strategic_merge,
)
from testing.kube_faults import CUT, FaultInjector, request_of, send_json, success

__all__ = [
    "CUT",
    "EPOCH",
    "KINDS",
    "ApiError",
    "FakeKubeServer",
    "Kind",
    "Store",
    "parse_rfc3339",
    "rfc3339",
    "rfc3339_nano",
]

JSON = dict[str, Any]
TOKEN = "fake-cluster-token"
CLIENT_CHECK_SECONDS = 0.05  # how often an idle stream looks whether its client has hung up
STATUS_SUBRESOURCE = ("pods", "jobs.batch", "mpijobs.kubeflow.org", "nodes")


class FakeKubeServer(FaultInjector):
    """The API server; :attr:`store` holds the objects, :attr:`requests` every request seen."""

    def __init__(self, token: str = TOKEN) -> None:
        self.store = Store()
        super().__init__(self.store.cond)
        self.admission = Admission()
        self.token = token  # what configuration() gives clients
        self.accepted_token = token
        self.forbidden: set[tuple[str, str]] = set()  # (verb, resource)
        self.user = "system:serviceaccount:ci:gitlab-runner"
        self._drops = 0  # bumped by drop_watches()
        self.open_watches: dict[str, int] = {}  # kind key -> watches waiting for events
        self._stopping = False
        self._httpd = QuietServer(("127.0.0.1", 0), self._handler_class())
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
            self.store.cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeKubeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults (and FaultInjector.fail_next) ------------------------------------------------

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

    # -- synchronisation ---------------------------------------------------------------------

    def wait_for_watches(self, *keys: str, timeout: float = 20.0) -> None:
        """Block until a watch is open on each of ``keys`` (e.g. "pods")."""
        with self.store.cond:
            if not self.store.cond.wait_for(
                lambda: all(self.open_watches.get(k, 0) > 0 for k in keys), timeout=timeout
            ):
                raise AssertionError(f"no watch on {keys}; open: {self.open_watches}")

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
            request = request_of(method, handler.path)
            plural, _, sub = request.resource.partition("/") if request else ("", "", "")
            group = request.group if request else ""
            key = f"{plural}.{group}" if group else plural
            if (
                request is None
                or sub not in ("", "status")
                or key not in KINDS
                or KINDS[key].namespaced != bool(request.namespace)
            ):
                raise ApiError(404, "NotFound", f"the server could not find {url.path}")
            verb, name, namespace = request.verb, request.name, request.namespace
            self.record(request)
            self._authorize(handler, verb, group, request.resource, name, namespace)
            fault = self.take_fault(request)
            if fault is not None and fault.code == CUT:
                send_cut(handler)
                return
            if fault is not None:
                fault.send(handler)
                return
            body = json.loads(raw) if raw else {}
            content = handler.headers.get("Content-Type") or ""
            patch = "strategic" if "strategic-merge-patch" in content else "merge"
            if verb == "watch":
                self._serve_watch(handler, key, namespace, query)
            else:
                answer = self._handle(verb, key, namespace, name, body, query, sub, patch)
                send_json(handler, *answer)
        except ApiError as err:
            send_json(handler, err.code, err.status(), err.headers)

    def _authorize(
        self,
        handler: BaseHTTPRequestHandler,
        verb: str,
        group: str,
        resource: str,
        name: str | None,
        ns: str,
    ) -> None:
        if handler.headers.get("Authorization") != f"Bearer {self.accepted_token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")
        if (verb, resource) in self.forbidden:
            raise ApiError(
                403, "Forbidden", self._forbidden_message(verb, group, resource, name, ns)
            )

    def _forbidden_message(
        self, verb: str, group: str, resource: str, name: str | None, ns: str
    ) -> str:
        """RBAC's denial as kube-apiserver words it: apierrors.NewForbidden of the group and
        resource (``mpijobs.kubeflow.org``, ``pods``) and the name if any
        (staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go), the reason from
        forbiddenMessage (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/
        errors.go: the resource with its subresource, ``pods/log``)."""
        plural = resource.partition("/")[0]
        qualified = f"{plural}.{group}" if group else plural
        what = f'{qualified} "{name}"' if name else qualified
        where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        return (
            f'{what} is forbidden: User "{self.user}" cannot {verb} resource "{resource}" '
            f'in API group "{group}" {where}'
        )

    def _handle(
        self,
        verb: str,
        key: str,
        namespace: str,
        name: str | None = None,
        body: JSON | None = None,
        query: JSON | None = None,
        sub: str | None = None,
        patch: str = "merge",
    ) -> tuple[int, JSON]:
        """One API call, authenticated and past its faults. ``patch``: "merge" (RFC 7386) or
        "strategic"; a list body is a JSON patch."""
        store, body, query = self.store, body or {}, query or {}
        kind = KINDS[key]
        if verb == "get":
            return 200, store.get(key, namespace, name or "")
        if verb == "list":
            items, rv = store.list(
                key, namespace, query.get("labelSelector"), query.get("fieldSelector")
            )
            return 200, {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": items,
            }
        if verb == "create":
            with store.cond:
                if key == "mpijobs.kubeflow.org":
                    validate_create(body)
                if key != "events":
                    self._admit(key, body)
                return 201, store.create(key, namespace, body)
        if verb in ("patch", "update"):
            return 200, self._write(verb, key, namespace, name or "", body, sub, patch)
        if verb == "delete":
            propagation = body.get("propagationPolicy") or query.get("propagationPolicy")
            grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
            obj = store.delete(
                key, namespace, name or "", propagation, None if grace is None else int(grace)
            )
            if store.find(key, namespace, name or "") is not None:
                return 200, obj  # still terminating: the object, with its deletionTimestamp
            meta = obj["metadata"]
            details = {"name": meta["name"], "kind": kind.plural, "uid": meta["uid"]}
            if kind.group:
                details["group"] = kind.group
            return 200, success(details)
        if verb == "deletecollection":
            # registry/generic/registry/store.go DeleteCollection: the matching objects, each
            # deleted as a DELETE would; the answer lists them as they were then.
            propagation = body.get("propagationPolicy") or query.get("propagationPolicy")
            items, rv = store.list(key, namespace, query.get("labelSelector"))
            deleted = [
                store.delete(key, namespace, item["metadata"]["name"], propagation)
                for item in items
            ]
            return 200, {
                "kind": f"{kind.kind}List",
                "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": str(rv)},
                "items": deleted,
            }
        raise ApiError(405, "MethodNotAllowed", f"{verb} is not supported by this fake")

    def _admit(self, key: str, obj: JSON) -> None:
        """Admission sees the generated name (registry/store.go Create: BeforeCreate first)."""
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(self.store.rng.choice("bcdfghjklmnpqrstvwxz2456789") for _ in "12345")
            meta["name"] = f"{meta['generateName']}{suffix}"
        self.admission.check(key, obj)

    def _write(
        self,
        verb: str,
        key: str,
        namespace: str,
        name: str,
        body: Any,
        sub: str | None,
        patch: str,
    ) -> JSON:
        """PATCH (JSON merge; a list: JSON patch) or PUT; ``status`` writes change only status,
        main-resource writes keep it (pkg/registry/core/pod/strategy.go PrepareForUpdate and its
        status twin)."""
        store = self.store

        def change(obj: JSON) -> None:
            if verb == "update":
                sent = body
            elif isinstance(body, list):
                sent = json_patch(obj, body)
            elif patch == "strategic":
                sent = strategic_merge(obj, body)
            else:
                sent = merge_patch(obj, body)
            expected = body.get("metadata", {}).get("resourceVersion") if verb == "update" else None
            if expected and expected != obj["metadata"]["resourceVersion"]:
                # apiserver/pkg/registry/generic/registry/store.go: optimistic concurrency.
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {key} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                )
            new = copy.deepcopy(obj)
            if sub == "status":
                new["status"] = sent.get("status", {})
            else:
                kept = {
                    f: copy.deepcopy(obj["metadata"].get(f))
                    for f in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name")
                }
                new = copy.deepcopy(sent)
                new["metadata"] = {
                    **new.get("metadata", {}),
                    **{k: v for k, v in kept.items() if v is not None},
                }
                new["apiVersion"], new["kind"] = obj["apiVersion"], obj["kind"]
                if key in STATUS_SUBRESOURCE:
                    new["status"] = copy.deepcopy(obj.get("status", {}))
            new["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            obj.clear()
            obj.update(new)

        return store.update(key, namespace, name, change)

    # -- streams -----------------------------------------------------------------------------

    def _serve_watch(
        self, handler: BaseHTTPRequestHandler, key: str, namespace: str, query: JSON
    ) -> None:
        store = self.store
        since = int(query.get("resourceVersion") or 0)
        start_chunked(handler, "application/json")
        with store.cond:
            drops = self._drops
            if since < store.compacted:
                gone = ApiError(
                    410, "Expired", f"too old resource version: {since} ({store.compacted})"
                )
                chunk(handler, json.dumps({"type": "ERROR", "object": gone.status()}) + "\n")
                end_chunked(handler)
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
                    if client_gone(handler):
                        return  # as the API server ends a watch whose client hung up
                new, position = store.history[position:], len(store.history)
                dropped = self._drops != drops
                over = self._stopping
            for rv, hkey, hns, event, obj in new:
                if event == "BOOKMARK":
                    if bookmarks and rv > since:
                        bookmark = {"kind": KINDS[key].kind, "apiVersion": KINDS[key].api_version}
                        bookmark["metadata"] = obj["metadata"]
                        chunk(handler, json.dumps({"type": "BOOKMARK", "object": bookmark}) + "\n")
                    continue
                mine = hkey == key and (hns == namespace or not namespace)
                wanted = mine and matches(obj, labels, fields)
                if wanted and not chunk(handler, json.dumps({"type": event, "object": obj}) + "\n"):
                    return
            if dropped:
                chunk(handler, '{"type":"MODIFIED","object":{"metadata":{"na')
                abort(handler)
                return
            if over:
                end_chunked(handler)
                return
