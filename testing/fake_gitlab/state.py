"""The fake GitLab's state and how tests fill it: users, tokens, projects, merge requests, notes,
pipelines and artifacts; ids and the clock as GitLab hands them out."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence

from testing.fake_gitlab.mlflow import FakeMlflow
from testing.fake_gitlab.model import (
    Job,
    MergeRequest,
    Note,
    NoteEvent,
    Pipeline,
    Project,
    Token,
    User,
    latest_successful,
)
from testing.fake_gitlab.pypi import PyPIRegistry


class GitLabState:
    """Everything the fake GitLab holds; every change under ``_lock``."""

    # Model experiments and the model registry (FakeGitLab makes it: its links need GitLab's URL).
    mlflow: FakeMlflow

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._users: list[User] = []
        self._tokens: dict[str, Token] = {}
        self.pypi = PyPIRegistry(self)  # the PyPI package registry, with its own tokens
        self._projects: list[Project] = []
        self._ids = 0
        self._clock = 0
        # Notes each user may still create (testing/fake_gitlab/notes.py); None: no limit.
        self.notes_create_limit: int | None = None
        self.notes_created: dict[int, int] = {}
        # Every note created or edited through the API, in order (model.NoteEvent).
        self.note_events: list[NoteEvent] = []

    def next_id(self, wanted: int | None = None) -> int:
        """A new id (ids of all kinds come from one sequence), or ``wanted``."""
        if wanted is not None:
            self._ids = max(self._ids, wanted)
            return wanted
        self._ids += 1
        return self._ids

    def tick(self) -> int:
        """The fake's clock, one second later."""
        self._clock += 1
        return self._clock

    def add_user(self, username: str, *, user_id: int | None = None) -> User:
        with self._lock:
            user = User(self.next_id(user_id), username)
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

    def token(self, value: str) -> Token | None:
        """The token whose value is ``value``, if it is valid."""
        with self._lock:
            return self._tokens.get(value)

    def add_project(
        self,
        path: str,
        *,
        default_branch: str = "main",
        project_id: int | None = None,
        forked_from: Project | None = None,
    ) -> Project:
        with self._lock:
            project = Project(self.next_id(project_id), path, default_branch)
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
                self.next_id(),
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
        """An individual note stored as given (as if written before the test started)."""
        with self._lock:
            tick = self.tick()
            note = Note(self.next_id(), body, author, tick, tick, system)
            note.discussion_id = discussion_id("merge_request", mr.id, note.id)
            mr.notes.append(note)
            return note

    def record_note(self, action: str, noteable: str, note: Note) -> None:
        """The API created (``created``) or edited (``updated``) ``note``."""
        with self._lock:
            self.note_events.append(NoteEvent(action, noteable, note.id))

    def notifications(self) -> list[NoteEvent]:
        """The API's notes that notified participants: the created ones, in order."""
        with self._lock:
            return [event for event in self.note_events if event.notifies]

    def job_exists(self, job_id: str) -> bool:
        """``Ci::Build.find_by_id``: a job of any project."""
        with self._lock:
            jobs = (j for p in self._projects for pipeline in p.pipelines for j in pipeline.jobs)
            return any(str(job.id) == job_id for job in jobs)

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
            pipeline = Pipeline(self.next_id(), ref, sha or "0" * 40, status, source)
            for name, files in (jobs or {}).items():
                pipeline.jobs.append(Job(self.next_id(), name, job_status, dict(files)))
            project.pipelines.append(pipeline)
            return pipeline

    def set_artifact(self, project: Project, ref: str, job: str, path: str, data: bytes) -> None:
        """``path`` of ``job``'s artifacts in the latest successful pipeline of ``ref`` (made
        when there is none)."""
        with self._lock:
            pipeline = latest_successful(project, ref)
            if pipeline is None:
                pipeline = self.add_pipeline(project, ref)
            found = next((j for j in pipeline.jobs if j.name == job), None)
            if found is None:
                found = Job(self.next_id(), job, "success")
                pipeline.jobs.append(found)
            found.artifacts[path] = data

    def notes(self, project: Project, iid: int) -> list[Note]:
        """The notes of merge request ``iid`` as GitLab stores them, oldest first."""
        with self._lock:
            return list(project.merge_requests[iid].notes)


def discussion_id(noteable_type: str, noteable_id: int | str, unique: int | str) -> str:
    """A thread's id as GitLab makes it: the SHA-1 of ``discussion-<noteable type>-<noteable id>``
    and, for a new thread, a random part (app/models/discussion.rb ``build_discussion_id``,
    individual_note_discussion.rb / discussion_note.rb); here ``unique`` (the first note's
    id) instead of the random part, so ids repeat from run to run."""
    text = f"discussion-{noteable_type}-{noteable_id}-{unique}"
    return hashlib.sha1(text.encode()).hexdigest()
