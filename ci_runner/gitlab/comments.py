"""Posting the report: which merge requests (or the commit) get it, and keeping ONE comment per
merge request and train config up to date across runs.

Targets: an MR pipeline posts to its MR; a branch or manual pipeline to every open MR whose head
is this commit; with none, to the commit. The comment is found again by a hidden marker, searched
through all pages of the MR's notes, and edited in place, so a re-run never adds a second one.

Commit comments cannot be edited through GitLab's commit comments API, so the commit fallback
gets only the final result: :func:`publish` with ``final=False`` (the "training started"
announcement) skips commit targets.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gitlab.v4.objects import Project, ProjectMergeRequest, ProjectMergeRequestNote

from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.gitlab.client import current_user_id, gitlab_errors

NOTE_LIMIT = 1_000_000  # characters GitLab accepts in one note (more is answered with 400)
NOTES_PER_PAGE = 100  # GitLab's maximum page size


@dataclass(frozen=True)
class MergeRequestTarget:
    iid: int

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
    SKIPPED = "skipped"  # a commit target during the announcement (commit comments are final)


@dataclass(frozen=True)
class PostedComment:
    """What :func:`publish` did for one target."""

    target: Target
    action: Action
    note_id: int | None  # None for commit comments (the API gives them no id) and skipped ones
    url: str  # the comment (MR) or the commit page


def find_targets(project: Project, ctx: CIContext) -> list[Target]:
    """Where the report goes: the pipeline's MR; else every open MR whose head is ``ctx.sha``;
    else the commit itself."""
    if ctx.mr_iid:
        return [MergeRequestTarget(int(ctx.mr_iid))]
    action = f"list the merge requests of commit {ctx.sha[:8]} in {project.path_with_namespace}"
    with gitlab_errors(action, project.manager.gitlab.url):
        related = project.commits.get(ctx.sha, lazy=True).merge_requests(get_all=True)
        open_heads = sorted(
            int(mr["iid"])
            for mr in related
            if mr.get("state") == "opened" and mr.get("sha") == ctx.sha
        )
    if open_heads:
        return [MergeRequestTarget(iid) for iid in open_heads]
    return [CommitTarget(ctx.sha)]


def publish(
    project: Project,
    targets: Sequence[Target],
    marker: str,
    render: Callable[[str | None], str],
    *,
    final: bool = True,
) -> list[PostedComment]:
    """Post or update the report on every target and say what was done.

    For each MR, the newest note of ours containing ``marker`` is edited with
    ``render(its_body)``; without one, a note ``render(None)`` is created. ``final=False`` (the
    "training started" announcement) skips commit targets. The first failure raises
    :class:`GitLabError` (one line); a body over GitLab's note limit is refused before sending.
    """
    posted: list[PostedComment] = []
    for target in targets:
        if isinstance(target, MergeRequestTarget):
            posted.append(_publish_to_merge_request(project, target, marker, render))
        elif final:
            posted.append(_comment_on_commit(project, target, render))
        else:
            posted.append(PostedComment(target, Action.SKIPPED, None, _commit_url(project, target)))
    return posted


def _publish_to_merge_request(
    project: Project,
    target: MergeRequestTarget,
    marker: str,
    render: Callable[[str | None], str],
) -> PostedComment:
    where = target.describe(project)
    server = project.manager.gitlab.url
    mr = project.mergerequests.get(target.iid, lazy=True)
    with gitlab_errors(f"read the comments of {where}", server):
        existing = _find_note(mr, marker, current_user_id(project.manager.gitlab))
    body = _checked(render(existing.body if existing else None), where)
    url = f"{project.web_url}/-/merge_requests/{target.iid}"
    if existing is None:
        with gitlab_errors(f"post the report to {where}", server):
            note = mr.notes.create({"body": body})
        return PostedComment(target, Action.CREATED, note.id, f"{url}#note_{note.id}")
    if existing.body == body:
        return PostedComment(target, Action.UNCHANGED, existing.id, f"{url}#note_{existing.id}")
    existing.body = body
    with gitlab_errors(f"update the report comment (note {existing.id}) on {where}", server):
        existing.save()
    return PostedComment(target, Action.UPDATED, existing.id, f"{url}#note_{existing.id}")


def _find_note(
    mr: ProjectMergeRequest, marker: str, user_id: int
) -> ProjectMergeRequestNote | None:
    """Our newest note holding ``marker``, searching page after page until found or exhausted.

    Only our own notes count: a reviewer's reply quoting the report also contains the marker,
    and we could not edit it anyway.
    """
    notes = mr.notes.list(
        iterator=True, order_by="created_at", sort="desc", per_page=NOTES_PER_PAGE
    )
    for note in notes:
        if note.system or note.author.get("id") != user_id:
            continue
        if marker in note.body:
            return note
    return None


def _comment_on_commit(
    project: Project, target: CommitTarget, render: Callable[[str | None], str]
) -> PostedComment:
    where = target.describe(project)
    body = _checked(render(None), where)
    commit = project.commits.get(target.sha, lazy=True)
    with gitlab_errors(f"post the report on {where}", project.manager.gitlab.url):
        commit.comments.create({"note": body})
    return PostedComment(target, Action.CREATED, None, _commit_url(project, target))


def _commit_url(project: Project, target: CommitTarget) -> str:
    return f"{project.web_url}/-/commit/{target.sha}"


def _checked(body: str, where: str) -> str:
    if len(body) > NOTE_LIMIT:
        raise GitLabError(
            f"cannot post the report to {where}: it is {len(body):,} characters, over GitLab's "
            f"{NOTE_LIMIT:,}-character comment limit; fix: this is a ci-runner bug (the report "
            "must shorten itself), please report it with the job log"
        )
    return body
