"""The fake GitLab answers like GitLab: pagination headers, auth errors, the note size limit,
notes stored after quick-action extraction, faults after a write, artifacts by the latest green
pipeline, forks, commit and merge-request threads (replies, and which writes notify), and its
command line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import gitlab
import pytest
import requests

from testing.fake_gitlab.accounts import GITLAB_TOKEN
from testing.fake_gitlab.model import MergeRequest as FakeMergeRequest
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.model import User
from testing.fake_gitlab.server import DROP, FakeGitLab
from testing.paths import REPO_ROOT


def test_notes_pagination_headers_and_link(gitlab_server: FakeGitLab, gitlab_bot: User) -> None:
    mr = gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    notes = [gitlab_server.add_note(mr, f"n{i}", gitlab_bot) for i in range(5)]

    response = requests.get(
        f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes",
        params={"per_page": "2", "page": "2", "sort": "asc"},
        headers={"PRIVATE-TOKEN": GITLAB_TOKEN},
        timeout=5,
    )

    assert response.status_code == 200
    assert [n["body"] for n in response.json()] == ["n2", "n3"]
    assert {k: response.headers[k] for k in ("X-Page", "X-Per-Page", "X-Total")} == {
        "X-Page": "2",
        "X-Per-Page": "2",
        "X-Total": "5",
    }
    assert (response.headers["X-Total-Pages"], response.headers["X-Next-Page"]) == ("3", "3")
    assert response.headers["X-Prev-Page"] == "1"
    base = f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes?per_page=2"
    assert response.links["next"]["url"] == f"{base}&page=3&sort=asc"
    assert response.links["last"]["url"] == f"{base}&page=3&sort=asc"
    assert response.links["prev"]["url"] == f"{base}&page=1&sort=asc"
    assert [n.id for n in notes[2:4]] == [n["id"] for n in response.json()]


def test_python_gitlab_lists_every_page(gitlab_server: FakeGitLab, gitlab_bot: User) -> None:
    mr = gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    for i in range(45):
        gitlab_server.add_note(mr, f"n{i}", gitlab_bot)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    notes = gl.projects.get("g/p", lazy=True).mergerequests.get(1, lazy=True).notes
    assert [n.body for n in notes.list(get_all=True)] == [f"n{i}" for i in reversed(range(45))]
    assert gitlab_server.count("GET", "/notes$") == 3  # 20 a page by default


def test_unknown_token_gets_gitlabs_401(gitlab_server: FakeGitLab) -> None:
    response = requests.get(
        f"{gitlab_server.url}/api/v4/user", headers={"PRIVATE-TOKEN": "nope"}, timeout=5
    )
    assert (response.status_code, response.json()) == (401, {"message": "401 Unauthorized"})


def test_read_api_token_may_read_but_not_write(gitlab_server: FakeGitLab) -> None:
    gitlab_server.add_token("glpat-read", gitlab_server.add_user("reader"), scopes=["read_api"])
    gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    url = f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes"
    headers = {"PRIVATE-TOKEN": "glpat-read"}
    assert requests.get(url, headers=headers, timeout=5).status_code == 200
    response = requests.post(url, json={"body": "hi"}, headers=headers, timeout=5)
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"


def test_note_over_the_limit_is_rejected_like_gitlab(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    gitlab_server.add_merge_request(project, 1, sha="a" * 40)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    mr = gl.projects.get("g/p", lazy=True).mergerequests.get(1, lazy=True)

    with pytest.raises(gitlab.GitlabCreateError) as caught:
        mr.notes.create({"body": "x" * 1_000_001})

    assert caught.value.response_code == 400
    assert caught.value.error_message == (
        '400 Bad request - Note {:note=>["is too long (maximum is 1000000 characters)"]}'
    )
    assert mr.notes.create({"body": "x" * 1_000_000}).id > 0


def test_only_the_author_may_edit_a_note(gitlab_server: FakeGitLab, gitlab_bot: User) -> None:
    mr = gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    theirs = gitlab_server.add_note(mr, "mine", gitlab_server.add_user("someone"))
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    note = gl.projects.get("g/p", lazy=True).mergerequests.get(1, lazy=True).notes.get(theirs.id)
    note.body = "edited"
    with pytest.raises(gitlab.GitlabUpdateError) as caught:
        note.save()
    assert caught.value.response_code == 403
    assert theirs.body == "mine"


def test_injected_faults_come_before_auth_and_run_out(gitlab_server: FakeGitLab) -> None:
    gitlab_server.inject(429, path="/user$", headers={"Retry-After": "7"})
    first = requests.get(f"{gitlab_server.url}/api/v4/user", timeout=5)
    second = requests.get(f"{gitlab_server.url}/api/v4/user", timeout=5)
    assert (first.status_code, first.headers["Retry-After"], first.text) == (
        429,
        "7",
        "Retry later\n",
    )
    assert second.status_code == 401
    assert [r.status for r in gitlab_server.requests] == [429, 401]


# --- GitLab's rules the fake follows (see the module docstring for the upstream lines) -------


@pytest.fixture
def bot_mr(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]:
    project = gitlab_server.add_project("g/p")
    mr = gitlab_server.add_merge_request(project, 1, sha="a" * 40)
    return gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN), project, mr


def _notes_api(gl: gitlab.Gitlab) -> Any:
    return gl.projects.get("g/p", lazy=True).mergerequests.get(1, lazy=True).notes


def test_a_note_is_stored_as_gitlab_stores_it(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, project, mr = bot_mr
    created = _notes_api(gl).create({"body": "line one\r\nline two  \n\n"})
    assert created.body == "line one\nline two"
    assert [n.body for n in gitlab_server.notes(project, 1)] == ["line one\nline two"]
    assert mr.executed_commands == []


def test_quick_actions_in_a_note_are_executed_and_removed(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, _, mr = bot_mr
    # ~~~ is no fence to the extractor (extractor.rb:98-107 knows only ```)
    note = _notes_api(gl).create({"body": "report\n~~~\n/merge\n~~~\n/label ~bad"})
    assert note.body == "report\n~~~\n~~~"
    assert mr.executed_commands == [["merge"], ["label", "~bad"]]
    assert (mr.state, mr.labels) == ("merged", ["bad"])


def test_only_text_up_to_the_last_backtick_ended_line_is_protected(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, _, mr = bot_mr
    # "inline code on separate rows" (extractor.rb:109-118) spans from a line with a backtick to
    # the last line ending in one, fences of any length included; what follows is not protected
    body = "````\n/close\n````\n/reopen here `x`\nafter\n/title x"
    note = _notes_api(gl).create({"body": body})
    assert note.body == "````\n/close\n````\n/reopen here `x`\nafter"
    assert (mr.executed_commands, mr.title) == ([["title", "x"]], "x")


def test_a_note_of_commands_only_is_not_saved_and_answers_202(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    _, project, mr = bot_mr
    response = requests.post(
        f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes",
        json={"body": "/close\n"},
        headers={"PRIVATE-TOKEN": GITLAB_TOKEN},
        timeout=5,
    )
    assert (response.status_code, response.json()) == (
        202,
        {"commands_changes": {"close": True}, "summary": ["close"]},
    )
    assert (gitlab_server.notes(project, 1), mr.state) == ([], "closed")


def test_quick_actions_in_an_edit_are_executed_too(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, project, mr = bot_mr
    note = _notes_api(gl).create({"body": "first"})
    note.body = "second\n/lock"
    note.save()
    assert [n.body for n in gitlab_server.notes(project, 1)] == ["second"]
    assert mr.executed_commands == [["lock"]]


def test_a_fault_after_the_write_still_executes_it(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, project, _ = bot_mr
    gitlab_server.inject(502, method="POST", path="/notes$", after=True)
    with pytest.raises(gitlab.GitlabCreateError) as caught:
        _notes_api(gl).create({"body": "once"})
    assert caught.value.response_code == 502
    assert [n.body for n in gitlab_server.notes(project, 1)] == ["once"]
    assert [r.status for r in gitlab_server.matching("POST", "/notes$")] == [502]


def test_a_dropped_connection_after_the_write_still_executes_it(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, project, _ = bot_mr
    gitlab_server.inject(DROP, method="POST", path="/notes$", after=True)
    with pytest.raises(requests.ConnectionError):
        _notes_api(gl).create({"body": "once"})
    assert [n.body for n in gitlab_server.notes(project, 1)] == ["once"]


def test_a_fault_before_the_write_does_not_execute_it(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, project, _ = bot_mr
    gitlab_server.inject(503, method="POST", path="/notes$")
    with pytest.raises(gitlab.GitlabCreateError):
        _notes_api(gl).create({"body": "never"})
    assert gitlab_server.notes(project, 1) == []


def test_a_maintainer_may_edit_anyones_note(
    gitlab_server: FakeGitLab, bot_mr: tuple[gitlab.Gitlab, FakeProject, FakeMergeRequest]
) -> None:
    gl, project, mr = bot_mr
    theirs = gitlab_server.add_note(mr, "mine", gitlab_server.add_user("someone"))
    gitlab_server.add_maintainer(project, gitlab_server.users()[0])
    note = _notes_api(gl).get(theirs.id)
    note.body = "edited by a maintainer"
    note.save()
    assert theirs.body == "edited by a maintainer"


def test_artifacts_by_ref_come_from_the_latest_successful_pipeline_only(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    url = f"{gitlab_server.url}/api/v4/projects/g%2Fp/jobs/artifacts/main/raw/m.json"

    def get() -> tuple[int, bytes]:
        r = requests.get(
            url, params={"job": "train"}, headers={"PRIVATE-TOKEN": GITLAB_TOKEN}, timeout=5
        )
        return r.status_code, r.content

    gitlab_server.add_pipeline(project, "main", jobs={"train": {"m.json": b"old"}})
    assert get() == (200, b"old")
    gitlab_server.add_pipeline(project, "main", status="failed", jobs={"train": {"m.json": b"red"}})
    assert get() == (200, b"old")
    gitlab_server.add_pipeline(project, "other", jobs={"train": {"m.json": b"elsewhere"}})
    assert get() == (200, b"old")
    gitlab_server.add_pipeline(project, "main", source="schedule", jobs={"docs": {}})
    assert get() == (404, b'{"message": "404 Not Found"}')


def test_pipelines_and_their_jobs_are_listed_newest_first(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    old = gitlab_server.add_pipeline(project, "main", jobs={"train": {"m.json": b"1"}})
    gitlab_server.add_pipeline(project, "main", status="failed")
    new = gitlab_server.add_pipeline(project, "main", jobs={"lint": {}, "train": {}})
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    api = gl.projects.get("g/p", lazy=True)
    green = api.pipelines.list(ref="main", status="success", get_all=True)
    assert [p.id for p in green] == [new.id, old.id]
    jobs = api.pipelines.get(old.id, lazy=True).jobs.list(scope=["success"], get_all=True)
    assert [(j.name, len(j.artifacts)) for j in jobs] == [("train", 1)]
    raw = api.jobs.get(jobs[0].id, lazy=True).artifact("m.json")
    assert raw == b"1"


def test_link_headers_use_the_external_url() -> None:
    with FakeGitLab(external_url="https://gitlab.example.com/") as fake:
        fake.add_token(GITLAB_TOKEN, fake.add_user("bot"))
        mr = fake.add_merge_request(fake.add_project("g/p"), 1, sha="a" * 40)
        for i in range(3):
            fake.add_note(mr, f"n{i}", fake.users()[0])
        response = requests.get(
            f"{fake.url}/api/v4/projects/g%2Fp/merge_requests/1/notes?per_page=1",
            headers={"PRIVATE-TOKEN": GITLAB_TOKEN},
            timeout=5,
        )
    assert response.links["next"]["url"] == (
        "https://gitlab.example.com/api/v4/projects/g%2Fp/merge_requests/1/notes?per_page=1&page=2"
    )


def test_a_fork_merge_request_lives_in_the_target_project(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    upstream = gitlab_server.add_project("team/ml", project_id=42)
    fork = gitlab_server.add_project("alice/ml", project_id=43, forked_from=upstream)
    gitlab_server.add_merge_request(upstream, 7, sha="b" * 40, source_project=fork)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    mr = gl.projects.get(42, lazy=True).mergerequests.get(7)
    assert (mr.project_id, mr.source_project_id, mr.target_project_id) == (42, 43, 42)
    assert gl.projects.get(43).forked_from_project["id"] == 42
    with pytest.raises(gitlab.GitlabGetError):
        gl.projects.get(43, lazy=True).mergerequests.get(7)
    related = gl.projects.get(42, lazy=True).commits.get("b" * 40, lazy=True).merge_requests()
    assert [m["iid"] for m in related] == [7]


def test_commit_discussions_are_created_listed_and_edited(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    gitlab_server.add_commit(project, "c" * 40)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    commit = gl.projects.get("g/p", lazy=True).commits.get("c" * 40, lazy=True)
    created = commit.discussions.create({"body": "first\n"})
    [listed] = commit.discussions.list(get_all=True)
    assert listed.id == created.id and len(created.id) == 40
    note = listed.notes.get(listed.attributes["notes"][0]["id"], lazy=True)
    note.body = "second\r\n/tag v1"
    note.save()
    [thread] = project.discussions
    assert [n.body for n in thread.notes] == ["second"]
    assert project.commit_commands == [["tag", "v1"]]


def test_a_commit_thread_is_replied_to_and_the_reply_notifies(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    gitlab_server.add_commit(project, "c" * 40)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    commit = gl.projects.get("g/p", lazy=True).commits.get("c" * 40, lazy=True)
    created = commit.discussions.create({"body": "report"})
    reply = commit.discussions.get(created.id, lazy=True).notes.create({"body": "done\n/tag x"})
    [thread] = project.discussions
    assert [(n.id, n.body, n.type) for n in thread.notes] == [
        (thread.notes[0].id, "report", "DiscussionNote"),
        (reply.id, "done", "DiscussionNote"),
    ]
    assert project.commit_commands == [["tag", "x"]]
    assert [(e.action, e.noteable, e.note_id) for e in gitlab_server.notifications()] == [
        ("created", "c" * 40, thread.notes[0].id),
        ("created", "c" * 40, reply.id),
    ]
    missing = requests.post(
        f"{gitlab_server.url}/api/v4/projects/g%2Fp/repository/commits/{'c' * 40}/discussions/"
        f"{'0' * 40}/notes",
        json={"body": "x"},
        headers={"PRIVATE-TOKEN": GITLAB_TOKEN},
        timeout=5,
    )
    assert (missing.status_code, missing.json()) == (404, {"message": "404 Discussion Not Found"})


def test_a_reply_to_an_mr_note_makes_it_a_thread_and_only_creates_notify(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    gitlab_server.add_merge_request(project, 1, sha="a" * 40)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=GITLAB_TOKEN)
    mr = gl.projects.get("g/p", lazy=True).mergerequests.get(1, lazy=True)
    first = mr.notes.create({"body": "report"})
    other = mr.notes.create({"body": "another"})
    [individual, _] = mr.discussions.list(get_all=True)
    assert individual.attributes["individual_note"] is True
    assert [n["id"] for n in individual.attributes["notes"]] == [first.id]

    reply = mr.discussions.get(individual.id, lazy=True).notes.create({"body": "done"})
    first.body = "report, edited"
    first.save()

    thread = mr.discussions.get(individual.id)
    assert thread.attributes["individual_note"] is False
    # a merge request's thread is resolvable and unresolved ("all threads must be resolved")
    assert [(n["resolvable"], n["resolved"]) for n in thread.attributes["notes"]] == [
        (True, False),
        (True, False),
    ]
    assert mr.notes.get(other.id).resolvable is False  # an individual note is not
    assert [(n["id"], n["type"], n["body"]) for n in thread.attributes["notes"]] == [
        (first.id, "DiscussionNote", "report, edited"),
        (reply.id, "DiscussionNote", "done"),
    ]
    assert [n.id for n in mr.notes.list(get_all=True, sort="asc")] == [first.id, other.id, reply.id]
    events = [(e.action, e.note_id, e.notifies) for e in gitlab_server.note_events]
    assert events == [
        ("created", first.id, True),
        ("created", other.id, True),
        ("created", reply.id, True),
        ("updated", first.id, False),
    ]
    with pytest.raises(gitlab.GitlabCreateError) as missing:
        mr.discussions.get("0" * 40, lazy=True).notes.create({"body": "x"})
    assert missing.value.response_code == 404


def test_the_command_line_serves_the_state_until_sigterm(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps(
            {
                "users": [{"id": 1, "username": "ci-runner-bot", "token": GITLAB_TOKEN}],
                "projects": [
                    {"id": 42, "path": "team/simple_ml"},
                    {"id": 43, "path": "alice/simple_ml", "forked_from": 42},
                ],
                "merge_requests": [
                    {
                        "project_id": 42,
                        "iid": 7,
                        "source_project_id": 43,
                        "source_branch": "x",
                        "target_branch": "main",
                        "sha": "d" * 40,
                        "state": "opened",
                    }
                ],
            }
        )
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "testing.fake_gitlab", "--state", str(state)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert re.fullmatch(r"ready http://127\.0\.0\.1:\d+\n", line)
        gl = gitlab.Gitlab(line.split()[1], private_token=GITLAB_TOKEN)
        notes = gl.projects.get(42, lazy=True).mergerequests.get(7, lazy=True).notes
        notes.create({"body": "hello\n"})
        assert [(n.body, n.author["username"]) for n in notes.list()] == [
            ("hello", "ci-runner-bot")
        ]
        assert gl.projects.get(43).forked_from_project["id"] == 42
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0


def test_the_command_line_refuses_a_bad_state_in_one_line(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text('{"projects": [{"path": "no/id"}]}')
    done = subprocess.run(
        [sys.executable, "-m", "testing.fake_gitlab", "--state", str(state)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"fake_gitlab: cannot read the state {state}: KeyError: 'id'\n"


def test_notes_over_the_rate_limit_get_gitlabs_429(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    gitlab_server.add_merge_request(project, 1, sha="a" * 40)
    gitlab_server.notes_create_limit = 1
    url = f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes"
    headers = {"PRIVATE-TOKEN": GITLAB_TOKEN}

    first = requests.post(url, json={"body": "one"}, headers=headers, timeout=5)
    second = requests.post(url, json={"body": "two"}, headers=headers, timeout=5)

    assert first.status_code == 201
    assert second.status_code == 429
    assert second.json() == {
        "message": {"error": "This endpoint has been requested too many times. Try again later."}
    }
    assert "Retry-After" not in second.headers
    assert [n.body for n in gitlab_server.notes(project, 1)] == ["one"]


def test_a_private_project_the_token_cannot_see_is_404_not_403(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/secret")
    project.private = True
    headers = {"PRIVATE-TOKEN": GITLAB_TOKEN}
    url = f"{gitlab_server.url}/api/v4/projects/g%2Fsecret"

    hidden = requests.get(url, headers=headers, timeout=5)
    assert (hidden.status_code, hidden.json()) == (404, {"message": "404 Project Not Found"})
    notes = requests.get(f"{url}/merge_requests/1/notes", headers=headers, timeout=5)
    assert (notes.status_code, notes.json()) == (404, {"message": "404 Project Not Found"})

    project.members.add(gitlab_bot.id)
    assert requests.get(url, headers=headers, timeout=5).status_code == 200


def test_a_note_edit_over_the_limit_gets_gitlabs_exact_400(
    gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    project = gitlab_server.add_project("g/p")
    mr = gitlab_server.add_merge_request(project, 1, sha="a" * 40)
    note = gitlab_server.add_note(mr, "report", gitlab_bot)
    url = f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes/{note.id}"

    response = requests.put(
        url, json={"body": "x" * 1_000_001}, headers={"PRIVATE-TOKEN": GITLAB_TOKEN}, timeout=10
    )

    # API::Helpers::NotesHelpers#update_note: bad_request!("Failed to save note #{errors}")
    assert response.status_code == 400
    assert response.json() == {
        "message": "400 Bad request - Failed to save note "
        '{:note=>["is too long (maximum is 1000000 characters)"]}'
    }
    assert [n.body for n in gitlab_server.notes(project, 1)] == ["report"]
