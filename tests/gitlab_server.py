"""A fake GitLab REST API v4 on loopback that the real python-gitlab talks to over real HTTP.

Only what ci-runner uses, answered the way GitLab answers it (status codes, JSON shapes, error
bodies, pagination headers and ``Link``): the current user, projects (by id or URL-encoded path),
merge requests, a commit's merge requests, merge-request notes (list/create/get/update), commit
comments (list/create) and single job-artifact files by ref. Tokens go in ``PRIVATE-TOKEN``;
an unknown token gets GitLab's 401, a token without the ``api`` scope GitLab's 403 on writes
(``read_api``) or on everything. Notes over 1,000,000 characters get GitLab's 400.

Faults are injected per method and path (429 with ``Retry-After``, bursts of 500, ...) and every
request is recorded so tests can count them. Usage::

    with FakeGitLab() as server:
        server.add_token("secret", server.add_user("ci-bot"))
        project = server.add_project("group/proj")
        gl = gitlab.Gitlab(server.url, private_token="secret")
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import gitlab.utils
import pytest

NOTE_LIMIT = 1_000_000  # characters, GitLab's Note validation
DEFAULT_PER_PAGE = 20
MAX_PER_PAGE = 100
API_PREFIX = "/api/v4"
_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
_TOO_LONG = '{:note=>["is too long (maximum is 1000000 characters)"]}'

JSONValue = Any


@dataclass(frozen=True)
class User:
    id: int
    username: str


@dataclass
class Note:
    id: int
    body: str
    author: User
    created: int  # seconds after the fake's epoch; also the creation order
    updated: int
    system: bool = False


@dataclass
class MergeRequest:
    id: int
    iid: int
    title: str
    source_branch: str
    target_branch: str
    sha: str  # head commit
    state: str  # opened | closed | merged | locked
    commits: list[str]
    notes: list[Note] = field(default_factory=list)


@dataclass
class CommitComment:
    note: str
    author: User
    created: int


@dataclass
class Project:
    id: int
    path: str  # path_with_namespace
    default_branch: str = "main"
    merge_requests: dict[int, MergeRequest] = field(default_factory=dict)
    commits: set[str] = field(default_factory=set)
    commit_comments: dict[str, list[CommitComment]] = field(default_factory=dict)
    # (ref, job name, path inside the archive) -> file content, from the ref's latest green pipeline
    artifacts: dict[tuple[str, str, str], bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class Token:
    value: str
    user: User
    scopes: frozenset[str]


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # as sent on the wire (percent-encoded), without the query
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    status: int

    def json(self) -> JSONValue:
        return json.loads(self.body)


@dataclass
class _Fault:
    method: str | None
    path: re.Pattern[str]
    status: int
    headers: dict[str, str]
    body: bytes
    remaining: int


class _Reply(Exception):
    """Raised by a route to answer right away (errors)."""

    def __init__(
        self, status: int, payload: JSONValue, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(status)
        self.status = status
        self.payload = payload
        self.headers = dict(headers or {})


@dataclass
class _Response:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


def _json_response(
    status: int, payload: JSONValue, headers: Mapping[str, str] | None = None
) -> _Response:
    return _Response(status, json.dumps(payload).encode(), headers=dict(headers or {}))


def _status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:  # GitLab's 52x from Cloudflare and friends have no standard phrase
        return str(status)


def _timestamp(seconds: int) -> str:
    return (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


class FakeGitLab:
    """The fake server and its state; start it with ``with`` (or ``start()``/``stop()``)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._users: list[User] = []
        self._tokens: dict[str, Token] = {}
        self._projects: list[Project] = []
        self._faults: list[_Fault] = []
        self._ids = 0
        self._clock = 0
        self.requests: list[RecordedRequest] = []
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeGitLab:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._http = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},  # shutdown() waits up to one poll
            name="fake-gitlab",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._http = None
        self._thread = None

    def __enter__(self) -> FakeGitLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The server URL to give python-gitlab (``http://127.0.0.1:<port>``)."""
        if self._http is None:
            raise RuntimeError("FakeGitLab is not started")
        host, port = self._http.server_address[:2]
        return f"http://{host!s}:{port}"

    # --- state -----------------------------------------------------------------------------

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def add_user(self, username: str) -> User:
        with self._lock:
            user = User(self._next_id(), username)
            self._users.append(user)
            return user

    def add_token(self, value: str, user: User, scopes: Sequence[str] = ("api",)) -> Token:
        with self._lock:
            token = Token(value, user, frozenset(scopes))
            self._tokens[value] = token
            return token

    def revoke_token(self, value: str) -> None:
        """From now on ``value`` gets 401, as after it expired or was revoked."""
        with self._lock:
            self._tokens.pop(value, None)

    def add_project(self, path: str, *, default_branch: str = "main") -> Project:
        with self._lock:
            project = Project(self._next_id(), path, default_branch)
            self._projects.append(project)
            return project

    def add_commit(self, project: Project, sha: str) -> None:
        with self._lock:
            project.commits.add(sha)

    def add_merge_request(
        self,
        project: Project,
        iid: int,
        *,
        sha: str,
        source_branch: str = "feature",
        target_branch: str = "main",
        state: str = "opened",
        commits: Sequence[str] = (),
        title: str = "",
    ) -> MergeRequest:
        """An MR whose head is ``sha``; ``commits`` are older commits also in it."""
        with self._lock:
            history = [*commits, sha]
            mr = MergeRequest(
                self._next_id(),
                iid,
                title or f"MR {iid}",
                source_branch,
                target_branch,
                sha,
                state,
                history,
            )
            project.merge_requests[iid] = mr
            project.commits.update(history)
            return mr

    def add_note(self, mr: MergeRequest, body: str, author: User, *, system: bool = False) -> Note:
        with self._lock:
            tick = self._tick()
            note = Note(self._next_id(), body, author, tick, tick, system)
            mr.notes.append(note)
            return note

    def set_artifact(self, project: Project, ref: str, job: str, path: str, data: bytes) -> None:
        """``path`` of ``job``'s artifacts in the latest successful pipeline of ``ref``."""
        with self._lock:
            project.artifacts[(ref, job, path)] = data

    def inject(
        self,
        status: int,
        *,
        method: str | None = None,
        path: str = ".*",
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path`` (a regex searched
        in the wire path) with ``status``, before authentication, as a proxy or Rack::Attack
        would. Default bodies are GitLab's: ``Retry later`` for 429, JSON messages otherwise."""
        if body is None:
            if status == 429:
                body = b"Retry later\n"
            else:
                body = json.dumps({"message": _status_line(status)}).encode()
        with self._lock:
            self._faults.append(
                _Fault(method, re.compile(path), status, dict(headers or {}), body, times)
            )

    def count(self, method: str, path: str = ".*") -> int:
        """How many recorded requests had ``method`` and a wire path matching regex ``path``."""
        return len(self.matching(method, path))

    def matching(self, method: str, path: str = ".*") -> list[RecordedRequest]:
        pattern = re.compile(path)
        with self._lock:
            return [r for r in self.requests if r.method == method and pattern.search(r.path)]

    # --- request handling ------------------------------------------------------------------

    def handle(
        self, method: str, raw_target: str, headers: Mapping[str, str], body: bytes, host: str
    ) -> _Response:
        split = urlsplit(raw_target)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        with self._lock:
            try:
                response = self._fault(method, split.path) or self._route(
                    method, split.path, query, headers, body, host
                )
            except _Reply as reply:
                response = _json_response(reply.status, reply.payload, reply.headers)
            self.requests.append(
                RecordedRequest(method, split.path, query, dict(headers), body, response.status)
            )
        return response

    def _fault(self, method: str, path: str) -> _Response | None:
        for fault in self._faults:
            if fault.remaining <= 0 or (fault.method and fault.method != method):
                continue
            if not fault.path.search(path):
                continue
            fault.remaining -= 1
            content_type = "text/plain" if fault.status == 429 else "application/json"
            return _Response(fault.status, fault.body, content_type, dict(fault.headers))
        return None

    def _authenticate(self, method: str, headers: Mapping[str, str]) -> User:
        token = self._tokens.get(headers.get("private-token", ""))
        if token is None:
            raise _Reply(401, {"message": "401 Unauthorized"})
        allowed = "api" in token.scopes or ("read_api" in token.scopes and method == "GET")
        if not allowed:
            raise _Reply(
                403,
                {
                    "error": "insufficient_scope",
                    "error_description": "The request requires higher privileges than "
                    "provided by the access token.",
                    "scope": "api",
                },
            )
        return token.user

    def _route(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        headers: Mapping[str, str],
        body: bytes,
        host: str,
    ) -> _Response:
        if not path.startswith(API_PREFIX + "/"):
            raise _Reply(404, {"error": "404 Not Found"})
        raw = path[len(API_PREFIX) + 1 :].split("/")
        seg = [unquote(s) for s in raw]
        user = self._authenticate(method, headers)
        base = f"http://{host}"
        page = _Pager(base, path, query)

        if seg == ["user"]:
            return self._only(method, "GET", lambda: _json_response(200, _user_json(user, base)))
        if len(seg) < 2 or seg[0] != "projects":
            raise _Reply(404, {"error": "404 Not Found"})
        project = self._project(seg[1])
        rest = seg[2:]
        if not rest:
            return self._only(
                method, "GET", lambda: _json_response(200, _project_json(project, base))
            )
        if rest[0] == "merge_requests" and len(rest) >= 2:
            mr = self._merge_request(project, rest[1])
            if len(rest) == 2:
                return self._only(
                    method, "GET", lambda: _json_response(200, _mr_json(project, mr, base))
                )
            if rest[2] == "notes" and len(rest) == 3:
                if method == "GET":
                    return page.respond(
                        [_note_json(project, mr, n, base) for n in _sorted_notes(mr.notes, query)]
                    )
                return self._only(
                    method, "POST", lambda: self._create_note(project, mr, user, body, base)
                )
            if rest[2] == "notes" and len(rest) == 4:
                note = self._note(mr, rest[3])
                if method == "GET":
                    return _json_response(200, _note_json(project, mr, note, base))
                return self._only(
                    method, "PUT", lambda: self._update_note(project, mr, note, user, body, base)
                )
        if rest[:2] == ["repository", "commits"] and len(rest) == 4:
            sha = rest[2]
            if sha not in project.commits:
                raise _Reply(404, {"message": "404 Commit Not Found"})
            if rest[3] == "merge_requests":
                mrs = [
                    _mr_json(project, mr, base)
                    for mr in sorted(project.merge_requests.values(), key=lambda m: -m.iid)
                    if sha in mr.commits
                ]
                return self._only(method, "GET", lambda: page.respond(mrs))
            if rest[3] == "comments":
                if method == "GET":
                    comments = project.commit_comments.get(sha, [])
                    return page.respond([_comment_json(c, base) for c in comments])
                return self._only(
                    method, "POST", lambda: self._create_comment(project, sha, user, body, base)
                )
        if rest[:2] == ["jobs", "artifacts"] and "raw" in rest[3:]:
            cut = rest.index("raw", 3)
            ref, artifact = "/".join(rest[2:cut]), "/".join(rest[cut + 1 :])
            return self._only(method, "GET", lambda: self._artifact(project, ref, artifact, query))
        raise _Reply(404, {"error": "404 Not Found"})

    @staticmethod
    def _only(method: str, allowed: str, answer: Any) -> _Response:
        if method != allowed:
            raise _Reply(405, {"error": "405 Not Allowed"})
        response: _Response = answer()
        return response

    def _project(self, ref: str) -> Project:
        for project in self._projects:
            if ref == str(project.id) or ref == project.path:
                return project
        raise _Reply(404, {"message": "404 Project Not Found"})

    @staticmethod
    def _merge_request(project: Project, iid: str) -> MergeRequest:
        mr = project.merge_requests.get(int(iid)) if iid.isdigit() else None
        if mr is None:
            raise _Reply(404, {"message": "404 Not found"})
        return mr

    @staticmethod
    def _note(mr: MergeRequest, note_id: str) -> Note:
        for note in mr.notes:
            if str(note.id) == note_id:
                return note
        raise _Reply(404, {"message": "404 Note Not Found"})

    def _create_note(
        self, project: Project, mr: MergeRequest, user: User, body: bytes, base: str
    ) -> _Response:
        text = _required(body, "body")
        if len(text) > NOTE_LIMIT:
            raise _Reply(400, {"message": f"400 Bad request - Note {_TOO_LONG}"})
        note = self.add_note(mr, text, user)
        return _json_response(201, _note_json(project, mr, note, base))

    def _update_note(
        self, project: Project, mr: MergeRequest, note: Note, user: User, body: bytes, base: str
    ) -> _Response:
        if note.author != user:
            raise _Reply(403, {"message": "403 Forbidden"})
        text = _required(body, "body")
        if len(text) > NOTE_LIMIT:
            raise _Reply(400, {"message": f"400 Bad request - Failed to save note {_TOO_LONG}"})
        note.body = text
        note.updated = self._tick()
        return _json_response(200, _note_json(project, mr, note, base))

    def _create_comment(
        self, project: Project, sha: str, user: User, body: bytes, base: str
    ) -> _Response:
        text = _required(body, "note")
        if len(text) > NOTE_LIMIT:
            raise _Reply(400, {"message": f"400 Bad request - Failed to save note {_TOO_LONG}"})
        comment = CommitComment(text, user, self._tick())
        project.commit_comments.setdefault(sha, []).append(comment)
        return _json_response(201, _comment_json(comment, base))

    @staticmethod
    def _artifact(project: Project, ref: str, path: str, query: Mapping[str, str]) -> _Response:
        job = query.get("job")
        if not job:
            raise _Reply(400, {"error": "job is missing"})
        data = project.artifacts.get((ref, job, path))
        if data is None:
            raise _Reply(404, {"message": "404 Not Found"})
        return _Response(200, data, "application/octet-stream")


def _required(body: bytes, name: str) -> str:
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        data = dict(parse_qsl(body.decode(errors="replace")))
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value:
        raise _Reply(400, {"error": f"{name} is missing"})
    return value


def _sorted_notes(notes: Sequence[Note], query: Mapping[str, str]) -> list[Note]:
    order_by = query.get("order_by", "created_at")
    if order_by not in ("created_at", "updated_at"):
        raise _Reply(400, {"error": "order_by does not have a valid value"})
    sort = query.get("sort", "desc")
    if sort not in ("asc", "desc"):
        raise _Reply(400, {"error": "sort does not have a valid value"})
    key = (
        (lambda n: (n.created, n.id)) if order_by == "created_at" else (lambda n: (n.updated, n.id))
    )
    return sorted(notes, key=key, reverse=sort == "desc")


class _Pager:
    """GitLab's offset pagination: ``page``/``per_page`` in, ``X-*`` headers and ``Link`` out."""

    def __init__(self, base: str, path: str, query: Mapping[str, str]) -> None:
        self.base = base
        self.path = path
        self.query = dict(query)

    def _number(self, name: str, default: int) -> int:
        raw = self.query.get(name, "")
        return int(raw) if raw.isdigit() and int(raw) > 0 else default

    def _link(self, page: int, per_page: int) -> str:
        query = {**self.query, "page": str(page), "per_page": str(per_page)}
        return f"{self.base}{self.path}?{urlencode(query)}"

    def respond(self, items: Sequence[JSONValue]) -> _Response:
        per_page = min(self._number("per_page", DEFAULT_PER_PAGE), MAX_PER_PAGE)
        page = self._number("page", 1)
        total_pages = max(1, -(-len(items) // per_page))
        chunk = list(items[(page - 1) * per_page : page * per_page])
        links = []
        if page > 1:
            links.append(f'<{self._link(page - 1, per_page)}>; rel="prev"')
        if page < total_pages:
            links.append(f'<{self._link(page + 1, per_page)}>; rel="next"')
        links.append(f'<{self._link(1, per_page)}>; rel="first"')
        links.append(f'<{self._link(total_pages, per_page)}>; rel="last"')
        headers = {
            "X-Page": str(page),
            "X-Per-Page": str(per_page),
            "X-Total": str(len(items)),
            "X-Total-Pages": str(total_pages),
            "X-Next-Page": str(page + 1) if page < total_pages else "",
            "X-Prev-Page": str(page - 1) if page > 1 else "",
            "Link": ", ".join(links),
        }
        return _json_response(200, chunk, headers)


def _user_json(user: User, base: str) -> JSONValue:
    return {
        "id": user.id,
        "username": user.username,
        "name": user.username,
        "state": "active",
        "web_url": f"{base}/{user.username}",
    }


def _project_json(project: Project, base: str) -> JSONValue:
    return {
        "id": project.id,
        "name": project.path.rsplit("/", 1)[-1],
        "path_with_namespace": project.path,
        "default_branch": project.default_branch,
        "web_url": f"{base}/{project.path}",
    }


def _mr_json(project: Project, mr: MergeRequest, base: str) -> JSONValue:
    return {
        "id": mr.id,
        "iid": mr.iid,
        "project_id": project.id,
        "title": mr.title,
        "state": mr.state,
        "source_branch": mr.source_branch,
        "target_branch": mr.target_branch,
        "sha": mr.sha,
        "web_url": f"{base}/{project.path}/-/merge_requests/{mr.iid}",
    }


def _note_json(project: Project, mr: MergeRequest, note: Note, base: str) -> JSONValue:
    return {
        "id": note.id,
        "type": None,
        "body": note.body,
        "attachment": None,
        "author": _user_json(note.author, base),
        "created_at": _timestamp(note.created),
        "updated_at": _timestamp(note.updated),
        "system": note.system,
        "noteable_id": mr.id,
        "noteable_type": "MergeRequest",
        "noteable_iid": mr.iid,
        "project_id": project.id,
        "resolvable": False,
        "confidential": False,
        "internal": False,
    }


def _comment_json(comment: CommitComment, base: str) -> JSONValue:
    return {
        "note": comment.note,
        "path": None,
        "line": None,
        "line_type": None,
        "author": _user_json(comment.author, base),
        "created_at": _timestamp(comment.created),
    }


def record_retry_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Make python-gitlab's retry waits (``time.sleep`` in ``gitlab.utils``) instant and return
    the list they are recorded in, so tests assert the backoff instead of sleeping it."""
    recorded: list[float] = []
    fake_time = SimpleNamespace(sleep=recorded.append, time=time.time)
    monkeypatch.setattr(gitlab.utils, "time", fake_time)
    return recorded


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like GitLab behind a proxy
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        fake: FakeGitLab = self.server.fake  # type: ignore[attr-defined]
        host = self.headers.get("Host") or fake.url.removeprefix("http://")
        response = fake.handle(self.command, self.path, headers, body, host)
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``FakeGitLab.requests`` instead."""
