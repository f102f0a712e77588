"""What every kind of note shares (merge-request notes, commit comments, commit discussions): its
text, its limit, who may edit it, and the answer to a note of commands only.

Rules, from GitLab's source (gitlabhq/gitlabhq; files as cited):

- A note's body is stored after quick-action extraction: commands are executed and removed, ``\\r``
  deleted, trailing whitespace stripped (app/services/notes/create_service.rb:39-46,
  update_service.rb:19-30; lib/gitlab/quick_actions/extractor.rb:57-70, ported in
  testing/fake_gitlab/quick_actions.py). Merge requests, issues and commits get this
  (app/services/notes/quick_actions_service.rb:16). A note of commands only is not saved and the
  API answers 202 with the commands' changes (lib/api/helpers/notes_helpers.rb,
  ``process_note_creation_result``); on edit such a note is deleted (update_service.rb:51-52).
- Editing or deleting a note needs ``admin_note``: its author, or a maintainer of the project
  (notes_helpers.rb:39-42; app/policies/note_policy.rb:6 delegates to the project, whose
  policy gives maintainers ``admin_note``; note_policy.rb:52-56 gives it to the author).
- Notes over 1,000,000 characters get GitLab's 400 (the Note model's validation), worded per
  endpoint: an edit answers "400 Bad request - Failed to save note {errors}"
  (lib/api/helpers/notes_helpers.rb, ``update_note``).
- Creating notes is rate limited per user (``check_rate_limit! :notes_create``, lib/api/notes.rb;
  the ``notes_create_limit`` application setting, 300 a minute by default, in
  lib/gitlab/application_rate_limiter.rb): over it, 429 with ``{"message": {"error": "This
  endpoint has been requested too many times. Try again later."}}`` and no ``Retry-After``
  (lib/api/helpers/rate_limiter.rb renders it with ``render_api_error!``). The fake's window is
  the whole test: :attr:`GitLabState.notes_create_limit` creates per user.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from testing.fake_gitlab.model import Note, Project, User
from testing.fake_gitlab.responses import JSONValue, Reply

if TYPE_CHECKING:
    from testing.fake_gitlab.state import GitLabState

NOTE_LIMIT = 1_000_000  # characters, GitLab's Note validation
_TOO_LONG = '{:note=>["is too long (maximum is 1000000 characters)"]}'


def note_text(body: bytes, name: str, refusal: str) -> str:
    """The note's text from the request, refused as GitLab's Note validation refuses a text over
    NOTE_LIMIT; ``refusal`` starts that endpoint's message ("Note" or "Failed to save note": GitLab
    words it per endpoint)."""
    text = _required(body, name)
    if len(text) > NOTE_LIMIT:
        raise Reply(400, {"message": f"400 Bad request - {refusal} {_TOO_LONG}"})
    return text


def _required(body: bytes, name: str) -> str:
    try:
        data = json.loads(body) if body else {}
    except ValueError:
        data = dict(parse_qsl(body.decode(errors="replace")))
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value:
        raise Reply(400, {"error": f"{name} is missing"})
    return value


def may_edit(project: Project, note: Note, user: User) -> None:
    """GitLab's 403 unless ``user`` has ``admin_note`` on ``note``."""
    if note.author != user and user.id not in project.maintainers:
        raise Reply(403, {"message": "403 Forbidden"})


def find_note(notes: Sequence[Note], note_id: str) -> Note:
    for note in notes:
        if str(note.id) == note_id:
            return note
    raise Reply(404, {"message": "404 Note Not Found"})


def commands_json(commands: list[list[str]]) -> JSONValue:
    """Entities::NoteCommands: what a note of commands only answers (202)."""
    return {
        "commands_changes": {c[0]: (c[1] if len(c) > 1 else True) for c in commands},
        "summary": [" ".join(c) for c in commands],
    }


THROTTLED: JSONValue = {
    "message": {"error": "This endpoint has been requested too many times. Try again later."}
}


def count_create(state: GitLabState, user: User) -> None:
    """One more note created by ``user``; GitLab's 429 once over the limit."""
    limit = state.notes_create_limit
    if limit is None:
        return
    done = state.notes_created.get(user.id, 0)
    if done >= limit:
        raise Reply(429, THROTTLED)
    state.notes_created[user.id] = done + 1
