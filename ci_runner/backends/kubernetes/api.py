"""Every request to the API server goes through :meth:`KubeApi.request`.

One retry policy and its timeouts (:mod:`ci_runner.http_policy`), our own errors.

We use the ``kubernetes`` client's ``ApiClient`` for configuration, authentication and TLS, and work
with plain JSON dicts: manifests are dicts already, and watches and logs need the raw stream.
"""

from __future__ import annotations

import http.client
import json
import select
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

import urllib3
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from ci_runner.backends.kubernetes.connect import ClusterClient
from ci_runner.backends.kubernetes.errors import KubeError, Unreachable, error_class
from ci_runner.backends.kubernetes.resources import JSON, POD_LOGS, Resource
from ci_runner.clock import Clock
from ci_runner.http_policy import (
    KUBE_CONNECT_TIMEOUT,
    KUBE_READ_TIMEOUT,
    KUBERNETES_RETRY,
    LOG_READ_TIMEOUT,
    WATCH_READ_SLACK,
    WATCH_SECONDS,
    RetryPolicy,
    parse_retry_after,
)

Query = Sequence[tuple[str, str | int | bool]]
# Chunks joined at most by ResponseStream.batches (a burst of lines still reaches the CI log soon).
MAX_BATCH_CHUNKS: Final = 1024

# Errors raised while reading a response body when the connection breaks.
STREAM_ERRORS: Final = (
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
    ValueError,
)


class ResponseStream:
    """An open streaming response (a watch or a followed log), read chunk by chunk."""

    def __init__(self, response: urllib3.HTTPResponse, error: KubeError) -> None:
        self._response = response
        self._error = error  # raised (as Unreachable) when the stream breaks

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives; raises :class:`Unreachable` if the connection breaks."""
        try:
            yield from self._response.stream(64 * 1024, decode_content=True)
        except STREAM_ERRORS as exc:
            err = self._error
            raise Unreachable(
                err.verb,
                err.resource,
                err.namespace,
                None,
                f"stream broken: {exc}",
                err.host,
                agent_context=err.agent_context,
            ) from exc

    def batches(self) -> Iterator[bytes]:
        """:meth:`chunks`, those already received joined: kube-apiserver passes a followed log
        on a chunk per line (the kubelet flushes each write), and 256 ranks write hundreds a
        second. A chunk is never held back waiting for the next one."""
        batch: list[bytes] = []
        chunks = self.chunks()
        for chunk in chunks:
            batch.append(chunk)
            if len(batch) < MAX_BATCH_CHUNKS and self._more_received():
                continue
            yield b"".join(batch)
            batch = []
        if batch:
            yield b"".join(batch)

    def _more_received(self) -> bool:
        """Whether more of the answer has come in: in the socket's buffer (or TLS's), or read
        from it already into the buffered reader http.client reads chunks from. Never waits."""
        sock = getattr(self._response.connection, "sock", None)
        reader = getattr(getattr(self._response, "_fp", None), "fp", None)
        if sock is None or reader is None:
            return False
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        try:
            if select.select([sock], [], [], 0)[0]:
                return True
            timeout = sock.gettimeout()
            sock.settimeout(0)  # peek reads the socket only when its buffer is empty: not now
            try:
                return bool(reader.peek(1))
            finally:
                sock.settimeout(timeout)
        except (OSError, ValueError):  # nothing there (TLS says so with an error), or closed
            return False

    def interrupt(self) -> None:
        """Make a read blocked in another thread return; the reading thread then closes."""
        try:
            self._response.shutdown()
        except (*STREAM_ERRORS, RuntimeError):
            pass  # already read to the end and back in the pool

    def close(self) -> None:
        """Done reading (from the thread that reads)."""
        self.interrupt()
        # Close rather than hand a half-read connection back to the pool for reuse.
        self._response.close()
        self._response.release_conn()


class StreamReader:
    """Reads streams on one thread that any other thread may stop, even mid-read."""

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._stream: ResponseStream | None = None

    def stop(self) -> None:
        """Stop reading; interrupts a blocked read. Safe from any thread."""
        self._stopped.set()
        with self._lock:
            if self._stream is not None:
                self._stream.interrupt()

    @contextmanager
    def reading(self, stream: ResponseStream) -> Iterator[ResponseStream]:
        """``stream``, interruptible by :meth:`stop` while the block reads it; closed after."""
        with self._lock:
            self._stream = stream
        if self._stopped.is_set():
            stream.interrupt()
        try:
            yield stream
        finally:
            with self._lock:
                self._stream = None
            stream.close()


class KubeApi:
    """The API calls the backend makes, in one namespace."""

    def __init__(
        self,
        client: ApiClient,
        namespace: str,
        clock: Clock,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.clock = clock
        self.retry = retry or KUBERNETES_RETRY
        self.host: str = client.configuration.host
        # The GitLab agent context the client goes through, so refusals speak the agent's terms.
        self.agent_context = client.agent_context if isinstance(client, ClusterClient) else ""
        _disable_client_retries(client)

    # -- the verbs --------------------------------------------------------------------------

    def get(self, resource: Resource, name: str) -> JSON:
        return self._json("get", resource, "GET", resource.path(self.namespace, name))

    def list(
        self,
        resource: Resource,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> JSON:
        query = _selectors(label_selector, field_selector)
        return self._json("list", resource, "GET", resource.path(self.namespace), query)

    def create(self, resource: Resource, body: JSON) -> JSON:
        return self._json("create", resource, "POST", resource.path(self.namespace), body=body)

    def patch(self, resource: Resource, name: str, body: JSON) -> JSON:
        """A JSON merge patch (RFC 7386)."""
        path = resource.path(self.namespace, name)
        return self._json(
            "patch", resource, "PATCH", path, body=body, content_type="application/merge-patch+json"
        )

    def delete(self, resource: Resource, name: str, propagation: str | None = None) -> JSON:
        body: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        path = resource.path(self.namespace, name)
        return self._json("delete", resource, "DELETE", path, body=body)

    def delete_collection(
        self, resource: Resource, label_selector: str, propagation: str | None = None
    ) -> JSON:
        """Delete every object the selector matches, in one request (none matching is fine)."""
        body: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        path = resource.path(self.namespace)
        query = _selectors(label_selector, None)
        return self._json("deletecollection", resource, "DELETE", path, query, body=body)

    def watch(
        self,
        resource: Resource,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = WATCH_SECONDS,
    ) -> ResponseStream:
        query: list[tuple[str, str | int | bool]] = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout_seconds),
            *_selectors(label_selector, field_selector),
        ]
        path = resource.path(self.namespace)
        return self._stream("watch", resource, path, query, timeout_seconds + WATCH_READ_SLACK)

    def follow_log(
        self, pod: str, since_time: str | None = None, container: str | None = None
    ) -> ResponseStream:
        """A container's log with RFC 3339 timestamps, followed as it is written.

        ``container`` must be named when the pod has several (an injected sidecar).
        """
        query: list[tuple[str, str | int | bool]] = [("follow", "true"), ("timestamps", "true")]
        if container:
            query.append(("container", container))
        if since_time:
            query.append(("sinceTime", since_time))
        path = POD_LOGS.path(self.namespace, pod)
        return self._stream("get", POD_LOGS, path, query, LOG_READ_TIMEOUT)

    def log_tail(self, pod: str, container: str, lines: int) -> str:
        """The last ``lines`` of one container's log (its current or, once ended, last run)."""
        query: Query = [("container", container), ("tailLines", lines)]
        path = POD_LOGS.path(self.namespace, pod)
        response = self.request("get", POD_LOGS, "GET", path, query)
        return bytes(response.data).decode("utf-8", errors="replace")

    # -- the one way out ---------------------------------------------------------------------

    def request(
        self,
        verb: str,
        resource: Resource,
        method: str,
        path: str,
        query: Query = (),
        body: JSON | None = None,
        content_type: str = "application/json",
        read_timeout: float | None = KUBE_READ_TIMEOUT,
        stream: bool = False,
    ) -> urllib3.HTTPResponse:
        """Send one request, retrying 429/5xx/connection errors; the response on 2xx.

        Unless ``stream``, the body is read here (``response.data``), so an answer broken off
        half-way is retried like a refused connection.
        """
        retry = 0
        while True:
            try:
                response = self._send(
                    verb, resource, method, path, query, body, content_type, read_timeout
                )
                if not stream:
                    self._read_body(verb, resource, response)
                return response
            except KubeError as err:
                if not err.retryable or retry + 1 >= self.retry.attempts:
                    raise
                self.clock.sleep(self.retry.delay(retry, err.retry_after))
                retry += 1

    def _read_body(self, verb: str, resource: Resource, response: urllib3.HTTPResponse) -> None:
        try:
            response.data  # noqa: B018 -- reads and keeps the body
        except STREAM_ERRORS as exc:
            raise Unreachable(
                verb,
                resource,
                self.namespace,
                None,
                _short(str(exc)),
                self.host,
                agent_context=self.agent_context,
            ) from exc
        finally:
            response.release_conn()

    def _send(
        self,
        verb: str,
        resource: Resource,
        method: str,
        path: str,
        query: Query,
        body: JSON | None,
        content_type: str,
        read_timeout: float | None,
    ) -> urllib3.HTTPResponse:
        headers = {"Accept": "application/json, */*", "Content-Type": content_type}
        serialized = self.client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            answer = self.client.call_api(
                *serialized,
                _request_timeout=(KUBE_CONNECT_TIMEOUT, read_timeout) if read_timeout else None,
            )
        except (ApiException, *STREAM_ERRORS) as exc:
            reason = str(getattr(exc, "reason", None) or exc)
            raise Unreachable(
                verb,
                resource,
                self.namespace,
                None,
                _short(reason),
                self.host,
                agent_context=self.agent_context,
            ) from exc
        response: urllib3.HTTPResponse = answer.response
        if 200 <= response.status <= 299:
            return response
        raise self._error(verb, resource, response)

    def _error(self, verb: str, resource: Resource, response: urllib3.HTTPResponse) -> KubeError:
        try:
            data = response.data
        except STREAM_ERRORS:
            data = b""
        finally:
            response.release_conn()
        message = _status_message(data) or f"{response.status} {response.reason}"
        retry_after = parse_retry_after(response.headers.get("Retry-After"), self.clock.now())
        cls = error_class(response.status)
        return cls(
            verb,
            resource,
            self.namespace,
            response.status,
            message,
            self.host,
            retry_after,
            agent_context=self.agent_context,
        )

    def _json(
        self,
        verb: str,
        resource: Resource,
        method: str,
        path: str,
        query: Query = (),
        body: JSON | None = None,
        content_type: str = "application/json",
    ) -> JSON:
        response = self.request(verb, resource, method, path, query, body, content_type)
        parsed = json.loads(response.data) if response.data else {}
        return parsed if isinstance(parsed, dict) else {}

    def _stream(
        self,
        verb: str,
        resource: Resource,
        path: str,
        query: Query,
        read_timeout: float | None,
    ) -> ResponseStream:
        response = self.request(
            verb, resource, "GET", path, query, read_timeout=read_timeout, stream=True
        )
        template = KubeError(
            verb, resource, self.namespace, None, "", self.host, agent_context=self.agent_context
        )
        return ResponseStream(response, template)


def _disable_client_retries(client: ApiClient) -> None:
    """Retrying is ours alone: urllib3's default would retry 429/503 sleeping for real (on
    ``Retry-After``) and hide connection errors behind its own retries."""
    pool_manager = getattr(getattr(client, "rest_client", None), "pool_manager", None)
    if pool_manager is not None:
        pool_manager.connection_pool_kw["retries"] = False
        pool_manager.clear()


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


def _status_message(data: bytes) -> str:
    """The ``message`` of a ``Status`` body, else the body's first line."""
    text = data.decode("utf-8", errors="replace").strip()
    try:
        status = json.loads(text)
    except ValueError:
        return text.splitlines()[0][:300] if text else ""
    if isinstance(status, dict) and isinstance(status.get("message"), str):
        return str(status["message"])
    return text[:300]


def _short(reason: str) -> str:
    """urllib3's reasons nest the whole retry history; keep the last, most specific part."""
    reason = " ".join(reason.split())
    marker = "Caused by "
    if marker in reason:
        reason = reason.split(marker)[-1].rstrip(")")
    return reason[:300]
