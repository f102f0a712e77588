"""``/projects/:id/repository/commits/:sha/``: the commit's merge requests, its comments (list,
create) and its discussions (:mod:`testing.fake_gitlab.discussions`)."""

from __future__ import annotations

from testing.fake_gitlab import discussions
from testing.fake_gitlab.area import Call, ProjectArea
from testing.fake_gitlab.merge_requests import mr_json
from testing.fake_gitlab.model import CommitComment, Project
from testing.fake_gitlab.notes import note_text
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
    method, base, page = call.method, call.base, call.page
    sha = rest[2]
    if sha not in project.commits:
        raise Reply(404, {"message": "404 Commit Not Found"})
    if rest[3] == "merge_requests" and len(rest) == 4:
        # MergeRequestsFinder with project_id: the MRs whose target is this project
        # (lib/api/commits.rb, GET :id/repository/commits/:sha/merge_requests).
        mrs = [
            mr_json(project, mr, base)
            for mr in sorted(project.merge_requests.values(), key=lambda m: -m.iid)
            if sha in mr.commits
        ]
        return only(method, "GET", lambda: page.respond(mrs))
    if rest[3] == "comments" and len(rest) == 4:
        if method == "GET":
            comments = project.commit_comments.get(sha, [])
            return page.respond([_comment_json(c, base) for c in comments])
        return only(method, "POST", lambda: _create_comment(call, project, sha))
    if rest[3] == "discussions":
        return discussions.serve(call, project, sha, rest[4:])
    raise no_such_route()


AREA = ProjectArea(
    matches=lambda rest: rest[:2] == ["repository", "commits"] and len(rest) >= 4, serve=_serve
)


def _create_comment(call: Call, project: Project, sha: str) -> Response:
    text = note_text(call.body, "note", "Failed to save note")
    content, commands = extract_commands(text)
    project.commit_commands.extend(commands)
    comment = CommitComment(content, call.user, call.state.tick())
    project.commit_comments.setdefault(sha, []).append(comment)
    return json_response(201, _comment_json(comment, call.base))


def _comment_json(comment: CommitComment, base: str) -> JSONValue:
    return {
        "note": comment.note,
        "path": None,
        "line": None,
        "line_type": None,
        "author": user_json(comment.author, base),
        "created_at": timestamp(comment.created),
    }
