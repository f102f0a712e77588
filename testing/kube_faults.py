"""What the tests' two Kubernetes APIs share: the fake API server
(:class:`testing.fake_kube.server.FakeKubeServer`) and the proxy in front of the scripted cluster's
kube-apiserver (:class:`testing.scripted_cluster.faults.FaultProxy`).

- :func:`request_of`: an API request as RBAC names it (verb, group, resource with subresource).
- :func:`status`: a ``Status`` body as kube-apiserver writes it.
- :class:`FaultInjector`: the requests seen, and the faults a test injects with
  :meth:`~FaultInjector.fail_next` (a ``Status`` answer with 500, 429 and ``Retry-After``, 410;
  or :data:`CUT`: a 200 whose body breaks off half-way); each API decides how it cuts.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

JSON = dict[str, Any]
CUT = -1  # fail_next(CUT): a 200 whose body breaks off half-way (the connection drops)
ROUTE = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?"
    r"/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[^/]+))?$"
)
# The reason kube-apiserver gives with each code (staging/src/k8s.io/apimachinery/pkg/api/
# errors/errors.go: NewInternalError, NewTooManyRequests, NewResourceExpired, NewUnauthorized).
_REASONS = {500: "InternalError", 429: "TooManyRequests", 410: "Expired", 401: "Unauthorized"}


@dataclass(frozen=True)
class Request:
    """A request as RBAC sees it (``resource`` with its subresource: ``pods/log``)."""

    verb: str
    group: str
    resource: str
    name: str | None
    namespace: str
    query: tuple[tuple[str, str], ...] = ()

    def param(self, key: str) -> str | None:
        return dict(self.query).get(key)


def verb_of(method: str, name: str | None, query: JSON) -> str:
    """The verb as RBAC names it (staging/src/k8s.io/apiserver/pkg/endpoints/request/
    requestinfo.go)."""
    if method == "GET":
        if name:
            return "get"
        return "watch" if query.get("watch") in ("true", "1") else "list"
    if method == "DELETE":
        return "delete" if name else "deletecollection"
    return {"POST": "create", "PATCH": "patch", "PUT": "update"}[method]


def request_of(method: str, target: str) -> Request | None:
    """The verb, group, resource, name and namespace of an API request (None: not a resource,
    e.g. ``/version``)."""
    url = urlsplit(target)
    route = ROUTE.match(url.path)
    if route is None:
        return None
    query = dict(parse_qsl(url.query))
    name, sub = route["name"], route["sub"]
    resource = f"{route['plural']}/{sub}" if sub else route["plural"]
    return Request(
        verb_of(method, name, query),
        route["group"] or "",
        resource,
        name,
        route["ns"] or "",
        tuple(sorted(query.items())),
    )


def status(code: int, message: str, reason: str | None = None) -> JSON:
    """A failure's ``Status`` body as kube-apiserver writes it (the reason: the code's usual
    one unless given)."""
    return {
        **_status_head("Failure"),
        "message": message,
        "reason": reason or _REASONS.get(code, "InternalError"),
        "code": code,
    }


def success(details: JSON) -> JSON:
    """The ``Status`` a DELETE answers with once the object is gone (staging/src/k8s.io/
    apiserver/pkg/registry/generic/registry/store.go Delete)."""
    return {**_status_head("Success"), "details": details}


def _status_head(outcome: str) -> JSON:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": outcome}


def send_json(
    handler: BaseHTTPRequestHandler, code: int, body: JSON, headers: dict[str, str] | None = None
) -> None:
    """Answer ``code`` with ``body`` as JSON (and ``headers``)."""
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.end_headers()
    handler.wfile.write(data)


@dataclass
class Fault:
    """Answer ``times`` matching requests with ``code`` (:data:`CUT`: break the answer)."""

    code: int
    times: int
    retry_after: int | None = None
    verb: str | None = None
    resource: str | None = None

    def applies(self, request: Request) -> bool:
        return (
            self.times > 0
            and self.verb in (None, request.verb)
            and self.resource in (None, request.resource)
        )

    def send(self, handler: BaseHTTPRequestHandler) -> None:
        """The injected answer (not for :data:`CUT`): its ``Status``, ``Retry-After`` if set."""
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after else {}
        send_json(handler, self.code, status(self.code, f"injected {self.code}"), headers)


class FaultInjector:
    """The requests an API saw (:attr:`requests`, under :attr:`cond`, which every new one
    notifies) and the faults a test asked for."""

    wait_seconds = 20.0  # how long :meth:`wait_until` waits unless told

    def __init__(self, cond: threading.Condition) -> None:
        self.cond = cond
        self.requests: list[Request] = []
        self._faults: list[Fault] = []

    def fail_next(
        self,
        code: int,
        times: int = 1,
        retry_after: int | None = None,
        verb: str | None = None,
        resource: str | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``code`` (500, 429, 410) or, for
        :data:`CUT`, a 200 broken off half-way through its body."""
        self.add_fault(self._faults, Fault(code, times, retry_after, verb, resource))

    def add_fault(self, faults: list[Fault], fault: Fault) -> None:
        with self.cond:
            faults.append(fault)

    def take_fault(
        self, request: Request | None, faults: list[Fault] | None = None
    ) -> Fault | None:
        """The first fault of ``faults`` (those of :meth:`fail_next`) for ``request``, used."""
        if request is None:
            return None
        with self.cond:
            for fault in self._faults if faults is None else faults:
                if fault.applies(request):
                    fault.times -= 1
                    return fault
        return None

    def record(self, request: Request) -> None:
        with self.cond:
            self.requests.append(request)
            self.cond.notify_all()

    def count(self, verb: str, resource: str | None = None) -> int:
        """How many ``verb`` requests on ``resource`` ("pods", "pods/log", "mpijobs"; None: on
        any) came."""
        with self.cond:
            return sum(
                1 for r in self.requests if r.verb == verb and resource in (None, r.resource)
            )

    def counts(self) -> dict[str, int]:
        """``{"verb resource": how many}`` of every request so far."""
        with self.cond:
            return dict(Counter(f"{r.verb} {r.resource}" for r in self.requests))

    def verbs_used(self) -> set[tuple[str, str, str]]:
        """(apiGroup, resource, verb) of every request: what RBAC must allow."""
        with self.cond:
            return {(r.group, r.resource, r.verb) for r in self.requests}

    def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        """Until ``predicate()`` holds (checked whenever :attr:`cond` is notified: at every
        request, and at whatever else the API notifies it of)."""
        with self.cond:
            if not self.cond.wait_for(
                predicate, timeout=self.wait_seconds if timeout is None else timeout
            ):
                raise AssertionError(f"the API never reached the expected state; {self.state()}")

    def state(self) -> str:
        """What :meth:`wait_until` says when it gives up."""
        return f"requests: {self.counts()}"
