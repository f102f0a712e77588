"""Posting the report with the real python-gitlab over real HTTP to the fake GitLab in
tests/gitlab_server.py. ci-runner's retry waits are recorded on a manual clock, never slept."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from email.utils import format_datetime

import pytest
from gitlab.v4.objects import Project

from ci_runner.clock import ManualClock
from ci_runner.context import CIContext
from ci_runner.errors import GitLabError
from ci_runner.gitlab.client import connect, open_project
from ci_runner.gitlab.comments import (
    Action,
    CommitTarget,
    MergeRequestTarget,
    PostedComment,
    find_targets,
    publish,
    report_project_id,
)
from ci_runner.gitlab.transport import BoundedSession
from tests.gitlab_server import DROP, FakeGitLab, User, manual_session, record_retry_sleeps
from tests.gitlab_server import Project as FakeProject

TOKEN = "glpat-CANARY-9f2c71d4e8"  # must never show up in an error message
SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
OLD_SHA = "89e6c98d92887913cadf06b2adb97f26cde4849b"
MARKER = "<!-- ci-runner:simple-ml -->"  # the shape report.marker() gives
TOKEN_FIX = (
    "fix: store a valid project or personal access token with the api scope "
    "in the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
)


@pytest.fixture(autouse=True)
def no_python_gitlab_sleeps(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """python-gitlab's own retries are off: it never sleeps."""
    recorded = record_retry_sleeps(monkeypatch)
    yield
    assert recorded == []


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def session(clock: ManualClock) -> BoundedSession:
    return manual_session(clock)


@pytest.fixture
def sleeps(clock: ManualClock) -> list[float]:
    """The waits ci-runner's retries asked for, recorded instead of slept."""
    return clock.sleeps


@pytest.fixture
def server() -> Iterator[FakeGitLab]:
    with FakeGitLab() as fake:
        yield fake


@pytest.fixture
def bot(server: FakeGitLab) -> User:
    user = server.add_user("project_42_bot")
    server.add_token(TOKEN, user)
    return user


@pytest.fixture
def fake_project(server: FakeGitLab) -> FakeProject:
    project = server.add_project("group/proj")
    server.add_commit(project, SHA)
    return project


@pytest.fixture
def project(
    server: FakeGitLab, bot: User, fake_project: FakeProject, session: BoundedSession
) -> Project:
    return open_project(connect(server.url, TOKEN, session=session), "group/proj")


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
    return CIContext(sha=SHA, project_path="group/proj", **fields)


def note_bodies(project: FakeProject, iid: int) -> list[str]:
    return [note.body for note in project.merge_requests[iid].notes]


# --- targets -------------------------------------------------------------------------------


def test_mr_pipeline_posts_to_its_merge_request(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    targets = find_targets(project, ctx(mr_iid="7", pipeline_source="merge_request_event"))
    assert targets == [MergeRequestTarget(7)]
    assert server.count("GET", r"/repository/commits/") == 0

    render = Renderer()
    posted = publish(project, targets, MARKER, render)

    note_id = fake_project.merge_requests[7].notes[0].id
    assert posted == [
        PostedComment(
            MergeRequestTarget(7),
            Action.CREATED,
            note_id,
            f"{server.url}/group/proj/-/merge_requests/7#note_{note_id}",
        )
    ]
    assert render.previous == [None]
    assert note_bodies(fake_project, 7) == [f"{MARKER}\nreport (run 1)"]


def test_branch_pipeline_posts_to_the_one_open_mr_whose_head_is_the_commit(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 3, sha=SHA, commits=[OLD_SHA])
    server.add_merge_request(fake_project, 2, sha="b" * 40, commits=[SHA])  # SHA is not its head
    server.add_merge_request(fake_project, 1, sha=SHA, state="closed")
    server.add_merge_request(fake_project, 4, sha=SHA, state="merged")

    targets = find_targets(project, ctx(pipeline_source="push", ref_name="feature"))

    assert targets == [MergeRequestTarget(3)]
    posted = publish(project, targets, MARKER, Renderer())
    assert [p.action for p in posted] == [Action.CREATED]
    assert [len(fake_project.merge_requests[i].notes) for i in (1, 2, 3, 4)] == [0, 0, 1, 0]


def test_branch_pipeline_posts_to_every_open_mr_with_this_head(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 5, sha=SHA, target_branch="main")
    server.add_merge_request(fake_project, 9, sha=SHA, target_branch="release/1.0")

    targets = find_targets(project, ctx(pipeline_source="push"))
    render = Renderer()
    posted = publish(project, targets, MARKER, render)

    assert targets == [MergeRequestTarget(5), MergeRequestTarget(9)]
    assert [(p.target, p.action) for p in posted] == [
        (MergeRequestTarget(5), Action.CREATED),
        (MergeRequestTarget(9), Action.CREATED),
    ]
    assert render.previous == [None, None]
    assert note_bodies(fake_project, 5) == [f"{MARKER}\nreport (run 1)"]
    assert note_bodies(fake_project, 9) == [f"{MARKER}\nreport (run 2)"]


def test_manual_run_without_mr_keeps_one_commit_discussion_up_to_date(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    targets = find_targets(project, ctx(pipeline_source="web"))
    assert targets == [CommitTarget(SHA)]

    started = publish(project, targets, MARKER, Renderer("started"))
    result = publish(project, targets, MARKER, Renderer("result"))

    [thread] = fake_project.discussions
    [note] = thread.notes
    url = f"{server.url}/group/proj/-/commit/{SHA}#note_{note.id}"
    assert started == [PostedComment(CommitTarget(SHA), Action.CREATED, note.id, url)]
    assert result == [PostedComment(CommitTarget(SHA), Action.UPDATED, note.id, url)]
    assert note.body == f"{MARKER}\nresult (run 1)"
    assert server.count("POST", "/discussions$") == 1
    assert server.count("PUT", rf"/discussions/{thread.id}/notes/{note.id}$") == 1
    assert fake_project.commit_comments == {}


def test_unknown_commit_is_one_line(server: FakeGitLab, project: Project) -> None:
    with pytest.raises(GitLabError) as caught:
        find_targets(project, CIContext(sha="0" * 40, project_path="group/proj"))
    assert str(caught.value) == (
        "cannot list the merge requests of commit 00000000 in group/proj: GitLab answered "
        "404 Commit Not Found; fix: check that it exists and that the token in "
        "CI_RUNNER_GITLAB_TOKEN belongs to a member of the project"
    )


# --- one comment, kept up to date ------------------------------------------------------------


def test_second_run_edits_the_same_note_and_renders_from_its_body(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    render = Renderer()
    targets = [MergeRequestTarget(7)]

    first = publish(project, targets, MARKER, render)
    second = publish(project, targets, MARKER, render)

    assert render.previous == [None, f"{MARKER}\nreport (run 1)"]
    assert note_bodies(fake_project, 7) == [f"{MARKER}\nreport (run 2)"]
    assert [first[0].action, second[0].action] == [Action.CREATED, Action.UPDATED]
    assert first[0].note_id == second[0].note_id
    assert server.count("POST", r"/notes$") == 1
    assert server.count("PUT", rf"/notes/{first[0].note_id}$") == 1


def test_each_train_config_keeps_its_own_comment(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    gpu = "<!-- ci-runner:simple-ml-gpu -->"
    targets = [MergeRequestTarget(7)]
    publish(project, targets, MARKER, Renderer("cpu"))
    publish(project, targets, gpu, Renderer("gpu", gpu))
    cpu_again = Renderer("cpu again")
    publish(project, targets, MARKER, cpu_again)

    assert cpu_again.previous == [f"{MARKER}\ncpu (run 1)"]
    assert note_bodies(fake_project, 7) == [f"{MARKER}\ncpu again (run 1)", f"{gpu}\ngpu (run 1)"]


def test_same_body_again_sends_nothing(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    publish(project, [MergeRequestTarget(7)], MARKER, lambda previous: f"{MARKER}\nsame")
    posted = publish(project, [MergeRequestTarget(7)], MARKER, lambda previous: f"{MARKER}\nsame")
    assert posted[0].action is Action.UNCHANGED
    assert server.count("PUT") == 0
    assert len(fake_project.merge_requests[7].notes) == 1


def test_note_on_page_three_is_found_and_edited(
    server: FakeGitLab, fake_project: FakeProject, project: Project, bot: User
) -> None:
    mr = server.add_merge_request(fake_project, 7, sha=SHA)
    ours = server.add_note(mr, f"{MARKER}\nold report", bot)
    reviewer = server.add_user("reviewer")
    for n in range(250):  # newest first, 100 a page: ours is the 251st, on page 3
        server.add_note(mr, f"comment {n}", reviewer if n % 2 else bot)
    render = Renderer()

    posted = publish(project, [MergeRequestTarget(7)], MARKER, render)

    assert posted[0].action is Action.UPDATED
    assert posted[0].note_id == ours.id
    assert render.previous == [f"{MARKER}\nold report"]
    assert ours.body == f"{MARKER}\nreport (run 1)"
    assert len(mr.notes) == 251
    pages = server.matching("GET", r"/merge_requests/7/notes$")
    assert [r.query.get("page", "1") for r in pages] == ["1", "2", "3"]
    assert {r.query["per_page"] for r in pages} == {"100"}
    assert {(r.query["order_by"], r.query["sort"]) for r in pages} == {("created_at", "desc")}


def test_a_reviewer_quoting_the_report_is_not_taken_for_ours(
    server: FakeGitLab, fake_project: FakeProject, project: Project, bot: User
) -> None:
    mr = server.add_merge_request(fake_project, 7, sha=SHA)
    ours = server.add_note(mr, f"{MARKER}\nold report", bot)
    quote = server.add_note(
        mr, f"> {MARKER}\n> old report\n\nwhy is loss up?", server.add_user("rev")
    )
    server.add_note(mr, f"changed the line {MARKER}", bot, system=True)

    posted = publish(project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].note_id == ours.id
    assert quote.body.startswith("> ")
    assert ours.body == f"{MARKER}\nreport (run 1)"


def test_body_over_the_note_limit_is_refused_before_sending(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    with pytest.raises(GitLabError) as caught:
        publish(project, [MergeRequestTarget(7)], MARKER, lambda previous: "x" * 1_000_001)
    assert str(caught.value) == (
        "cannot post the report to merge request !7 of group/proj: it is 1,000,001 characters, "
        "over GitLab's 1,000,000-character comment limit; fix: this is a ci-runner bug (the "
        "report must shorten itself), please report it with the job log"
    )
    assert server.count("POST") == 0


def test_body_at_the_note_limit_is_sent(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    body = MARKER + "é" * (1_000_000 - len(MARKER))  # characters, not bytes
    publish(project, [MergeRequestTarget(7)], MARKER, lambda previous: body)
    assert note_bodies(fake_project, 7) == [body]


# --- retries and failures ------------------------------------------------------------------


def test_429_is_retried_after_retry_after(
    server: FakeGitLab, fake_project: FakeProject, project: Project, sleeps: list[float]
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    server.inject(429, method="POST", path=r"/notes$", headers={"Retry-After": "3"})

    posted = publish(project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].action is Action.CREATED
    assert sleeps == [3]
    assert [r.status for r in server.matching("POST", r"/notes$")] == [429, 201]
    assert len(fake_project.merge_requests[7].notes) == 1


def test_retry_after_as_an_http_date_is_honoured(
    server: FakeGitLab, fake_project: FakeProject, project: Project, clock: ManualClock
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    later = format_datetime(clock.now() + timedelta(seconds=4), usegmt=True)
    server.inject(429, method="GET", path=r"/notes$", headers={"Retry-After": later})

    posted = publish(project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].action is Action.CREATED
    assert clock.sleeps == [4.0]


def test_burst_of_500s_on_reads_is_retried_with_backoff(
    server: FakeGitLab, fake_project: FakeProject, project: Project, sleeps: list[float]
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    server.inject(500, method="GET", path=r"/notes$", times=3)

    posted = publish(project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert posted[0].action is Action.CREATED
    assert sleeps == [0.5, 1.0, 2.0]
    assert [r.status for r in server.matching("GET", r"/notes$")] == [500, 500, 500, 200]
    assert len(fake_project.merge_requests[7].notes) == 1


@pytest.mark.parametrize("status", [502, 504, DROP])
def test_a_create_gitlab_executed_but_did_not_confirm_is_not_made_twice(
    server: FakeGitLab, fake_project: FakeProject, project: Project, status: int
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    server.inject(status, method="POST", path=r"/notes$", after=True)

    posted = publish(project, [MergeRequestTarget(7)], MARKER, Renderer())

    [note] = fake_project.merge_requests[7].notes
    assert (posted[0].action, posted[0].note_id) == (Action.CREATED, note.id)
    assert note.body == f"{MARKER}\nreport (run 1)"
    assert server.count("POST", r"/notes$") == 1
    assert server.count("GET", r"/notes$") == 2  # before creating, and after the lost answer


def test_a_create_refused_with_a_5xx_is_made_after_looking(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    server.inject(503, method="POST", path=r"/notes$")

    publish(project, [MergeRequestTarget(7)], MARKER, Renderer())

    assert note_bodies(fake_project, 7) == [f"{MARKER}\nreport (run 1)"]
    assert [r.status for r in server.matching("POST", r"/notes$")] == [503, 201]


def test_a_commit_discussion_gitlab_executed_is_not_made_twice(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.inject(502, method="POST", path=r"/discussions$", after=True)
    publish(project, [CommitTarget(SHA)], MARKER, Renderer())
    assert [len(d.notes) for d in fake_project.discussions] == [1]


def test_the_body_is_sent_as_gitlab_stores_it_so_a_rerun_sends_nothing(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)

    def render(previous: str | None) -> str:
        return f"{MARKER}\r\nsame report  \n\n"

    publish(project, [MergeRequestTarget(7)], MARKER, render)
    again = publish(project, [MergeRequestTarget(7)], MARKER, render)

    assert again[0].action is Action.UNCHANGED
    assert note_bodies(fake_project, 7) == [f"{MARKER}\nsame report"]
    assert (server.count("POST"), server.count("PUT")) == (1, 0)


def test_no_line_of_a_posted_note_can_run_a_quick_action(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    mr = server.add_merge_request(fake_project, 7, sha=SHA)
    hostile = "~~~\n/close\n~~~\n\r/merge\n````\n/label ~x\n````\nlast `line`\n/title pwned"
    publish(project, [MergeRequestTarget(7)], MARKER, Renderer(hostile))
    assert (mr.executed_commands, mr.state, mr.title) == ([], "opened", "MR 7")
    assert note_bodies(fake_project, 7) == [
        f"{MARKER}\n~~~\n /close\n~~~\n /merge\n````\n /label ~x\n````\nlast `line`\n"
        " /title pwned (run 1)"
    ]


def test_rate_limit_that_never_ends_gives_up_in_one_line(
    server: FakeGitLab, fake_project: FakeProject, project: Project, sleeps: list[float]
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    server.inject(429, path=r"/notes$", times=100, headers={"Retry-After": "1"})
    with pytest.raises(GitLabError) as caught:
        publish(project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot read the comments of merge request !7 of group/proj: GitLab kept answering "
        "429 Too Many Requests, even after retries; fix: retry the job once GitLab answers "
        "again (the token is being rate-limited)"
    )
    assert sleeps == [1, 1, 1]
    assert server.count("GET", r"/notes$") == 4


def test_a_fork_merge_request_is_reported_in_the_project_it_targets() -> None:
    fork_mr = ctx(project_id="43", mr_iid="7", mr_project_id="42", mr_source_project_id="43")
    assert report_project_id(fork_mr) == "42"
    assert report_project_id(ctx(project_id="42", pipeline_source="push")) == "42"
    assert report_project_id(ctx(project_id="43", mr_project_id="42")) == "43"  # no MR: own


def test_token_revoked_mid_run_is_one_clear_line(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    server.revoke_token(TOKEN)
    with pytest.raises(GitLabError) as caught:
        publish(project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot read the comments of merge request !7 of group/proj: GitLab rejected the "
        f"access token (401 Unauthorized); {TOKEN_FIX}"
    )


def test_read_only_token_is_told_to_get_the_api_scope(
    server: FakeGitLab, fake_project: FakeProject
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    server.add_token("glpat-read", server.add_user("reader"), scopes=["read_api"])
    project = open_project(connect(server.url, "glpat-read"), "group/proj")
    with pytest.raises(GitLabError) as caught:
        publish(project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot post the report to merge request !7 of group/proj: GitLab answered "
        "403 insufficient_scope; fix: give the token in CI_RUNNER_GITLAB_TOKEN the api scope "
        "and at least the Reporter role in the project"
    )


def test_redirected_post_is_one_line(
    server: FakeGitLab, fake_project: FakeProject, project: Project
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    notes = f"{server.url}/api/v4/projects/{fake_project.id}/merge_requests/7/notes"
    server.inject(301, method="POST", path=r"/notes$", headers={"Location": notes})
    with pytest.raises(GitLabError) as caught:
        publish(project, [MergeRequestTarget(7)], MARKER, Renderer())
    assert str(caught.value) == (
        "cannot post the report to merge request !7 of group/proj: GitLab redirected the "
        "request to another address; fix: set the GitLab URL (CI_SERVER_URL) to the address "
        "it redirects to, usually its https:// URL"
    )
    assert fake_project.merge_requests[7].notes == []


def test_the_token_never_appears_in_an_error(
    server: FakeGitLab, fake_project: FakeProject, project: Project, session: BoundedSession
) -> None:
    server.add_merge_request(fake_project, 7, sha=SHA)
    messages: list[str] = []

    def failure(call: object) -> None:
        with pytest.raises(GitLabError) as caught:
            call()  # type: ignore[operator]
        messages.append(str(caught.value))
        messages.extend(repr(e) for e in (caught.value, caught.value.__cause__))

    for status in (403, 404, 409, 500):
        server.inject(status, times=11)
        failure(lambda: publish(project, [MergeRequestTarget(7)], MARKER, Renderer()))
    failure(
        lambda: publish(project, [MergeRequestTarget(7)], MARKER, lambda previous: "x" * 2_000_000)
    )
    server.revoke_token(TOKEN)
    failure(lambda: connect(server.url, TOKEN, session=session))
    failure(lambda: find_targets(project, ctx()))

    assert len(messages) == 7 * 3
    assert all(TOKEN not in m for m in messages)


def test_pages_are_followed_on_our_url_when_gitlabs_external_url_differs(
    session: BoundedSession,
) -> None:
    with FakeGitLab(external_url="https://gitlab.example.com") as fake:
        bot = fake.add_user("bot")
        fake.add_token(TOKEN, bot)
        upstream = fake.add_project("group/proj")
        mr = fake.add_merge_request(upstream, 7, sha=SHA)
        ours = fake.add_note(mr, f"{MARKER}\nold", bot)
        for i in range(250):
            fake.add_note(mr, f"chatter {i}", fake.users()[0])
        api = open_project(connect(fake.url, TOKEN, session=session), "group/proj")

        posted = publish(api, [MergeRequestTarget(7)], MARKER, Renderer())

        assert (posted[0].action, posted[0].note_id) == (Action.UPDATED, ours.id)
        assert (
            fake.count("GET", r"/notes$") == 3
        )  # pages 1-3 on 127.0.0.1, never gitlab.example.com
