"""A fake GitLab REST API v4 on loopback that the real python-gitlab talks to over real HTTP.

Only what ci-runner uses, answered the way GitLab answers it (status codes, JSON shapes, error
bodies, pagination headers and ``Link``): the current user, projects (by id or URL-encoded path,
forks), merge requests (in the target project, from a fork or not), a commit's merge requests,
merge-request notes (list/create/get/update), commit discussions (list/create/get, edit a note),
commit comments (list/create), pipelines and their jobs, and job-artifact files by ref or by job.
Tokens go in ``PRIVATE-TOKEN``; an unknown token gets GitLab's 401, a token without the ``api``
scope GitLab's 403 on writes (``read_api``) or on everything. Notes over 1,000,000 characters get
GitLab's 400.

Rules, each from GitLab's source (gitlabhq/gitlabhq; files as cited):

- A note's body is stored after quick-action extraction: commands are executed and removed, ``\r``
  deleted, trailing whitespace stripped (app/services/notes/create_service.rb:39-46,
  update_service.rb:19-30; lib/gitlab/quick_actions/extractor.rb:57-70, ported in
  testing/fake_gitlab/quick_actions.py). Merge requests, issues and commits get this
  (app/services/notes/quick_actions_service.rb:16). A note of commands only is not saved and the
  API answers 202 with the commands' changes (lib/api/helpers/notes_helpers.rb,
  ``process_note_creation_result``); on edit such a note is deleted (update_service.rb:51-52).
- Editing or deleting a note needs ``admin_note``: its author, or a maintainer of the project
  (notes_helpers.rb:39-42; app/policies/note_policy.rb:6 delegates to the project, whose
  policy gives maintainers ``admin_note``; note_policy.rb:52-56 gives it to the author).
- ``jobs/artifacts/:ref/raw/*path?job=`` reads only the latest successful pipeline for the ref:
  if that pipeline has no such job with artifacts, 404 even when older pipelines have one
  (app/models/project.rb ``latest_successful_build_for_ref``; lib/api/ci/job_artifacts.rb).
- Pagination ``Link`` headers are built from GitLab's configured external URL, not from the
  request's Host (``FakeGitLab(external_url=...)``), which is what python-gitlab follows.
- A fork's merge request lives in the target project; its commits are readable there too.

Faults are injected per method and path (429 with ``Retry-After``, bursts of 500, ...), either
before the request reaches GitLab (a proxy or Rack::Attack answering) or *after* GitLab executed it
(``after=True``: the write happened, the proxy then answered 502/504 or dropped the connection).
Every request is recorded so tests can count them. Usage::

    with FakeGitLab() as server:
        server.add_token("secret", server.add_user("ci-bot"))
        project = server.add_project("group/proj")
        gl = gitlab.Gitlab(server.url, private_token="secret")
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import gitlab.utils
import pytest

from ci_runner.clock import ManualClock
from ci_runner.gitlab.transport import BoundedSession, Budget
from testing.fake_gitlab.mlflow import FakeMlflow
from testing.fake_gitlab.quick_actions import extract_commands

NOTE_LIMIT = 1_000_000  # characters, GitLab's Note validation
DEFAULT_PER_PAGE = 20
MAX_PER_PAGE = 100
API_PREFIX = "/api/v4"
_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
_TOO_LONG = '{:note=>["is too long (maximum is 1000000 characters)"]}'
DROP = 0  # a fault "status" that closes the connection without an answer

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
    source_project_id: int | None = None  # None: the MR's own project
    labels: list[str] = field(default_factory=list)
    # Quick actions GitLab executed on this MR, in order: [["close"], ["label", "~x"], ...]
    executed_commands: list[list[str]] = field(default_factory=list)


@dataclass
class CommitComment:
    note: str
    author: User
    created: int


@dataclass
class Discussion:
    id: str  # 40 hex characters, as GitLab's discussion ids
    sha: str
    notes: list[Note] = field(default_factory=list)


@dataclass
class Job:
    id: int
    name: str
    status: str  # success | failed | canceled | skipped | ...
    artifacts: dict[str, bytes] = field(default_factory=dict)  # path inside the archive -> bytes


@dataclass
class Pipeline:
    id: int
    ref: str
    sha: str
    status: str  # success | failed | running | canceled | ...
    source: str = "push"
    jobs: list[Job] = field(default_factory=list)


@dataclass
class Project:
    id: int
    path: str  # path_with_namespace
    default_branch: str = "main"
    merge_requests: dict[int, MergeRequest] = field(default_factory=dict)
    commits: set[str] = field(default_factory=set)
    commit_comments: dict[str, list[CommitComment]] = field(default_factory=dict)
    discussions: list[Discussion] = field(default_factory=list)
    pipelines: list[Pipeline] = field(default_factory=list)
    forked_from: int | None = None
    maintainers: set[int] = field(default_factory=set)  # user ids
    commit_commands: list[list[str]] = field(default_factory=list)  # quick actions on commits


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
    status: int  # 0: the connection was dropped without an answer

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
    after: bool


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
    """The fake server and its state; start it with ``with`` (or ``start()``/``stop()``).

    ``external_url`` is GitLab's configured ``external_url``: the base of every URL it answers
    with (``web_url``, pagination ``Link``); by default the address it listens on.
    """

    def __init__(self, *, external_url: str | None = None, port: int = 0) -> None:
        self._lock = threading.RLock()
        self._users: list[User] = []
        self._tokens: dict[str, Token] = {}
        self._projects: list[Project] = []
        self._faults: list[_Fault] = []
        self._ids = 0
        self._clock = 0
        self._port = port
        self.external_url = external_url.rstrip("/") if external_url else None
        self.requests: list[RecordedRequest] = []
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.mlflow = FakeMlflow(self._job_exists, lambda: self.external_url or self.url)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeGitLab:
        server = ThreadingHTTPServer(("127.0.0.1", self._port), _Handler)
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

    def _next_id(self, wanted: int | None = None) -> int:
        if wanted is not None:
            self._ids = max(self._ids, wanted)
            return wanted
        self._ids += 1
        return self._ids

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def add_user(self, username: str, *, user_id: int | None = None) -> User:
        with self._lock:
            user = User(self._next_id(user_id), username)
            self._users.append(user)
            return user

    def users(self) -> list[User]:
        with self._lock:
            return list(self._users)

    def add_token(self, value: str, user: User, scopes: Sequence[str] = ("api",)) -> Token:
        with self._lock:
            token = Token(value, user, frozenset(scopes))
            self._tokens[value] = token
            return token

    def revoke_token(self, value: str) -> None:
        """From now on ``value`` gets 401, as after it expired or was revoked."""
        with self._lock:
            self._tokens.pop(value, None)

    def add_project(
        self,
        path: str,
        *,
        default_branch: str = "main",
        project_id: int | None = None,
        forked_from: Project | None = None,
    ) -> Project:
        with self._lock:
            project = Project(self._next_id(project_id), path, default_branch)
            project.forked_from = forked_from.id if forked_from else None
            self._projects.append(project)
            return project

    def project(self, ref: int | str) -> Project:
        """A project by id or path (for tests and the command line)."""
        with self._lock:
            for project in self._projects:
                if str(ref) in (str(project.id), project.path):
                    return project
        raise KeyError(ref)

    def add_maintainer(self, project: Project, user: User) -> None:
        """``user`` gets the Maintainer role in ``project`` (may edit anyone's notes)."""
        with self._lock:
            project.maintainers.add(user.id)

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
        source_project: Project | None = None,
    ) -> MergeRequest:
        """An MR of ``project`` (its target) whose head is ``sha``; ``commits`` are older
        commits also in it; ``source_project`` is the fork it comes from, if any."""
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
                source_project_id=source_project.id if source_project else None,
            )
            project.merge_requests[iid] = mr
            project.commits.update(history)  # GitLab fetches a fork MR's commits into the target
            if source_project is not None:
                source_project.commits.update(history)
            return mr

    def add_note(self, mr: MergeRequest, body: str, author: User, *, system: bool = False) -> Note:
        """A note stored as given (as if written before the test started)."""
        with self._lock:
            tick = self._tick()
            note = Note(self._next_id(), body, author, tick, tick, system)
            mr.notes.append(note)
            return note

    def add_pipeline(
        self,
        project: Project,
        ref: str,
        *,
        status: str = "success",
        sha: str | None = None,
        source: str = "push",
        jobs: Mapping[str, Mapping[str, bytes]] | None = None,
        job_status: str = "success",
    ) -> Pipeline:
        """A pipeline on ``ref`` (newer than every earlier one) with ``jobs``: job name ->
        {artifact path -> bytes} (an empty mapping: a job without artifacts)."""
        with self._lock:
            pipeline = Pipeline(self._next_id(), ref, sha or "0" * 40, status, source)
            for name, files in (jobs or {}).items():
                pipeline.jobs.append(Job(self._next_id(), name, job_status, dict(files)))
            project.pipelines.append(pipeline)
            return pipeline

    def set_artifact(self, project: Project, ref: str, job: str, path: str, data: bytes) -> None:
        """``path`` of ``job``'s artifacts in the latest successful pipeline of ``ref`` (made
        when there is none)."""
        with self._lock:
            pipeline = _latest_successful(project, ref)
            if pipeline is None:
                pipeline = self.add_pipeline(project, ref)
            found = next((j for j in pipeline.jobs if j.name == job), None)
            if found is None:
                found = Job(self._next_id(), job, "success")
                pipeline.jobs.append(found)
            found.artifacts[path] = data

    def notes(self, project: Project, iid: int) -> list[Note]:
        """The notes of merge request ``iid`` as GitLab stores them, oldest first."""
        with self._lock:
            return list(project.merge_requests[iid].notes)

    def inject(
        self,
        status: int,
        *,
        method: str | None = None,
        path: str = ".*",
        times: int = 1,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        after: bool = False,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path`` (a regex searched
        in the wire path) with ``status``: before authentication, as a proxy or Rack::Attack
        would, or with ``after=True`` once GitLab has executed the request (a proxy timing out
        on a slow write). ``status`` :data:`DROP` closes the connection without an answer.
        Default bodies are GitLab's: ``Retry later`` for 429, JSON messages otherwise."""
        if body is None:
            if status == 429:
                body = b"Retry later\n"
            else:
                body = json.dumps({"message": _status_line(status)}).encode()
        with self._lock:
            self._faults.append(
                _Fault(method, re.compile(path), status, dict(headers or {}), body, times, after)
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
            response = self._fault(method, split.path, after=False)
            if response is None:
                try:
                    response = self._route(method, split.path, query, headers, body, host)
                except _Reply as reply:
                    response = _json_response(reply.status, reply.payload, reply.headers)
                response = self._fault(method, split.path, after=True) or response
            self.requests.append(
                RecordedRequest(method, split.path, query, dict(headers), body, response.status)
            )
        return response

    def _fault(self, method: str, path: str, *, after: bool) -> _Response | None:
        for fault in self._faults:
            if fault.remaining <= 0 or fault.after != after:
                continue
            if (fault.method and fault.method != method) or not fault.path.search(path):
                continue
            fault.remaining -= 1
            content_type = "text/plain" if fault.status == 429 else "application/json"
            return _Response(fault.status, fault.body, content_type, dict(fault.headers))
        return None

    def _job_exists(self, job_id: str) -> bool:
        """``Ci::Build.find_by_id``: a job of any project."""
        jobs = (j for p in self._projects for pipeline in p.pipelines for j in pipeline.jobs)
        return any(str(job.id) == job_id for job in jobs)

    def _authenticate(self, method: str, headers: Mapping[str, str]) -> User:
        # A personal/project access token in PRIVATE-TOKEN or as a bearer token, as MLflow's
        # client sends MLFLOW_TRACKING_TOKEN (lib/gitlab/auth/auth_finders.rb).
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        token = self._tokens.get(headers.get("private-token") or bearer)
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
        base = self.external_url or f"http://{host}"
        page = _Pager(base, path, query)

        if seg == ["user"]:
            return self._only(method, "GET", lambda: _json_response(200, _user_json(user, base)))
        if len(seg) < 2 or seg[0] != "projects":
            raise _Reply(404, {"error": "404 Not Found"})
        project = self._project(seg[1])
        rest = seg[2:]
        if not rest:
            return self._only(
                method, "GET", lambda: _json_response(200, self._project_json(project, base))
            )
        if rest[:2] == ["ml", "mlflow"]:
            status, payload = self.mlflow.route(method, project.id, user.id, rest[2:], query, body)
            return _json_response(status, payload)
        if rest[0] == "merge_requests" and len(rest) >= 2:
            return self._merge_request_route(method, project, rest, query, body, user, base, page)
        if rest[:2] == ["repository", "commits"] and len(rest) >= 4:
            return self._commit_route(method, project, rest, body, user, base, page)
        if rest[0] == "pipelines":
            return self._pipeline_route(method, project, rest, query, page)
        if rest[:2] == ["jobs", "artifacts"] and "raw" in rest[3:]:
            cut = rest.index("raw", 3)
            ref, artifact = "/".join(rest[2:cut]), "/".join(rest[cut + 1 :])
            return self._only(method, "GET", lambda: self._artifact(project, ref, artifact, query))
        if rest[0] == "jobs" and len(rest) >= 4 and rest[2] == "artifacts":
            job = self._job(project, rest[1])
            artifact = "/".join(rest[3:])
            return self._only(method, "GET", lambda: _artifact_file(job, artifact))
        raise _Reply(404, {"error": "404 Not Found"})

    def _merge_request_route(
        self,
        method: str,
        project: Project,
        rest: list[str],
        query: Mapping[str, str],
        body: bytes,
        user: User,
        base: str,
        page: _Pager,
    ) -> _Response:
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
            note = _find_note(mr.notes, rest[3])
            if method == "GET":
                return _json_response(200, _note_json(project, mr, note, base))
            return self._only(
                method, "PUT", lambda: self._update_note(project, mr, note, user, body, base)
            )
        raise _Reply(404, {"error": "404 Not Found"})

    def _commit_route(
        self,
        method: str,
        project: Project,
        rest: list[str],
        body: bytes,
        user: User,
        base: str,
        page: _Pager,
    ) -> _Response:
        sha = rest[2]
        if sha not in project.commits:
            raise _Reply(404, {"message": "404 Commit Not Found"})
        if rest[3] == "merge_requests" and len(rest) == 4:
            # MergeRequestsFinder with project_id: the MRs whose target is this project
            # (lib/api/commits.rb, GET :id/repository/commits/:sha/merge_requests).
            mrs = [
                _mr_json(project, mr, base)
                for mr in sorted(project.merge_requests.values(), key=lambda m: -m.iid)
                if sha in mr.commits
            ]
            return self._only(method, "GET", lambda: page.respond(mrs))
        if rest[3] == "comments" and len(rest) == 4:
            if method == "GET":
                comments = project.commit_comments.get(sha, [])
                return page.respond([_comment_json(c, base) for c in comments])
            return self._only(
                method, "POST", lambda: self._create_comment(project, sha, user, body, base)
            )
        if rest[3] == "discussions":
            return self._discussion_route(method, project, sha, rest[4:], body, user, base, page)
        raise _Reply(404, {"error": "404 Not Found"})

    def _discussion_route(
        self,
        method: str,
        project: Project,
        sha: str,
        rest: list[str],
        body: bytes,
        user: User,
        base: str,
        page: _Pager,
    ) -> _Response:
        """lib/api/discussions.rb for noteable type Commit: list, create, get one, edit a note."""
        threads = [d for d in project.discussions if d.sha == sha]
        if not rest:
            if method == "GET":
                return page.respond([_discussion_json(project, d, base) for d in threads])
            return self._only(
                method, "POST", lambda: self._create_discussion(project, sha, user, body, base)
            )
        discussion = next((d for d in threads if d.id == rest[0]), None)
        if discussion is None:
            raise _Reply(404, {"message": "404 Discussion Not Found"})
        if len(rest) == 1:
            return self._only(
                method,
                "GET",
                lambda: _json_response(200, _discussion_json(project, discussion, base)),
            )
        if rest[1] == "notes" and len(rest) == 3:
            note = _find_note(discussion.notes, rest[2])
            return self._only(
                method,
                "PUT",
                lambda: self._update_commit_note(project, discussion, note, user, body, base),
            )
        raise _Reply(404, {"error": "404 Not Found"})

    def _pipeline_route(
        self,
        method: str,
        project: Project,
        rest: list[str],
        query: Mapping[str, str],
        page: _Pager,
    ) -> _Response:
        """lib/api/ci/pipelines.rb: list (ref, status, source filters; newest id first by
        default) and a pipeline's jobs (``scope[]`` filter)."""
        if len(rest) == 1:
            found = [
                p
                for p in project.pipelines
                if all(
                    not query.get(key) or getattr(p, key) == query[key]
                    for key in ("ref", "status", "source", "sha")
                )
            ]
            order_by = query.get("order_by", "id")
            if order_by not in ("id", "status", "ref", "updated_at", "user_id"):
                raise _Reply(400, {"error": "order_by does not have a valid value"})
            found.sort(key=lambda p: p.id, reverse=query.get("sort", "desc") == "desc")
            return self._only(
                method,
                "GET",
                lambda: page.respond([_pipeline_json(project, p, page.base) for p in found]),
            )
        pipeline = next((p for p in project.pipelines if str(p.id) == rest[1]), None)
        if pipeline is None:
            raise _Reply(404, {"message": "404 Not found"})
        if len(rest) == 3 and rest[2] == "jobs":
            scopes = set(page.query_list("scope[]"))
            jobs = [j for j in reversed(pipeline.jobs) if not scopes or j.status in scopes]
            return self._only(
                method,
                "GET",
                lambda: page.respond([_job_json(project, pipeline, j, page.base) for j in jobs]),
            )
        raise _Reply(404, {"error": "404 Not Found"})

    @staticmethod
    def _only(method: str, allowed: str, answer: Callable[[], _Response]) -> _Response:
        if method != allowed:
            raise _Reply(405, {"error": "405 Not Allowed"})
        return answer()

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
    def _job(project: Project, job_id: str) -> Job:
        for pipeline in project.pipelines:
            for job in pipeline.jobs:
                if str(job.id) == job_id:
                    return job
        raise _Reply(404, {"message": "404 Not found"})

    def _may_edit(self, project: Project, note: Note, user: User) -> None:
        if note.author != user and user.id not in project.maintainers:
            raise _Reply(403, {"message": "403 Forbidden"})

    def _create_note(
        self, project: Project, mr: MergeRequest, user: User, body: bytes, base: str
    ) -> _Response:
        text = _note_text(body, "body", "Note")
        content, commands = _execute_quick_actions(text, mr)
        if not content and commands:
            return _json_response(202, _commands_json(commands))
        note = self.add_note(mr, content, user)
        return _json_response(201, _note_json(project, mr, note, base))

    def _update_note(
        self, project: Project, mr: MergeRequest, note: Note, user: User, body: bytes, base: str
    ) -> _Response:
        self._may_edit(project, note, user)
        text = _note_text(body, "body", "Failed to save note")
        content, commands = _execute_quick_actions(text, mr)
        if not content and commands:
            mr.notes.remove(note)
            return _json_response(202, _commands_json(commands))
        note.body = content
        note.updated = self._tick()
        return _json_response(200, _note_json(project, mr, note, base))

    def _create_comment(
        self, project: Project, sha: str, user: User, body: bytes, base: str
    ) -> _Response:
        text = _note_text(body, "note", "Failed to save note")
        content, commands = extract_commands(text)
        project.commit_commands.extend(commands)
        comment = CommitComment(content, user, self._tick())
        project.commit_comments.setdefault(sha, []).append(comment)
        return _json_response(201, _comment_json(comment, base))

    def _create_discussion(
        self, project: Project, sha: str, user: User, body: bytes, base: str
    ) -> _Response:
        text = _note_text(body, "body", "Note")
        content, commands = extract_commands(text)
        project.commit_commands.extend(commands)
        if not content and commands:
            return _json_response(202, _commands_json(commands))
        tick = self._tick()
        note = Note(self._next_id(), content, user, tick, tick)
        digest = hashlib.sha1(f"{project.id}:{sha}:{note.id}".encode()).hexdigest()
        discussion = Discussion(digest, sha, [note])
        project.discussions.append(discussion)
        return _json_response(201, _discussion_json(project, discussion, base))

    def _update_commit_note(
        self,
        project: Project,
        discussion: Discussion,
        note: Note,
        user: User,
        body: bytes,
        base: str,
    ) -> _Response:
        self._may_edit(project, note, user)
        text = _note_text(body, "body", "Failed to save note")
        content, commands = extract_commands(text)
        project.commit_commands.extend(commands)
        if not content and commands:
            discussion.notes.remove(note)
            return _json_response(202, _commands_json(commands))
        note.body = content
        note.updated = self._tick()
        return _json_response(200, _commit_note_json(project, discussion, note, base))

    @staticmethod
    def _artifact(project: Project, ref: str, path: str, query: Mapping[str, str]) -> _Response:
        job_name = query.get("job")
        if not job_name:
            raise _Reply(400, {"error": "job is missing"})
        # Project#latest_successful_build_for_ref: the latest successful pipeline only.
        pipeline = _latest_successful(project, ref)
        job = None
        if pipeline is not None:
            job = next((j for j in pipeline.jobs if j.name == job_name and j.artifacts), None)
        if job is None:
            raise _Reply(404, {"message": "404 Not Found"})
        return _artifact_file(job, path)

    def _project_json(self, project: Project, base: str) -> JSONValue:
        data: dict[str, JSONValue] = {
            "id": project.id,
            "name": project.path.rsplit("/", 1)[-1],
            "path_with_namespace": project.path,
            "default_branch": project.default_branch,
            "web_url": f"{base}/{project.path}",
        }
        if project.forked_from is not None:
            parent = self._project(str(project.forked_from))
            data["forked_from_project"] = {
                "id": parent.id,
                "path_with_namespace": parent.path,
                "web_url": f"{base}/{parent.path}",
            }
        return data


def _latest_successful(project: Project, ref: str) -> Pipeline | None:
    """``Ci::Pipeline.latest_successful_for_ref``: the newest successful pipeline of ``ref``."""
    green = [p for p in project.pipelines if p.ref == ref and p.status == "success"]
    return max(green, key=lambda p: p.id) if green else None


def _artifact_file(job: Job, path: str) -> _Response:
    data = job.artifacts.get(path)
    if data is None:
        raise _Reply(404, {"message": "404 Not Found"})
    return _Response(200, data, "application/octet-stream")


def _execute_quick_actions(text: str, mr: MergeRequest) -> tuple[str, list[list[str]]]:
    """Extract the commands and apply the ones that change what the fake shows."""
    content, commands = extract_commands(text)
    for command in commands:
        mr.executed_commands.append(command)
        name = command[0]
        if name == "close" and mr.state == "opened":
            mr.state = "closed"
        elif name == "reopen" and mr.state == "closed":
            mr.state = "opened"
        elif name == "merge" and mr.state == "opened":
            mr.state = "merged"
        elif name in ("label", "labels") and len(command) > 1:
            mr.labels.extend(w.lstrip("~") for w in command[1].split())
        elif name == "title" and len(command) > 1:
            mr.title = command[1]
    return content, commands


def _commands_json(commands: list[list[str]]) -> JSONValue:
    """Entities::NoteCommands: what a note of commands only answers (202)."""
    return {
        "commands_changes": {c[0]: (c[1] if len(c) > 1 else True) for c in commands},
        "summary": [" ".join(c) for c in commands],
    }


def _find_note(notes: Sequence[Note], note_id: str) -> Note:
    for note in notes:
        if str(note.id) == note_id:
            return note
    raise _Reply(404, {"message": "404 Note Not Found"})


def _note_text(body: bytes, name: str, refusal: str) -> str:
    """The note's text from the request, refused as GitLab's Note validation refuses a text over
    NOTE_LIMIT; ``refusal`` starts that endpoint's message ("Note" or "Failed to save note": GitLab
    words it per endpoint)."""
    text = _required(body, name)
    if len(text) > NOTE_LIMIT:
        raise _Reply(400, {"message": f"400 Bad request - {refusal} {_TOO_LONG}"})
    return text


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
    """GitLab's offset pagination: ``page``/``per_page`` in, ``X-*`` headers and ``Link`` out
    (links built from ``base``: GitLab's external URL)."""

    def __init__(self, base: str, path: str, query: Mapping[str, str]) -> None:
        self.base = base
        self.path = path
        self.query = dict(query)

    def query_list(self, name: str) -> list[str]:
        value = self.query.get(name)
        return [value] if value else []

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


def _mr_json(project: Project, mr: MergeRequest, base: str) -> JSONValue:
    return {
        "id": mr.id,
        "iid": mr.iid,
        "project_id": project.id,
        "title": mr.title,
        "state": mr.state,
        "source_branch": mr.source_branch,
        "target_branch": mr.target_branch,
        "source_project_id": mr.source_project_id or project.id,
        "target_project_id": project.id,
        "labels": list(mr.labels),
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


def _commit_note_json(project: Project, discussion: Discussion, note: Note, base: str) -> JSONValue:
    return {
        "id": note.id,
        "type": "DiscussionNote",
        "body": note.body,
        "attachment": None,
        "author": _user_json(note.author, base),
        "created_at": _timestamp(note.created),
        "updated_at": _timestamp(note.updated),
        "system": note.system,
        "noteable_id": None,
        "noteable_type": "Commit",
        "commit_id": discussion.sha,
        "project_id": project.id,
        "resolvable": False,
        "confidential": False,
        "internal": False,
    }


def _discussion_json(project: Project, discussion: Discussion, base: str) -> JSONValue:
    return {
        "id": discussion.id,
        "individual_note": False,
        "notes": [_commit_note_json(project, discussion, n, base) for n in discussion.notes],
    }


def _pipeline_json(project: Project, pipeline: Pipeline, base: str) -> JSONValue:
    return {
        "id": pipeline.id,
        "iid": pipeline.id,
        "project_id": project.id,
        "sha": pipeline.sha,
        "ref": pipeline.ref,
        "status": pipeline.status,
        "source": pipeline.source,
        "web_url": f"{base}/{project.path}/-/pipelines/{pipeline.id}",
    }


def _job_json(project: Project, pipeline: Pipeline, job: Job, base: str) -> JSONValue:
    return {
        "id": job.id,
        "name": job.name,
        "status": job.status,
        "ref": pipeline.ref,
        "pipeline": _pipeline_json(project, pipeline, base),
        "artifacts": [
            {
                "file_type": "archive",
                "size": sum(len(v) for v in job.artifacts.values()),
                "filename": "artifacts.zip",
                "file_format": "zip",
            }
        ]
        if job.artifacts
        else [],
        "web_url": f"{base}/{project.path}/-/jobs/{job.id}",
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
    """Make python-gitlab's own retry waits (``time.sleep`` in ``gitlab.utils``) instant and
    return the list they are recorded in: ci-runner turns them off, so it must stay empty."""
    recorded: list[float] = []
    fake_time = SimpleNamespace(sleep=recorded.append, time=time.time)
    monkeypatch.setattr(gitlab.utils, "time", fake_time)
    return recorded


def manual_session(clock: ManualClock, seconds: float = 20.0) -> BoundedSession:
    """ci-runner's GitLab session on a manual clock: its retry waits are recorded in
    ``clock.sleeps``, never slept."""
    return BoundedSession(Budget(clock, seconds))


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
        if response.status == DROP:
            self.close_connection = True
            return
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
