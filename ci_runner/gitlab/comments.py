"""Posting the report: which merge requests (or the commit) get it, and keeping ONE note per
merge request (or commit) and train config up to date across runs.

Targets: an MR pipeline posts to its MR (in the MR's project, which for a fork's MR is not the
pipeline's); a branch or manual pipeline to every open MR whose head is this commit; with none,
to the commit, as a commit *discussion* (commit comments cannot be edited; discussion notes can).
The note is found again by the hidden marker on its first line among our own notes and edited in
place, so a re-run never adds a second one. A create that timed out or got a 5xx may have been
executed by GitLab: before creating again, the marker is looked for, so an answer lost on the way
never makes two.
Every body goes out through :func:`ci_runner.gitlab.notes.note_body` (no line a quick action,
in the form GitLab stores, so an unchanged report is recognised and not sent again).

GitLab notifies a merge request's participants of a created note, never of an edited one
(Notes::CreateService runs NewNoteWorker, which calls NotificationService#new_note;
Notes::UpdateService notifies nobody: app/services/notes/, app/workers/new_note_worker.rb). So
at the end of a run :func:`reply_once` posts a short note with the result: on a merge request a
note of its own after the report (a reply would make the report a resolvable thread), on a
commit a reply in the report's thread (POST .../discussions/:discussion_id/notes,
lib/api/discussions.rb). Its first line is a hidden marker naming the CI job; found among our
notes newer than the report (or in its thread), it is not posted again (``cancel`` after
``train``, an after_script run twice).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import gitlab
import requests
from gitlab.v4.objects import Project, ProjectCommit, ProjectMergeRequest

from ci_runner.context import CIContext
from ci_runner.errors import GitLabError, GitLabTimeout
from ci_runner.gitlab.client import current_user_id, gitlab_errors
from ci_runner.gitlab.notes import note_body
from ci_runner.gitlab.transport import not_sent

NOTE_LIMIT: Final = 1_000_000  # characters GitLab accepts in one note (more is answered with 400)
PER_PAGE: Final = 100  # GitLab's maximum page size
CREATE_ATTEMPTS: Final = 3  # creates of one note whose answer was lost, each after looking for it


@dataclass(frozen=True)
class MergeRequestTarget:
    iid: int
    target_branch: str | None = None  # the MR's target branch: where its baseline comes from

    def describe(self, project: Project) -> str:
        return f"merge request !{self.iid} of {project.path_with_namespace}"


@dataclass(frozen=True)
class CommitTarget:
    sha: str

    def describe(self, project: Project) -> str:
        return f"commit {self.sha[:8]} of {project.path_with_namespace}"


Target = MergeRequestTarget | CommitTarget


class Action(enum.Enum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"  # the same body was already there; nothing sent


@dataclass(frozen=True)
class PostedComment:
    """What :func:`publish` did for one target."""

    target: Target
    action: Action
    note_id: int
    url: str  # the note on its MR or commit page


@dataclass(frozen=True)
class _Found:
    """One of our notes holding the marker: its id, body and how to edit it."""

    note_id: int
    body: str
    save: Callable[[str], None]


def find_targets(project: Project, ctx: CIContext) -> list[Target]:
    """Where the report goes: the pipeline's MR; else every open MR whose head is ``ctx.sha``
    or that ``CI_OPEN_MERGE_REQUESTS`` names in this project; else the commit itself.
    ``project`` is the MR's project (:func:`report_project_id`)."""
    if ctx.mr_iid:
        return [MergeRequestTarget(int(ctx.mr_iid), ctx.mr_target_branch)]
    action = f"list the merge requests of commit {ctx.sha[:8]} in {project.path_with_namespace}"
    with gitlab_errors(action, project.manager.gitlab.url):
        related = project.commits.get(ctx.sha, lazy=True).merge_requests(get_all=True)
        open_heads = {
            int(mr["iid"]): mr.get("target_branch") or None
            for mr in related
            if mr.get("state") == "opened" and mr.get("sha") == ctx.sha
        }
    # GitLab fills a commit's MRs asynchronously after a push; CI_OPEN_MERGE_REQUESTS is
    # computed with the pipeline, from the branch (Ci::Variables::Builder, gitlabhq).
    for iid in named_merge_requests(ctx.open_merge_requests, project.path_with_namespace):
        if iid in open_heads:
            continue
        with gitlab_errors(
            f"read merge request !{iid} of {project.path_with_namespace}",
            project.manager.gitlab.url,
        ):
            mr = project.mergerequests.get(iid)
        if mr.state == "opened":
            open_heads[iid] = mr.target_branch or None
    if open_heads:
        return [MergeRequestTarget(iid, open_heads[iid]) for iid in sorted(open_heads)]
    return [CommitTarget(ctx.sha)]


def named_merge_requests(value: str | None, project_path: str) -> list[int]:
    """The iids ``CI_OPEN_MERGE_REQUESTS`` (``path!iid,...``) names in ``project_path``."""
    iids = []
    for item in (value or "").split(","):
        path, _, iid = item.strip().rpartition("!")
        if path == project_path and iid.isdigit():
            iids.append(int(iid))
    return iids


def merged_targets(before: Sequence[Target], after: Sequence[Target]) -> list[Target]:
    """The targets of the start and of the end, each once: the start's (their comment says
    "training started" and is edited), then those found since (an MR opened during training).
    A target found again keeps its place and takes its newest target branch."""
    found: dict[object, Target] = {}
    for target in [*before, *after]:
        found[_key(target)] = target
    return list(found.values())


def _key(target: Target) -> object:
    return ("mr", target.iid) if isinstance(target, MergeRequestTarget) else ("commit", target.sha)


def baseline_branch(target: Target | None, ctx: CIContext) -> str | None:
    """The branch whose metrics ``target``'s comment compares with: an MR's own target branch;
    for the commit, an MR whose target is unknown or no comment at all (None), the MR
    pipeline's target, else the project's default branch."""
    if isinstance(target, MergeRequestTarget) and target.target_branch:
        return target.target_branch
    return ctx.mr_target_branch or ctx.default_branch


def report_project_id(ctx: CIContext) -> str:
    """The project whose MR gets the report and whose target branch has the baseline: in a
    merge-request pipeline ``CI_MERGE_REQUEST_PROJECT_ID`` (a fork's MR pipeline runs in the
    fork, ``CI_PROJECT_ID``, but the MR lives in the project it targets)."""
    if ctx.mr_iid and ctx.mr_project_id:
        return ctx.mr_project_id
    return ctx.project_id or ctx.project_path


def publish(
    project: Project,
    targets: Sequence[Target],
    marker: str,
    render: Callable[[str | None], str],
) -> list[PostedComment]:
    """Post or update the report on every target and say what was done.

    On each target, the newest note of ours whose first line is ``marker`` is edited with
    ``render(its_body)``; without one, a note ``render(None)`` is created. The first failure
    raises :class:`GitLabError` (one line); a body over GitLab's note limit is refused before
    sending.
    """
    user_id = current_user_id(project.manager.gitlab)
    posted: list[PostedComment] = []
    for target in targets:
        if isinstance(target, MergeRequestTarget):
            mr = project.mergerequests.get(target.iid, lazy=True)
            page = f"{project.web_url}/-/merge_requests/{target.iid}"
            find = partial(_find_mr_note, mr, marker, user_id)
            create = partial(_create_mr_note, mr)
        else:
            commit = project.commits.get(target.sha, lazy=True)
            page = f"{project.web_url}/-/commit/{target.sha}"
            find = partial(_find_commit_note, commit, marker, user_id)
            create = partial(_create_commit_note, commit)
        posted.append(_publish(project, target, page, find, create, render))
    return posted


def _publish(
    project: Project,
    target: Target,
    page: str,
    find: Callable[[], _Found | None],
    create: Callable[[str], int],
    render: Callable[[str | None], str],
) -> PostedComment:
    where = target.describe(project)
    server = project.manager.gitlab.url
    with gitlab_errors(f"read the comments of {where}", server):
        existing = find()
    body = _checked(note_body(render(existing.body if existing else None)), where)
    if existing is None:
        note_id = _create_once(body, where, server, find, create)
        return PostedComment(target, Action.CREATED, note_id, f"{page}#note_{note_id}")
    url = f"{page}#note_{existing.note_id}"
    if existing.body == body:
        return PostedComment(target, Action.UNCHANGED, existing.note_id, url)
    with gitlab_errors(f"update the report comment (note {existing.note_id}) on {where}", server):
        existing.save(body)
    return PostedComment(target, Action.UPDATED, existing.note_id, url)


def _create_once(
    body: str,
    where: str,
    server: str,
    find: Callable[[], _Found | None],
    create: Callable[[str], int],
    what: str = "the report",
) -> int:
    """Create the note; when the answer is lost (timeout, dropped connection, 5xx), GitLab may
    have created it anyway: look for it before creating again."""
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            with gitlab_errors(f"post {what} to {where}", server):
                return create(body)
        except GitLabTimeout:
            raise
        except GitLabError as error:
            if attempt == CREATE_ATTEMPTS or not _maybe_executed(error.__cause__):
                raise
        with gitlab_errors(f"read the comments of {where}", server):
            found = find()
        if found is not None:
            if found.body != body:
                with gitlab_errors(f"update the report comment on {where}", server):
                    found.save(body)
            return found.note_id
    raise AssertionError("unreachable")  # pragma: no cover


def reply_once(
    project: Project, comment: PostedComment, reply_tag: str, body: str
) -> PostedComment | None:
    """Post ``body``, the result of this CI job, as a new note beside the report note
    ``comment``, unless a note of ours whose first line is ``reply_tag`` is there already (then
    it is returned, UNCHANGED). None when the report note is gone (deleted meanwhile).

    On a merge request it is a note of its own, newer than the report: a reply would turn the
    report into a thread, and every thread of a merge request is resolvable and unresolved
    (app/models/concerns/resolvable_note.rb, resolvable_discussion.rb), which blocks the merge
    where all threads must be resolved. It is looked for among the notes newer than the report
    note, newest first. On a commit (whose threads are never resolvable: commit_discussion.rb)
    it is a reply in the report's thread, found by listing the threads oldest first up to it
    (GitLab's note entity does not say its thread: lib/api/entities/note.rb). Every request is
    within the phase's time budget, like the report's own.
    """
    target = comment.target
    where = target.describe(project)
    server = project.manager.gitlab.url
    user_id = current_user_id(project.manager.gitlab)
    page = comment.url.partition("#")[0]
    find: Callable[[], _Found | None]
    create: Callable[[str], int]
    if isinstance(target, MergeRequestTarget):
        mr = project.mergerequests.get(target.iid, lazy=True)
        find = partial(_find_mr_note, mr, reply_tag, user_id, comment.note_id)
        create = partial(_create_mr_note, mr)
        with gitlab_errors(f"read the comments of {where}", server):
            found = find()
    else:
        commit = project.commits.get(target.sha, lazy=True)
        with gitlab_errors(f"read the threads of {where}", server):
            thread = _thread_of(commit, comment.note_id)
        if thread is None:
            return None
        discussion_id, notes = thread
        found = _ours(commit, discussion_id, notes, reply_tag, user_id)
        find = partial(_in_thread, commit, discussion_id, reply_tag, user_id)
        create = partial(_reply_in_thread, commit, discussion_id)
    if found is not None:
        url = f"{page}#note_{found.note_id}"
        return PostedComment(target, Action.UNCHANGED, found.note_id, url)
    text = _checked(note_body(body), where)
    note_id = _create_once(text, where, server, find, create, "the result")
    return PostedComment(target, Action.CREATED, note_id, f"{page}#note_{note_id}")


def _in_thread(commit: ProjectCommit, discussion_id: str, tag: str, user_id: int) -> _Found | None:
    notes = commit.discussions.get(discussion_id).attributes.get("notes", [])
    return _ours(commit, discussion_id, notes, tag, user_id)


def _reply_in_thread(commit: ProjectCommit, discussion_id: str, body: str) -> int:
    thread = commit.discussions.get(discussion_id, lazy=True)
    return int(thread.notes.create({"body": body}).id)


def _thread_of(noteable: ProjectCommit, note_id: int) -> tuple[str, list[dict[str, Any]]] | None:
    """The id and notes of the thread holding note ``note_id``, or None."""
    for discussion in noteable.discussions.list(iterator=True, per_page=PER_PAGE):
        notes = discussion.attributes.get("notes") or []
        if any(note.get("id") == note_id for note in notes):
            return str(discussion.id), list(notes)
    return None


def _ours(
    noteable: ProjectCommit,
    discussion_id: str,
    notes: Sequence[dict[str, Any]],
    tag: str,
    user_id: int,
) -> _Found | None:
    """Our first note in the thread marked with ``tag`` (a reviewer quoting it does not count)."""
    for note in notes:
        author = (note.get("author") or {}).get("id")
        text = note.get("body") or ""
        if not note.get("system") and author == user_id and _marked(text, tag):
            note_id = int(note["id"])
            return _Found(note_id, text, partial(_save_in_thread, noteable, discussion_id, note_id))
    return None


def _save_in_thread(noteable: ProjectCommit, discussion_id: str, note_id: int, body: str) -> None:
    thread = noteable.discussions.get(discussion_id, lazy=True)
    edited = thread.notes.get(note_id, lazy=True)
    edited.body = body
    edited.save()


def _marked(body: str, marker: str) -> bool:
    """Whether ``marker`` is the first line of ``body``: the one place of a note we post that
    only ci-runner writes. Below it the report quotes the training's log, which a branch
    controls and which may print any marker (forged, it would pick another config's note, or
    pass for a result already posted)."""
    return body.partition("\n")[0] == marker


def _maybe_executed(error: BaseException | None) -> bool:
    if isinstance(error, gitlab.GitlabError):
        return (error.response_code or 0) >= 500
    return isinstance(error, requests.RequestException) and not not_sent(error)


def _find_mr_note(
    mr: ProjectMergeRequest, marker: str, user_id: int, newer_than: int | None = None
) -> _Found | None:
    """Our newest MR note marked with ``marker``, page after page until found or exhausted
    (or, given ``newer_than``, until that note: only those newer than it count).

    Only our own notes count: a reviewer's reply quoting the report also contains the marker
    (and a maintainer's token could edit it, which would be wrong).
    """
    notes = mr.notes.list(iterator=True, order_by="created_at", sort="desc", per_page=PER_PAGE)
    for note in notes:
        if int(note.id) == newer_than:
            return None
        if note.system or note.author.get("id") != user_id or not _marked(note.body, marker):
            continue

        def save(body: str, note: Any = note) -> None:
            note.body = body
            note.save()

        return _Found(int(note.id), str(note.body), save)
    return None


def _create_mr_note(mr: ProjectMergeRequest, body: str) -> int:
    return int(mr.notes.create({"body": body}).id)


def _find_commit_note(commit: ProjectCommit, marker: str, user_id: int) -> _Found | None:
    """Our newest note marked with ``marker`` in the commit's discussions (all pages)."""
    best: tuple[int, str, str] | None = None  # note id, body, discussion id
    for discussion in commit.discussions.list(iterator=True, per_page=PER_PAGE):
        for note in discussion.attributes.get("notes", []):
            author = (note.get("author") or {}).get("id")
            body = note.get("body") or ""
            if note.get("system") or author != user_id or not _marked(body, marker):
                continue
            if best is None or int(note["id"]) > best[0]:
                best = (int(note["id"]), body, str(discussion.id))
    if best is None:
        return None
    note_id, body, discussion_id = best

    def save(new_body: str) -> None:
        thread = commit.discussions.get(discussion_id, lazy=True)
        note = thread.notes.get(note_id, lazy=True)
        note.body = new_body
        note.save()

    return _Found(note_id, body, save)


def _create_commit_note(commit: ProjectCommit, body: str) -> int:
    discussion = commit.discussions.create({"body": body})
    return int(discussion.attributes["notes"][0]["id"])


def _checked(body: str, where: str) -> str:
    if len(body) > NOTE_LIMIT:
        raise GitLabError(
            f"cannot post the report to {where}: it is {len(body):,} characters, over GitLab's "
            f"{NOTE_LIMIT:,}-character comment limit; fix: this is a ci-runner bug (the report "
            "must shorten itself), please report it with the job log"
        )
    return body
