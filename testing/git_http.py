"""A git server over HTTP on loopback: ``git http-backend`` run as a CGI program (git's
Documentation/git-http-backend.txt) for the repositories under a root, as a GitLab serves them.
With a user and password it serves only a client that sends them (Basic authentication), behind
a 401 with ``WWW-Authenticate: Basic``, which is what makes git ask its credential helper, and
records the credentials each request sent; without, it serves everyone."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class GitHttp:
    url: str  # http://127.0.0.1:PORT/<name>.git serves ROOT/<name>.git
    seen: list[str] = field(default_factory=list)  # "user:password" of each authorised request


@contextmanager
def git_http(root: Path, user: str | None = None, password: str | None = None) -> Iterator[GitHttp]:
    """Serve the bare repositories in ``root``: to ``user`` with ``password`` only, when given."""
    expected = (
        "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if user is not None
        else None
    )
    server_state = GitHttp(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _serve(self) -> None:
            if expected is not None and self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if expected is not None:
                server_state.seen.append(f"{user}:{password}")
            path, _, query = self.path.partition("?")
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            env = {
                "PATH": os.environ["PATH"],
                "GIT_PROJECT_ROOT": str(root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "GIT_CONFIG_NOSYSTEM": "1",
                "HOME": str(root),
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type") or "",
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": user or "",
                # The Git-Protocol header, as a web server passes it (protocol v2).
                "GIT_PROTOCOL": self.headers.get("Git-Protocol") or "",
            }
            cgi = subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
            # Only the CGI headers end in CRLF: the content (a pack) is binary, left as it is.
            head, _, content = cgi.stdout.partition(b"\r\n\r\n")
            if cgi.returncode != 0 or not head:
                self.send_error(500, cgi.stderr.decode(errors="replace")[-200:])
                return
            status = 200
            headers = []
            for line in head.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server_state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server_state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
