"""``/projects/:id/repository/commits/:sha/discussions``: lib/api/discussions.rb for noteable
type Commit: list, create, get one, reply to one, edit a note.

A thread made here is of ``DiscussionNote`` notes, so it may be replied to (discussions.rb:
``first_note.part_of_discussion?``); a commit's individual notes (the commit comments API)
could not be (Commit is not in noteable.rb's ``replyable_types``: "400 Discussion can not be
replied to."), and are not threads here. A reply is a new note (it notifies: model.NoteEvent),
its quick actions run as in any note.
"""

from __future__ import annotations

from testing.fake_gitlab.area import Call
from testing.fake_gitlab.model import Discussion, Note, Project
from testing.fake_gitlab.notes import commands_json, find_note, may_edit, note_text
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
from testing.fake_gitlab.state import discussion_id
from testing.fake_gitlab.users import user_json


def serve(call: Call, project: Project, sha: str, rest: list[str]) -> Response:
    """The commit ``sha``'s discussions; ``rest``: the segments after ``discussions``."""
    method, base = call.method, call.base
    threads = [d for d in project.discussions if d.sha == sha]
    if not rest:
        if method == "GET":
            return call.page.respond([_discussion_json(project, d, base) for d in threads])
        return only(method, "POST", lambda: _create(call, project, sha))
    discussion = next((d for d in threads if d.id == rest[0]), None)
    if discussion is None:
        raise Reply(404, {"message": "404 Discussion Not Found"})
    if len(rest) == 1:
        return only(
            method, "GET", lambda: json_response(200, _discussion_json(project, discussion, base))
        )
    if rest[1] == "notes" and len(rest) == 2:
        return only(method, "POST", lambda: _reply(call, project, discussion))
    if rest[1] == "notes" and len(rest) == 3:
        note = find_note(discussion.notes, rest[2])
        return only(method, "PUT", lambda: _update_note(call, project, discussion, note))
    raise no_such_route()


def _new_note(call: Call, project: Project) -> Note | Response:
    """The note a POST makes, or GitLab's 202 for a body of quick actions alone."""
    content, commands = extract_commands(note_text(call.body, "body", "Note"))
    project.commit_commands.extend(commands)
    if not content and commands:
        return json_response(202, commands_json(commands))
    tick = call.state.tick()
    return Note(call.state.next_id(), content, call.user, tick, tick, type="DiscussionNote")


def _create(call: Call, project: Project, sha: str) -> Response:
    note = _new_note(call, project)
    if not isinstance(note, Note):
        return note
    note.discussion_id = discussion_id("commit", sha, note.id)
    discussion = Discussion(note.discussion_id, sha, [note])
    project.discussions.append(discussion)
    call.state.record_note("created", sha, note)
    return json_response(201, _discussion_json(project, discussion, call.base))


def _reply(call: Call, project: Project, discussion: Discussion) -> Response:
    note = _new_note(call, project)
    if not isinstance(note, Note):
        return note
    note.discussion_id = discussion.id
    discussion.notes.append(note)
    call.state.record_note("created", discussion.sha, note)
    return json_response(201, _commit_note_json(project, discussion, note, call.base))


def _update_note(call: Call, project: Project, discussion: Discussion, note: Note) -> Response:
    may_edit(project, note, call.user)
    text = note_text(call.body, "body", "Failed to save note")
    content, commands = extract_commands(text)
    project.commit_commands.extend(commands)
    if not content and commands:
        discussion.notes.remove(note)
        return json_response(202, commands_json(commands))
    note.body = content
    note.updated = call.state.tick()
    call.state.record_note("updated", discussion.sha, note)
    return json_response(200, _commit_note_json(project, discussion, note, call.base))


def _discussion_json(project: Project, discussion: Discussion, base: str) -> JSONValue:
    return {
        "id": discussion.id,
        "individual_note": False,
        "notes": [_commit_note_json(project, discussion, n, base) for n in discussion.notes],
    }


def _commit_note_json(project: Project, discussion: Discussion, note: Note, base: str) -> JSONValue:
    return {
        "id": note.id,
        "type": "DiscussionNote",
        "body": note.body,
        "attachment": None,
        "author": user_json(note.author, base),
        "created_at": timestamp(note.created),
        "updated_at": timestamp(note.updated),
        "system": note.system,
        "noteable_id": None,
        "noteable_type": "Commit",
        "commit_id": discussion.sha,
        "project_id": project.id,
        "resolvable": False,
        "confidential": False,
        "internal": False,
    }
