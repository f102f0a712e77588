"""Posting the report with the real python-gitlab over real HTTP to the fake GitLab in
testing/fake_gitlab/. ci-runner's retry waits are recorded on a manual clock, never slept."""

from __future__ import annotations

from datetime import timedelta
from email.utils import format_datetime

import pytest
from gitlab.v4.objects import Project

from ci_runner.clock import ManualClock
from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.gitlab.client import connect_gitlab, open_project
from ci_runner.gitlab.comments import (
    Action,
    CommitTarget,
    MergeRequestTarget,
    PostedComment,
    baseline_branch,
    find_targets,
    publish,
    reply_once,
    report_project_id,
)
from ci_runner.gitlab.transport import BoundedSession
from testing.fake_gitlab.accounts import GITLAB_SHA, GITLAB_TOKEN
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.model import User
from testing.fake_gitlab.server import DROP, FakeGitLab

OLD_SHA = "89e6c98d92887913cadf06b2adb97f26cde4849b"
MARKER = "<!-- ci-runner:simple-ml -->"  # the shape report.marker() gives
TOKEN_FIX = (
    "fix: store a valid project or personal access token with the api scope "
    "in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
)


class Renderer:
    """A render callback that records the previous bodies it was given."""

    def __init__(self, text: str = "report", marker: str = MARKER) -> None:
        self.text = text
        self.marker = marker
        self.previous: list[str | None] = []

    def __call__(self, previous: str | None) -> str:
        self.previous.append(previous)
        return f"{self.marker}\n{self.text} (run {len(self.previous)})"


def ctx(**fields: str) -> CIContext:
    return CIContext(sha=GITLAB_SHA, project_path="group/proj", **fields)


def note_bodies(project: FakeProject, iid: int) -> list[str]:
    return [note.body for note in project.merge_requests[iid].notes]


# --- targets -------------------------------------------------------------------------------


def test_mr_pipeline_posts_to_its_merge_request(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    targets = find_targets(gitlab_project, ctx(mr_iid="7", pipeline_source="merge_request_event"))
    assert targets == [MergeRequestTarget(7)]
    assert gitlab_server.count("GET", r"/repository/commits/") == 0

    render = Renderer()
    posted = publish(gitlab_project, targets, MARKER, render)

    note_id = gitlab_fake_project.merge_requests[7].notes[0].id
    assert posted == [
        PostedComment(
            MergeRequestTarget(7),
            Action.CREATED,
            note_id,
            f"{gitlab_server.url}/group/proj/-/merge_requests/7#note_{note_id}",
        )
    ]
    assert render.previous == [None]
    assert note_bodies(gitlab_fake_project, 7) == [f"{MARKER}\nreport (run 1)"]


def test_branch_pipeline_posts_to_the_one_open_mr_whose_head_is_the_commit(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 3, sha=GITLAB_SHA, commits=[OLD_SHA])
    # GITLAB_SHA is one of !2's commits, not its head
    gitlab_server.add_merge_request(gitlab_fake_project, 2, sha="b" * 40, commits=[GITLAB_SHA])
    gitlab_server.add_merge_request(gitlab_fake_project, 1, sha=GITLAB_SHA, state="closed")
    gitlab_server.add_merge_request(gitlab_fake_project, 4, sha=GITLAB_SHA, state="merged")

    targets = find_targets(gitlab_project, ctx(pipeline_source="push", ref_name="feature"))

    assert targets == [MergeRequestTarget(3, "main")]
    posted = publish(gitlab_project, targets, MARKER, Renderer())
    assert [p.action for p in posted] == [Action.CREATED]
    assert [len(gitlab_fake_project.merge_requests[i].notes) for i in (1, 2, 3, 4)] == [0, 0, 1, 0]


def test_branch_pipeline_posts_to_every_open_mr_with_this_head(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 5, sha=GITLAB_SHA, target_branch="main")
    gitlab_server.add_merge_request(
        gitlab_fake_project, 9, sha=GITLAB_SHA, target_branch="release/1.0"
    )

    targets = find_targets(gitlab_project, ctx(pipeline_source="push"))
    render = Renderer()
    posted = publish(gitlab_project, targets, MARKER, render)

    assert targets == [MergeRequestTarget(5, "main"), MergeRequestTarget(9, "release/1.0")]
    assert [(p.target, p.action) for p in posted] == [
        (MergeRequestTarget(5, "main"), Action.CREATED),
        (MergeRequestTarget(9, "release/1.0"), Action.CREATED),
    ]
    assert render.previous == [None, None]
    assert note_bodies(gitlab_fake_project, 5) == [f"{MARKER}\nreport (run 1)"]
    assert note_bodies(gitlab_fake_project, 9) == [f"{MARKER}\nreport (run 2)"]


def test_manual_run_without_mr_keeps_one_commit_discussion_up_to_date(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    targets = find_targets(gitlab_project, ctx(pipeline_source="web"))
    assert targets == [CommitTarget(GITLAB_SHA)]

    started = publish(gitlab_project, targets, MARKER, Renderer("started"))
    result = publish(gitlab_project, targets, MARKER, Renderer("result"))

    [thread] = gitlab_fake_project.discussions
    [note] = thread.notes
    url = f"{gitlab_server.url}/group/proj/-/commit/{GITLAB_SHA}#note_{note.id}"
    assert started == [PostedComment(CommitTarget(GITLAB_SHA), Action.CREATED, note.id, url)]
    assert result == [PostedComment(CommitTarget(GITLAB_SHA), Action.UPDATED, note.id, url)]
    assert note.body == f"{MARKER}\nresult (run 1)"
    assert gitlab_server.count("POST", "/discussions$") == 1
    assert gitlab_server.count("PUT", rf"/discussions/{thread.id}/notes/{note.id}$") == 1
    assert gitlab_fake_project.commit_comments == {}


def test_unknown_commit_is_one_line(gitlab_server: FakeGitLab, gitlab_project: Project) -> None:
    with pytest.raises(GitLabError) as caught:
        find_targets(gitlab_project, CIContext(sha="0" * 40, project_path="group/proj"))
    assert str(caught.value) == (
        "cannot list the merge requests of commit 00000000 in group/proj: GitLab answered "
        "404 Commit Not Found; fix: check that it exists and that the token in "
        "CI_RUNNER_GITLAB_TOKEN belongs to a member of the project"
    )


# --- one comment, kept up to date ------------------------------------------------------------


def test_second_run_edits_the_same_note_and_renders_from_its_body(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    render = Renderer()
    targets = [MergeRequestTarget(7)]

    first = publish(gitlab_project, targets, MARKER, render)
    second = publish(gitlab_project, targets, MARKER, render)

    assert render.previous == [None, f"{MARKER}\nreport (run 1)"]
    assert note_bodies(gitlab_fake_project, 7) == [f"{MARKER}\nreport (run 2)"]
    assert [first[0].action, second[0].action] == [Action.CREATED, Action.UPDATED]
    assert first[0].note_id == second[0].note_id
    assert gitlab_server.count("POST", r"/notes$") == 1
    assert gitlab_server.count("PUT", rf"/notes/{first[0].note_id}$") == 1


def test_each_train_config_keeps_its_own_comment(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gpu = "<!-- ci-runner:simple-ml-gpu -->"
    targets = [MergeRequestTarget(7)]
    publish(gitlab_project, targets, MARKER, Renderer("cpu"))
    publish(gitlab_project, targets, gpu, Renderer("gpu", gpu))
    cpu_again = Renderer("cpu again")
    publish(gitlab_project, targets, MARKER, cpu_again)

    assert cpu_again.previous == [f"{MARKER}\ncpu (run 1)"]
    assert note_bodies(gitlab_fake_project, 7) == [
        f"{MARKER}\ncpu again (run 1)",
        f"{gpu}\ngpu (run 1)",
    ]


def test_same_body_again_sends_nothing(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    publish(gitlab_project, [MergeRequestTarget(7)], MARKER, lambda previous: f"{MARKER}\nsame")
    posted = publish(
        gitlab_project, [MergeRequestTarget(7)], MARKER, lambda previous: f"{MARKER}\nsame"
    )
    assert posted[0].action is Action.UNCHANGED
    assert gitlab_server.count("PUT") == 0
    assert len(gitlab_fake_project.merge_requests[7].notes) == 1


def test_note_on_page_three_is_found_and_edited(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_bot: User,
) -> None:
    mr = gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    ours = gitlab_server.add_note(mr, f"{MARKER}\nold report", gitlab_bot)
    reviewer = gitlab_server.add_user("reviewer")
    for n in range(250):  # newest first, 100 a page: ours is the 251st, on page 3
        gitlab_server.add_note(mr, f"comment {n}", reviewer if n % 2 else gitlab_bot)
    render = Renderer()

    posted = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, render)

    assert posted[0].action is Action.UPDATED
    assert posted[0].note_id == ours.id
    assert render.previous == [f"{MARKER}\nold report"]
    assert ours.body == f"{MARKER}\nreport (run 1)"
    assert len(mr.notes) == 251
    pages = gitlab_server.matching("GET", r"/merge_requests/7/notes$")
    assert [r.query.get("page", "1") for r in pages] == ["1", "2", "3"]
    assert {r.query["per_page"] for r in pages} == {"100"}
    assert {(r.query["order_by"], r.query["sort"]) for r in pages} == {("created_at", "desc")}


def test_a_reviewer_quoting_the_report_is_not_taken_for_ours(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_bot: User,
) -> None:
    mr = gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    ours = gitlab_server.add_note(mr, f"{MARKER}\nold report", gitlab_bot)
    quote = gitlab_server.add_note(
        mr, f"> {MARKER}\n> old report\n\nwhy is loss up?", gitlab_server.add_user("rev")
    )
    gitlab_server.add_note(mr, f"changed the line {MARKER}", gitlab_bot, system=True)

    posted = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].note_id == ours.id
    assert quote.body.startswith("> ")
    assert ours.body == f"{MARKER}\nreport (run 1)"


def test_body_over_the_note_limit_is_refused_before_sending(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    with pytest.raises(GitLabError) as caught:
        publish(gitlab_project, [MergeRequestTarget(7)], MARKER, lambda previous: "x" * 1_000_001)
    assert str(caught.value) == (
        "cannot post the report to merge request !7 of group/proj: it is 1,000,001 characters, "
        "over GitLab's 1,000,000-character comment limit; fix: this is a ci-runner bug (the "
        "report must shorten itself), please report it with the job log"
    )
    assert gitlab_server.count("POST") == 0


def test_body_at_the_note_limit_is_sent(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    body = MARKER + "é" * (1_000_000 - len(MARKER))  # characters, not bytes
    publish(gitlab_project, [MergeRequestTarget(7)], MARKER, lambda previous: body)
    assert note_bodies(gitlab_fake_project, 7) == [body]


# --- retries and failures ------------------------------------------------------------------


def test_429_is_retried_after_retry_after(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_sleeps: list[float],
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gitlab_server.inject(429, method="POST", path=r"/notes$", headers={"Retry-After": "3"})

    posted = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].action is Action.CREATED
    assert gitlab_sleeps == [3]
    assert [r.status for r in gitlab_server.matching("POST", r"/notes$")] == [429, 201]
    assert len(gitlab_fake_project.merge_requests[7].notes) == 1


def test_retry_after_as_an_http_date_is_honoured(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_clock: ManualClock,
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    later = format_datetime(gitlab_clock.now() + timedelta(seconds=4), usegmt=True)
    gitlab_server.inject(429, method="GET", path=r"/notes$", headers={"Retry-After": later})

    posted = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].action is Action.CREATED
    assert gitlab_clock.sleeps == [4.0]


def test_burst_of_500s_on_reads_is_retried_with_backoff(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_sleeps: list[float],
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gitlab_server.inject(500, method="GET", path=r"/notes$", times=3)

    posted = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].action is Action.CREATED
    assert gitlab_sleeps == [0.5, 1.0, 2.0]
    assert [r.status for r in gitlab_server.matching("GET", r"/notes$")] == [500, 500, 500, 200]
    assert len(gitlab_fake_project.merge_requests[7].notes) == 1


@pytest.mark.parametrize("status", [502, 504, DROP])
def test_a_create_gitlab_executed_but_did_not_confirm_is_not_made_twice(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    status: int,
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gitlab_server.inject(status, method="POST", path=r"/notes$", after=True)

    posted = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())

    [note] = gitlab_fake_project.merge_requests[7].notes
    assert (posted[0].action, posted[0].note_id) == (Action.CREATED, note.id)
    assert note.body == f"{MARKER}\nreport (run 1)"
    assert gitlab_server.count("POST", r"/notes$") == 1
    assert gitlab_server.count("GET", r"/notes$") == 2  # before creating, and after the lost answer


def test_a_create_refused_with_a_5xx_is_made_after_looking(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gitlab_server.inject(503, method="POST", path=r"/notes$")

    publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert note_bodies(gitlab_fake_project, 7) == [f"{MARKER}\nreport (run 1)"]
    assert [r.status for r in gitlab_server.matching("POST", r"/notes$")] == [503, 201]


def test_a_commit_discussion_gitlab_executed_is_not_made_twice(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.inject(502, method="POST", path=r"/discussions$", after=True)
    publish(gitlab_project, [CommitTarget(GITLAB_SHA)], MARKER, Renderer())
    assert [len(d.notes) for d in gitlab_fake_project.discussions] == [1]


def test_the_body_is_sent_as_gitlab_stores_it_so_a_rerun_sends_nothing(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)

    def render(previous: str | None) -> str:
        return f"{MARKER}\r\nsame report  \n\n"

    publish(gitlab_project, [MergeRequestTarget(7)], MARKER, render)
    again = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, render)

    assert again[0].action is Action.UNCHANGED
    assert note_bodies(gitlab_fake_project, 7) == [f"{MARKER}\nsame report"]
    assert (gitlab_server.count("POST"), gitlab_server.count("PUT")) == (1, 0)


def test_no_line_of_a_posted_note_can_run_a_quick_action(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    mr = gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    hostile = "~~~\n/close\n~~~\n\r/merge\n````\n/label ~x\n````\nlast `line`\n/title pwned"
    publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer(hostile))
    assert (mr.executed_commands, mr.state, mr.title) == ([], "opened", "MR 7")
    assert note_bodies(gitlab_fake_project, 7) == [
        f"{MARKER}\n~~~\n /close\n~~~\n /merge\n````\n /label ~x\n````\nlast `line`\n"
        " /title pwned (run 1)"
    ]


def test_rate_limit_that_never_ends_gives_up_in_one_line(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_sleeps: list[float],
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gitlab_server.inject(429, path=r"/notes$", times=100, headers={"Retry-After": "1"})
    with pytest.raises(GitLabError) as caught:
        publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot read the comments of merge request !7 of group/proj: GitLab kept answering "
        "429 Too Many Requests, even after retries; fix: retry the job once GitLab answers "
        "again (the token is being rate-limited)"
    )
    assert gitlab_sleeps == [1, 1, 1]
    assert gitlab_server.count("GET", r"/notes$") == 4


def test_the_baseline_branch_is_the_mrs_target_else_the_pipelines_else_the_default() -> None:
    mr_pipeline = ctx(mr_target_branch="release", default_branch="main")
    assert baseline_branch(MergeRequestTarget(7, "dev"), mr_pipeline) == "dev"
    assert baseline_branch(MergeRequestTarget(7), mr_pipeline) == "release"
    assert baseline_branch(CommitTarget(GITLAB_SHA), mr_pipeline) == "release"
    assert baseline_branch(None, mr_pipeline) == "release"  # no comment target at all
    assert baseline_branch(None, ctx(default_branch="main")) == "main"
    assert baseline_branch(None, ctx()) is None


def test_a_fork_merge_request_is_reported_in_the_project_it_targets() -> None:
    fork_mr = ctx(project_id="43", mr_iid="7", mr_project_id="42", mr_source_project_id="43")
    assert report_project_id(fork_mr) == "42"
    assert report_project_id(ctx(project_id="42", pipeline_source="push")) == "42"
    assert report_project_id(ctx(project_id="43", mr_project_id="42")) == "43"  # no MR: own


def test_token_revoked_mid_run_is_one_clear_line(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gitlab_server.revoke_token(GITLAB_TOKEN)
    with pytest.raises(GitLabError) as caught:
        publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot read the comments of merge request !7 of group/proj: GitLab rejected the "
        f"access token (401 Unauthorized); {TOKEN_FIX}"
    )


def test_read_only_token_is_told_to_get_the_api_scope(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    gitlab_server.add_token("glpat-read", gitlab_server.add_user("reader"), scopes=["read_api"])
    project = open_project(connect_gitlab(gitlab_server.url, "glpat-read"), "group/proj")
    with pytest.raises(GitLabError) as caught:
        publish(project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot post the report to merge request !7 of group/proj: GitLab answered "
        "403 insufficient_scope; fix: give the token in CI_RUNNER_GITLAB_TOKEN the api scope "
        "and at least the Reporter role in the project"
    )


def test_redirected_post_is_one_line(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    notes = f"{gitlab_server.url}/api/v4/projects/{gitlab_fake_project.id}/merge_requests/7/notes"
    gitlab_server.inject(301, method="POST", path=r"/notes$", headers={"Location": notes})
    with pytest.raises(GitLabError) as caught:
        publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot post the report to merge request !7 of group/proj: GitLab redirected the "
        "request to another address; fix: set the GitLab URL (CI_SERVER_URL) to the address "
        "it redirects to, usually its https:// URL"
    )
    assert gitlab_fake_project.merge_requests[7].notes == []


def test_the_token_never_appears_in_an_error(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_session: BoundedSession,
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    messages: list[str] = []

    def failure(call: object) -> None:
        with pytest.raises(GitLabError) as caught:
            call()  # type: ignore[operator]
        messages.append(str(caught.value))
        messages.extend(repr(e) for e in (caught.value, caught.value.__cause__))

    for status in (403, 404, 409, 500):
        gitlab_server.inject(status, times=11)
        failure(lambda: publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer()))
    failure(
        lambda: publish(
            gitlab_project, [MergeRequestTarget(7)], MARKER, lambda previous: "x" * 2_000_000
        )
    )
    gitlab_server.revoke_token(GITLAB_TOKEN)
    failure(lambda: connect_gitlab(gitlab_server.url, GITLAB_TOKEN, session=gitlab_session))
    failure(lambda: find_targets(gitlab_project, ctx()))

    assert len(messages) == 7 * 3
    assert all(GITLAB_TOKEN not in m for m in messages)


def test_pages_are_followed_on_our_url_when_gitlabs_external_url_differs(
    gitlab_session: BoundedSession, gitlab_sleeps: list[float]
) -> None:
    with FakeGitLab(external_url="https://gitlab.example.com") as fake:
        bot = fake.add_user("bot")
        fake.add_token(GITLAB_TOKEN, bot)
        upstream = fake.add_project("group/proj")
        mr = fake.add_merge_request(upstream, 7, sha=GITLAB_SHA)
        ours = fake.add_note(mr, f"{MARKER}\nold", bot)
        for i in range(250):
            fake.add_note(mr, f"chatter {i}", fake.users()[0])
        api = open_project(
            connect_gitlab(fake.url, GITLAB_TOKEN, session=gitlab_session), "group/proj"
        )

        posted = publish(api, [MergeRequestTarget(7)], MARKER, Renderer())

        assert (posted[0].action, posted[0].note_id) == (Action.UPDATED, ours.id)
        assert (
            fake.count("GET", r"/notes$") == 3
        )  # pages 1-3 on 127.0.0.1, never gitlab.example.com


def test_the_results_lookup_keeps_within_gitlabs_budget(
    gitlab_server: FakeGitLab,
    gitlab_fake_project: FakeProject,
    gitlab_project: Project,
    gitlab_clock: ManualClock,
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    [report] = publish(gitlab_project, [MergeRequestTarget(7)], MARKER, Renderer())
    gitlab_server.inject(DROP, method="GET", path=r"/notes$", times=100)

    with pytest.raises(GitLabError) as caught:
        reply_once(gitlab_project, report, "<!-- ci-runner-result:job-9 -->", "done")

    assert str(caught.value) == (
        f"cannot read the comments of merge request !7 of group/proj: GitLab at "
        f"{gitlab_server.url} did not answer (ConnectionError, after retries); fix: check "
        "CI_SERVER_URL and the runner's network, then retry the job once GitLab answers again"
    )
    assert 0 < sum(gitlab_clock.sleeps) <= 20  # the session's budget (tests/conftest.py)
    assert note_bodies(gitlab_fake_project, 7) == [f"{MARKER}\nreport (run 1)"]


def test_a_commits_result_is_a_reply_in_the_reports_thread(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    [report] = publish(gitlab_project, [CommitTarget(GITLAB_SHA)], MARKER, Renderer())
    tag = "<!-- ci-runner-result:job-9 -->"

    first = reply_once(gitlab_project, report, tag, f"{tag}\ndone\n/tag v1")
    again = reply_once(gitlab_project, report, tag, f"{tag}\ndone again")

    assert first is not None and again is not None
    assert (first.action, again.action, again.note_id) == (
        Action.CREATED,
        Action.UNCHANGED,
        first.note_id,
    )
    [thread] = gitlab_fake_project.discussions
    assert [n.body for n in thread.notes] == [f"{MARKER}\nreport (run 1)", f"{tag}\ndone\n /tag v1"]
    assert gitlab_fake_project.commit_commands == []


# --- markers count on the first line only: below it the report quotes the training's log ------

OTHER = "<!-- ci-runner:other-config -->"
RESULT = "<!-- ci-runner-result:job-9 -->"


def test_a_marker_the_log_printed_does_not_take_another_configs_note(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    targets = [MergeRequestTarget(7)]
    publish(gitlab_project, targets, OTHER, Renderer("other", OTHER))
    publish(gitlab_project, targets, MARKER, Renderer(f"log:\n{OTHER}"))  # the newer note
    other_again = Renderer("other again", OTHER)

    [posted] = publish(gitlab_project, targets, OTHER, other_again)

    assert posted.action is Action.UPDATED
    assert other_again.previous == [f"{OTHER}\nother (run 1)"]
    assert note_bodies(gitlab_fake_project, 7) == [
        f"{OTHER}\nother again (run 1)",
        f"{MARKER}\nlog:\n{OTHER} (run 1)",
    ]


def test_a_marker_the_log_printed_in_a_commit_thread_is_not_that_configs_note(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    targets = [CommitTarget(GITLAB_SHA)]
    publish(gitlab_project, targets, MARKER, Renderer(f"log:\n{OTHER}"))
    other = Renderer("other", OTHER)

    [posted] = publish(gitlab_project, targets, OTHER, other)

    assert (posted.action, other.previous) == (Action.CREATED, [None])
    assert [[n.body for n in d.notes] for d in gitlab_fake_project.discussions] == [
        [f"{MARKER}\nlog:\n{OTHER} (run 1)"],
        [f"{OTHER}\nother (run 1)"],
    ]


def test_a_result_marker_the_log_printed_in_a_newer_note_is_no_result(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    gitlab_server.add_merge_request(gitlab_fake_project, 7, sha=GITLAB_SHA)
    targets = [MergeRequestTarget(7)]
    [report] = publish(gitlab_project, targets, MARKER, Renderer())
    publish(gitlab_project, targets, OTHER, Renderer(f"log:\n{RESULT}", OTHER))

    replied = reply_once(gitlab_project, report, RESULT, f"{RESULT}\ndone")

    assert replied is not None and replied.action is Action.CREATED
    assert note_bodies(gitlab_fake_project, 7) == [
        f"{MARKER}\nreport (run 1)",
        f"{OTHER}\nlog:\n{RESULT} (run 1)",
        f"{RESULT}\ndone",
    ]


def test_a_result_marker_the_log_printed_in_the_commit_report_is_no_result(
    gitlab_server: FakeGitLab, gitlab_fake_project: FakeProject, gitlab_project: Project
) -> None:
    [report] = publish(
        gitlab_project, [CommitTarget(GITLAB_SHA)], MARKER, Renderer(f"log:\n{RESULT}")
    )

    replied = reply_once(gitlab_project, report, RESULT, f"{RESULT}\ndone")

    assert replied is not None and replied.action is Action.CREATED
    [thread] = gitlab_fake_project.discussions
    assert [n.body for n in thread.notes] == [
        f"{MARKER}\nlog:\n{RESULT} (run 1)",
        f"{RESULT}\ndone",
    ]
