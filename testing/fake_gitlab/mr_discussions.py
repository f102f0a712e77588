"""``/projects/:id/merge_requests/:iid/discussions``: a merge request's threads, as
lib/api/discussions.rb serves them for noteable type MergeRequest: list, get one, start one,
reply to one, edit a note in one.

Rules, from GitLab's source (gitlabhq/gitlabhq; files as cited):

- Every note is in a thread: a note made with ``POST .../notes`` is an *individual* note, a
  thread of its own (type ``null``, ``individual_note: true``); one made with ``POST
  .../discussions`` starts a thread of ``DiscussionNote`` notes (discussions.rb, ``type =
  'DiscussionNote'``). Thread ids: app/models/discussion.rb ``discussion_id``.
- The list holds one entry per thread, ordered by its first note's creation
  (app/models/concerns/noteable.rb ``discussion_ids_relation``: ``MIN(created_at), MIN(id)``),
  each with all its notes; it is paginated.
- A reply (``POST .../discussions/:discussion_id/notes``) to a thread with no notes is 404
  "Discussion Not Found"; a merge request's individual note may be replied to
  (noteable.rb ``replyable_types``: Issue and MergeRequest), and its first reply turns it into a
  thread: the note becomes a ``DiscussionNote`` and keeps its thread id
  (IndividualNoteDiscussion#convert_to_discussion!, Notes::CreateService ``when_saved``,
  Notes::BuildService ``reply_attributes``). The reply is a new note: it notifies
  (testing/fake_gitlab/model.py ``NoteEvent``); quick actions in it run as in any note.
- Editing a thread's note is the note edit of lib/api/helpers/notes_helpers.rb ``update_note``.
- A merge request's thread is resolvable and starts unresolved (resolvable_note.rb,
  resolvable_discussion.rb): it counts against "all threads must be resolved"
  (merge_requests.py ``note_json``). Resolving is not served here.
"""

from __future__ import annotations

from testing.fake_gitlab.area import Call, ProjectArea
from testing.fake_gitlab.merge_requests import (
    execute_quick_actions,
    find_mr,
    note_json,
    update_note,
)
from testing.fake_gitlab.model import MergeRequest, Note, Project
from testing.fake_gitlab.notes import commands_json, find_note, note_text
from testing.fake_gitlab.responses import JSONValue, Reply, Response, json_response, only
from testing.fake_gitlab.state import discussion_id

DISCUSSION_NOTE = "DiscussionNote"


def _serve(call: Call, project: Project, rest: list[str]) -> Response:
    method = call.method
    mr = find_mr(project, rest[1])
    after = rest[3:]
    if not after:
        if method == "GET":
            return call.page.respond(
                [_thread_json(project, mr, notes, call.base) for notes in threads(mr)]
            )
        return only(method, "POST", lambda: _start(call, project, mr))
    notes = [n for n in mr.notes if n.discussion_id == after[0]]
    if not notes:
        raise Reply(404, {"message": "404 Discussion Not Found"})
    if len(after) == 1:
        return only(
            method, "GET", lambda: json_response(200, _thread_json(project, mr, notes, call.base))
        )
    if after[1] == "notes" and len(after) == 2:
        return only(method, "POST", lambda: _reply(call, project, mr, notes))
    if after[1] == "notes" and len(after) == 3:
        note = find_note(notes, after[2])
        if method == "GET":
            return json_response(200, note_json(project, mr, note, call.base))
        return only(method, "PUT", lambda: update_note(call, project, mr, note))
    raise Reply(404, {"error": "404 Not Found"})


AREA = ProjectArea(
    matches=lambda rest: (
        rest[0] == "merge_requests" and len(rest) >= 3 and rest[2] == "discussions"
    ),
    serve=_serve,
)


def threads(mr: MergeRequest) -> list[list[Note]]:
    """The merge request's threads, each its notes oldest first, ordered by their first note."""
    grouped: dict[str, list[Note]] = {}
    for note in sorted(mr.notes, key=lambda n: (n.created, n.id)):
        grouped.setdefault(note.discussion_id, []).append(note)
    return sorted(grouped.values(), key=lambda notes: (notes[0].created, notes[0].id))


def _start(call: Call, project: Project, mr: MergeRequest) -> Response:
    text = note_text(call.body, "body", "Note")
    content, commands = execute_quick_actions(text, mr)
    if not content and commands:
        return json_response(202, commands_json(commands))
    note = _new_note(call, mr, content)
    note.discussion_id = discussion_id("merge_request", mr.id, note.id)
    call.state.record_note("created", f"!{mr.iid}", note)
    return json_response(201, _thread_json(project, mr, [note], call.base))


def _reply(call: Call, project: Project, mr: MergeRequest, notes: list[Note]) -> Response:
    text = note_text(call.body, "body", "Note")
    content, commands = execute_quick_actions(text, mr)
    if not content and commands:
        return json_response(202, commands_json(commands))
    first = notes[0]
    if first.type is None:  # an individual note becomes a thread, keeping its id
        first.type = DISCUSSION_NOTE
    note = _new_note(call, mr, content)
    note.discussion_id = first.discussion_id
    call.state.record_note("created", f"!{mr.iid}", note)
    return json_response(201, note_json(project, mr, note, call.base))


def _new_note(call: Call, mr: MergeRequest, content: str) -> Note:
    tick = call.state.tick()
    note = Note(call.state.next_id(), content, call.user, tick, tick, type=DISCUSSION_NOTE)
    mr.notes.append(note)
    return note


def _thread_json(project: Project, mr: MergeRequest, notes: list[Note], base: str) -> JSONValue:
    """Entities::Discussion (lib/api/entities/discussion.rb)."""
    return {
        "id": notes[0].discussion_id,
        "individual_note": notes[0].type is None,
        "notes": [note_json(project, mr, n, base) for n in notes],
    }
