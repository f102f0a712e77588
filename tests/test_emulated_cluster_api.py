"""The emulated cluster's API client: a watch yields each event as its chunk arrives, not once
more bytes come."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from testing.kube_api import Api

# A pod event of the size kube-apiserver sends (several KiB): longer than any read size a
# client might wait to fill, and not a multiple of one.
BIG = {"metadata": {"name": "worker-0", "resourceVersion": "7"}, "spec": {"x": "y" * 5000}}
SECOND = {"metadata": {"name": "worker-1", "resourceVersion": "8"}}


class _Watch(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    send_second = threading.Event()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for obj in (BIG, SECOND):
            line = json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()
            if obj is BIG and not self.send_second.wait(10):
                return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Watch)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        _Watch.send_second.set()
        httpd.shutdown()
        _Watch.send_second.clear()


def test_a_watch_yields_an_event_before_the_next_one_is_sent(server: str) -> None:
    events = Api(server).watch("/api/v1/pods", "6", {}, lambda: False)
    kind, obj = next(events)  # the server sends the second only once this one came
    assert (kind, obj) == ("ADDED", BIG)
    _Watch.send_second.set()
    assert list(events) == [("ADDED", SECOND)]
