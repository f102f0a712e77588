"""The fake GitLab's routing: a path under ``/api/v4``, then who asks, then the route.

``GET /user`` and ``GET /projects/:id`` are here; everything under ``/projects/:id/`` belongs to
one area, a module with an ``AREA`` (:class:`~testing.fake_gitlab.area.ProjectArea`). A new
part of the API is one such module, listed in :data:`PROJECT_AREAS`.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import unquote

from testing.fake_gitlab import (
    artifacts,
    commits,
    merge_requests,
    ml_experiments,
    mr_discussions,
    pipelines,
    projects,
    users,
)
from testing.fake_gitlab.area import Call, ProjectArea
from testing.fake_gitlab.auth import private_token
from testing.fake_gitlab.paging import Pager
from testing.fake_gitlab.responses import Response, no_such_route
from testing.fake_gitlab.state import GitLabState

API_PREFIX = "/api/v4"
PROJECT_AREAS: tuple[ProjectArea, ...] = (
    mr_discussions.AREA,  # before merge_requests: its paths are under theirs
    merge_requests.AREA,
    commits.AREA,
    pipelines.AREA,
    artifacts.AREA,
    ml_experiments.AREA,
)


def route(
    state: GitLabState,
    method: str,
    path: str,
    query: Mapping[str, str],
    headers: Mapping[str, str],
    body: bytes,
    base: str,
) -> Response:
    """The answer to ``method`` on the wire ``path``; ``base`` is GitLab's external URL.
    Errors are raised as :class:`~testing.fake_gitlab.responses.Reply`."""
    if not path.startswith(API_PREFIX + "/"):
        raise no_such_route()
    seg = [unquote(s) for s in path[len(API_PREFIX) + 1 :].split("/")]
    in_project = len(seg) >= 2 and seg[0] == "projects"
    rest = seg[2:] if in_project else []
    if rest[:2] == [
        "packages",
        "pypi",
    ]:  # its own authentication rules (testing/fake_gitlab/pypi.py)
        status, kind, payload, extra = state.pypi.handle(
            method, seg[1], rest[2:], headers, body, base
        )
        return Response(status, payload, kind, extra)
    area = next((a for a in PROJECT_AREAS if a.matches(rest)), None) if rest else None
    authenticate = area.authenticate if area is not None else private_token
    user = authenticate(state, method, headers)
    call = Call(state, method, query, body, user, base, Pager(base, path, query))

    if seg == ["user"]:
        return users.serve(call)
    if not in_project:
        raise no_such_route()
    project = projects.find(state, seg[1], user)
    if not rest:
        return projects.serve(call, project)
    if area is None:
        raise no_such_route()
    return area.serve(call, project, rest)
