"""The fake GitLab's PyPI package registry: what `twine upload` and `pip install` use.

Routes (gitlabhq lib/api/pypi_packages.rb, the ``projects`` resource):

- ``POST /projects/:id/packages/pypi``: upload one file (multipart: ``content``, ``name``,
  ``version``; ``requires_python``, ``sha256_digest`` optional); 201 ``{"message": "201 Created"}``.
  A missing required field is Grape's 400 ``{"error": "<field> is missing"}``. A file name already
  in that package version is 400 (app/models/packages/package_file.rb: ``file_name`` unique per
  package for PyPI; app/services/packages/pypi/create_package_service.rb answers its message).
- ``GET /projects/:id/packages/pypi/simple/:package_name``: the PEP 503 page, name matched after
  PEP 503 normalisation, as app/presenters/packages/pypi/simple_presenter_base.rb and
  simple_package_versions_presenter.rb write it (one ``<a href=".../files/<sha256>/<file>#sha256=
  <sha256>" data-requires-python="...">`` per file); no such package: 404 ``Package Not Found``
  (request forwarding to PyPI is off, as a group may set it).
- ``GET /projects/:id/packages/pypi/files/:sha256/*file_identifier``: the file's bytes.

Authentication (route_setting ``deploy_token_allowed: true, basic_auth_personal_access_token:
true, job_token_allowed: :basic_auth``; lib/gitlab/auth/auth_finders.rb):

- a job token only in HTTP Basic auth with the user ``gitlab-ci-token``
  (``find_user_from_job_token_basic_auth``); a ``JOB-TOKEN`` header is not read on these routes
  (``can_authenticate_job_token_request?`` is false for ``:basic_auth``); an unknown job token
  is 401. It reaches its own project's registry (job token scope);
- a deploy token as the Basic auth password, whatever the user name, or in a ``Deploy-Token``
  header (``deploy_token_from_request``); it reaches its own project, reading with
  ``read_package_registry`` and uploading with ``write_package_registry`` (else 403);
- a personal access token as the Basic auth password, user name ignored
  (``find_personal_access_token_from_http_basic_auth``), or ``PRIVATE-TOKEN``; scope ``api``
  (``read_api`` reads); its user must be a member of the project (here: a maintainer), else 404.
- Projects are private: no credentials is 401 with ``WWW-Authenticate: Basic realm="GitLab
  Packages Registry"`` (lib/api/helpers/packages/basic_auth_helpers.rb, ``unauthorized_or!``).
"""

from __future__ import annotations

import base64
import email.parser
import email.policy
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from testing.fake_gitlab.model import Project, User
    from testing.fake_gitlab.state import GitLabState

CI_JOB_USER = "gitlab-ci-token"  # lib/gitlab/auth.rb CI_JOB_USER
REALM = 'Basic realm="GitLab Packages Registry"'
TAKEN = "File name has already been taken"
SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")

# (status, content type, body, extra headers): server.py wraps it in its response type.
Answer = tuple[int, str, bytes, dict[str, str]]


@dataclass(frozen=True)
class DeployToken:
    value: str
    username: str
    project_id: int
    scopes: frozenset[str]


@dataclass(frozen=True)
class JobToken:
    value: str
    project_id: int
    user: User


@dataclass
class PackageFile:
    name: str  # the package name as uploaded
    version: str
    file_name: str
    data: bytes
    sha256: str
    requires_python: str


@dataclass
class _Caller:
    kind: str  # job | deploy | personal
    project_id: int | None = None
    scopes: frozenset[str] = field(default_factory=frozenset)
    user: User | None = None


class _Refused(Exception):
    def __init__(self, status: int, payload: Any, headers: Mapping[str, str] | None = None):
        super().__init__(status)
        self.answer: Answer = (
            status,
            "application/json",
            json.dumps(payload).encode(),
            dict(headers or {}),
        )


def normalize(name: str) -> str:
    """PEP 503's normalised name (GitLab's ``with_normalized_pypi_name``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class PyPIRegistry:
    """Packages per project, the tokens only these routes take, and the routes."""

    def __init__(self, fake: GitLabState) -> None:
        self._fake = fake
        self._deploy: dict[str, DeployToken] = {}
        self._jobs: dict[str, JobToken] = {}
        self._files: dict[int, list[PackageFile]] = {}

    def add_deploy_token(
        self, project: Project, value: str, username: str, scopes: Sequence[str]
    ) -> DeployToken:
        token = DeployToken(value, username, project.id, frozenset(scopes))
        self._deploy[value] = token
        return token

    def add_job_token(self, project: Project, value: str, user: User) -> JobToken:
        """The ``CI_JOB_TOKEN`` of a job running in ``project`` (valid while it runs)."""
        token = JobToken(value, project.id, user)
        self._jobs[value] = token
        return token

    def files(self, project: Project) -> list[PackageFile]:
        return list(self._files.get(project.id, []))

    # --- routes ----------------------------------------------------------------------------

    def handle(
        self,
        method: str,
        project_ref: str,
        rest: list[str],
        headers: Mapping[str, str],
        body: bytes,
        base: str,
    ) -> Answer:
        """``rest``: the path after ``projects/:id/packages/pypi``, decoded segments."""
        try:
            caller = self._caller(headers)
            project = self._project(project_ref, caller)
            if method == "POST" and not rest:
                self._may(caller, project, write=True)
                return self._upload(project, headers, body)
            if method == "GET" and len(rest) >= 2 and rest[0] == "simple":
                self._may(caller, project, write=False)
                # pip asks for simple/<name>/; Grape's routing ignores the trailing slash
                return self._simple(project, "/".join(rest[1:]).rstrip("/"), base)
            if method == "GET" and len(rest) >= 3 and rest[0] == "files":
                self._may(caller, project, write=False)
                return self._download(project, rest[1], "/".join(rest[2:]))
            raise _Refused(404, {"error": "404 Not Found"})
        except _Refused as refused:
            return refused.answer

    def _caller(self, headers: Mapping[str, str]) -> _Caller:
        basic = _basic_credentials(headers.get("authorization", ""))
        if basic is not None:
            login, password = basic
            if login == CI_JOB_USER:
                job = self._jobs.get(password)
                if job is None:
                    raise _Refused(401, {"message": "401 Unauthorized"})
                return _Caller("job", job.project_id, user=job.user)
            if password in self._deploy:
                deploy = self._deploy[password]
                return _Caller("deploy", deploy.project_id, deploy.scopes)
            return self._personal(password)
        if headers.get("deploy-token"):
            found = self._deploy.get(headers["deploy-token"])
            if found is None:
                raise _Refused(401, {"message": "401 Unauthorized"})
            return _Caller("deploy", found.project_id, found.scopes)
        if headers.get("private-token"):
            return self._personal(headers["private-token"])
        raise _Refused(401, {"message": "401 Unauthorized"}, {"WWW-Authenticate": REALM})

    def _personal(self, value: str) -> _Caller:
        token = self._fake.token(value)
        if token is None:
            raise _Refused(401, {"message": "401 Unauthorized"})
        return _Caller("personal", scopes=token.scopes, user=token.user)

    def _project(self, ref: str, caller: _Caller) -> Project:
        try:
            project = self._fake.project(ref)
        except KeyError:
            raise _Refused(404, {"message": "404 Project Not Found"}) from None
        if caller.kind == "personal":  # a member (the fake's members are its maintainers)
            reaches = caller.user is not None and caller.user.id in project.maintainers
        else:  # job and deploy tokens reach their own project
            reaches = caller.project_id == project.id
        if not reaches:
            raise _Refused(404, {"message": "404 Project Not Found"})
        return project

    @staticmethod
    def _may(caller: _Caller, project: Project, *, write: bool) -> None:
        if caller.kind == "deploy":
            needed = "write_package_registry" if write else "read_package_registry"
            if needed not in caller.scopes:
                raise _Refused(403, {"message": "403 Forbidden"})
        elif caller.kind == "personal":
            allowed = "api" in caller.scopes or (not write and "read_api" in caller.scopes)
            if not allowed:
                raise _Refused(
                    403,
                    {
                        "error": "insufficient_scope",
                        "error_description": "The request requires higher privileges than "
                        "provided by the access token.",
                        "scope": "api",
                    },
                )

    def _upload(self, project: Project, headers: Mapping[str, str], body: bytes) -> Answer:
        fields, files = _multipart(headers.get("content-type", ""), body)
        missing = [
            n
            for n in ("content", "name", "version")
            if n not in (files if n == "content" else fields)
        ]
        if missing:
            raise _Refused(400, {"error": ", ".join(f"{n} is missing" for n in missing)})
        digest = fields.get("sha256_digest", "")
        if digest and not SHA256.match(digest):
            raise _Refused(400, {"error": "sha256_digest is invalid"})
        file_name, data = files["content"]
        package = self._files.setdefault(project.id, [])
        same = [
            f
            for f in package
            if normalize(f.name) == normalize(fields["name"]) and f.version == fields["version"]
        ]
        if any(f.file_name == file_name for f in same):
            raise _Refused(
                400,
                {"message": f"400 Bad request - Validation failed: {TAKEN}"},
            )
        package.append(
            PackageFile(
                fields["name"],
                fields["version"],
                file_name,
                data,
                digest or hashlib.sha256(data).hexdigest(),
                fields.get("requires_python", ""),
            )
        )
        return 201, "application/json", json.dumps({"message": "201 Created"}).encode(), {}

    def _simple(self, project: Project, name: str, base: str) -> Answer:
        found = [f for f in self._files.get(project.id, []) if normalize(f.name) == normalize(name)]
        if not found:
            raise _Refused(404, {"message": "404 Package Not Found"})
        links = "".join(
            f'<a href="{base}/api/v4/projects/{project.id}/packages/pypi/files/{f.sha256}/'
            f'{quote(f.file_name)}#sha256={f.sha256}" '
            f'data-requires-python="{html.escape(f.requires_python)}">{f.file_name}</a>'
            for f in found
        )
        title = html.escape(found[0].name)
        page = (
            "        <!DOCTYPE html>\n        <html>\n          <head>\n"
            f"            <title>Links for {title}</title>\n          </head>\n          <body>\n"
            f"            <h1>Links for {title}</h1>\n            {links}\n"
            "          </body>\n        </html>\n"
        )
        return 200, "text/html; charset=utf-8", page.encode(), {}

    def _download(self, project: Project, sha256: str, file_name: str) -> Answer:
        for f in self._files.get(project.id, []):
            if f.sha256 == sha256 and f.file_name == file_name:
                return 200, "application/octet-stream", f.data, {}
        raise _Refused(404, {"message": "404 Package Not Found"})


def _basic_credentials(header: str) -> tuple[str, str] | None:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded:
        return None
    try:
        login, _, password = base64.b64decode(encoded).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return login, password


def _multipart(
    content_type: str, body: bytes
) -> tuple[dict[str, str], dict[str, tuple[str, bytes]]]:
    """The form fields and files of a multipart/form-data body (what twine sends)."""
    if not content_type.startswith("multipart/form-data"):
        return {}, {}
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields: dict[str, str] = {}
    files: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        filename = part.get_filename()
        if filename:
            files[name] = (filename, data)
        else:
            fields[name] = data.decode()
    return fields, files
