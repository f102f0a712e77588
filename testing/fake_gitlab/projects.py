"""``GET /projects/:id`` (by id or URL-encoded path), forks included."""

from __future__ import annotations

from testing.fake_gitlab.area import Call
from testing.fake_gitlab.model import Project, User
from testing.fake_gitlab.responses import JSONValue, Reply, Response, json_response, only
from testing.fake_gitlab.state import GitLabState


def find(state: GitLabState, ref: str, user: User | None = None) -> Project:
    """The project whose id or path is ``ref``, else GitLab's 404; a private project ``user``
    is no member of is the same 404, never a 403 (``find_project!`` in lib/api/helpers.rb:
    ``can?(current_user, :read_project, project)`` or ``not_found!('Project')``)."""
    try:
        project = state.project(ref)
    except KeyError:
        raise Reply(404, {"message": "404 Project Not Found"}) from None
    readers = project.members | project.maintainers
    if user is not None and project.private and user.id not in readers:
        raise Reply(404, {"message": "404 Project Not Found"})
    return project


def serve(call: Call, project: Project) -> Response:
    return only(
        call.method, "GET", lambda: json_response(200, project_json(call.state, project, call.base))
    )


def project_json(state: GitLabState, project: Project, base: str) -> JSONValue:
    data: dict[str, JSONValue] = {
        "id": project.id,
        "name": project.path.rsplit("/", 1)[-1],
        "path_with_namespace": project.path,
        "default_branch": project.default_branch,
        "web_url": f"{base}/{project.path}",
    }
    if project.forked_from is not None:
        parent = find(state, str(project.forked_from))
        data["forked_from_project"] = {
            "id": parent.id,
            "path_with_namespace": parent.path,
            "web_url": f"{base}/{parent.path}",
        }
    return data
