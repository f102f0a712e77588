"""``/projects/:id/merge_requests/:iid`` and its notes (list, create, get, update); its threads
are :mod:`testing.fake_gitlab.mr_discussions`.

A fork's merge request lives in the target project; its commits are readable there too
(:meth:`GitLabState.add_merge_request`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from testing.fake_gitlab.area import Call, ProjectArea
from testing.fake_gitlab.model import MergeRequest, Note, Project
from testing.fake_gitlab.notes import commands_json, count_create, find_note, may_edit, note_text
from testing.fake_gitlab.quick_actions import extract_commands
from testing.fake_gitlab.responses import (
    JSONValue,
    Reply,
    Response,
    json_response,
    no_such_route,
    only,
    timestamp,
)
from testing.fake_gitlab.users import user_json


def _serve(call: Call, project: Project, rest: list[str]) -> Response:
    method, base = call.method, call.base
    mr = find_mr(project, rest[1])
    if len(rest) == 2:
        return only(method, "GET", lambda: json_response(200, mr_json(project, mr, base)))
    if rest[2] == "notes" and len(rest) == 3:
        if method == "GET":
            return call.page.respond(
                [note_json(project, mr, n, base) for n in _sorted_notes(mr.notes, call.query)]
            )
        return only(method, "POST", lambda: _create_note(call, project, mr))
    if rest[2] == "notes" and len(rest) == 4:
        note = find_note(mr.notes, rest[3])
        if method == "GET":
            return json_response(200, note_json(project, mr, note, base))
        return only(method, "PUT", lambda: update_note(call, project, mr, note))
    raise no_such_route()


AREA = ProjectArea(
    matches=lambda rest: rest[0] == "merge_requests" and len(rest) >= 2, serve=_serve
)


def find_mr(project: Project, iid: str) -> MergeRequest:
    mr = project.merge_requests.get(int(iid)) if iid.isdigit() else None
    if mr is None:
        raise Reply(404, {"message": "404 Not found"})
    return mr


def _create_note(call: Call, project: Project, mr: MergeRequest) -> Response:
    count_create(call.state, call.user)
    text = note_text(call.body, "body", "Note")
    content, commands = execute_quick_actions(text, mr)
    if not content and commands:
        return json_response(202, commands_json(commands))
    note = call.state.add_note(mr, content, call.user)
    call.state.record_note("created", f"!{mr.iid}", note)
    return json_response(201, note_json(project, mr, note, call.base))


def update_note(call: Call, project: Project, mr: MergeRequest, note: Note) -> Response:
    """``PUT .../notes/:note_id`` (and the same through a thread, lib/api/discussions.rb)."""
    may_edit(project, note, call.user)
    text = note_text(call.body, "body", "Failed to save note")
    content, commands = execute_quick_actions(text, mr)
    if not content and commands:
        mr.notes.remove(note)
        return json_response(202, commands_json(commands))
    note.body = content
    note.updated = call.state.tick()
    call.state.record_note("updated", f"!{mr.iid}", note)
    return json_response(200, note_json(project, mr, note, call.base))


def execute_quick_actions(text: str, mr: MergeRequest) -> tuple[str, list[list[str]]]:
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


def _sorted_notes(notes: Sequence[Note], query: Mapping[str, str]) -> list[Note]:
    order_by = query.get("order_by", "created_at")
    if order_by not in ("created_at", "updated_at"):
        raise Reply(400, {"error": "order_by does not have a valid value"})
    sort = query.get("sort", "desc")
    if sort not in ("asc", "desc"):
        raise Reply(400, {"error": "sort does not have a valid value"})
    key = (
        (lambda n: (n.created, n.id)) if order_by == "created_at" else (lambda n: (n.updated, n.id))
    )
    return sorted(notes, key=key, reverse=sort == "desc")


def mr_json(project: Project, mr: MergeRequest, base: str) -> JSONValue:
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


def note_json(project: Project, mr: MergeRequest, note: Note, base: str) -> JSONValue:
    """Entities::Note (lib/api/entities/note.rb). A thread's note of a merge request is
    resolvable, and unresolved until someone resolves it (ResolvableNote: ``DiscussionNote`` on
    a noteable of ``Noteable.resolvable_types``, app/models/concerns/resolvable_note.rb,
    noteable.rb); this fake has no resolving, so it is always unresolved."""
    resolvable = note.type is not None and not note.system
    extra: JSONValue = (
        {"resolved": False, "resolved_by": None, "resolved_at": None} if resolvable else {}
    )
    return {
        "id": note.id,
        "type": note.type,
        "body": note.body,
        "attachment": None,
        "author": user_json(note.author, base),
        "created_at": timestamp(note.created),
        "updated_at": timestamp(note.updated),
        "system": note.system,
        "noteable_id": mr.id,
        "noteable_type": "MergeRequest",
        "noteable_iid": mr.iid,
        "project_id": project.id,
        "resolvable": resolvable,
        **extra,
        "confidential": False,
        "internal": False,
    }
