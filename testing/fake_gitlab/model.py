"""What the fake GitLab holds: users and their tokens, projects with their merge requests, notes,
commit comments and discussions, pipelines with their jobs and artifacts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class User:
    id: int
    username: str


@dataclass(frozen=True)
class Token:
    value: str
    user: User
    scopes: frozenset[str]


@dataclass
class Note:
    id: int
    body: str
    author: User
    created: int  # seconds after the fake's epoch; also the creation order
    updated: int
    system: bool = False
    discussion_id: str = ""  # the thread it is in (an individual note has one of its own)
    type: str | None = None  # None: an individual note; "DiscussionNote": a thread's note


@dataclass(frozen=True)
class NoteEvent:
    """A note GitLab created or edited. A created note notifies the noteable's participants
    (Notes::CreateService runs NewNoteWorker, which calls NotificationService#new_note:
    app/services/notes/create_service.rb, app/workers/new_note_worker.rb); an edit notifies
    nobody (app/services/notes/update_service.rb)."""

    action: str  # "created" | "updated"
    noteable: str  # "!<iid>" for a merge request, the SHA for a commit
    note_id: int

    @property
    def notifies(self) -> bool:
        return self.action == "created"


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
    private: bool = False  # visible only to its members (and maintainers)
    members: set[int] = field(default_factory=set)  # user ids with at least Guest


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # as sent on the wire (percent-encoded), without the query
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    status: int  # 0: the connection was dropped without an answer

    def json(self) -> Any:
        return json.loads(self.body)


def latest_successful(project: Project, ref: str) -> Pipeline | None:
    """``Ci::Pipeline.latest_successful_for_ref``: the newest successful pipeline of ``ref``."""
    green = [p for p in project.pipelines if p.ref == ref and p.status == "success"]
    return max(green, key=lambda p: p.id) if green else None
