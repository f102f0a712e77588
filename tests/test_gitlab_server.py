"""The fake GitLab answers like GitLab: pagination headers, auth errors, the note size limit."""

from __future__ import annotations

import gitlab
import pytest
import requests

from tests.gitlab_server import FakeGitLab

TOKEN = "glpat-test"


def test_notes_pagination_headers_and_link(gitlab_server: FakeGitLab) -> None:
    bot = gitlab_server.add_user("bot")
    gitlab_server.add_token(TOKEN, bot)
    mr = gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    notes = [gitlab_server.add_note(mr, f"n{i}", bot) for i in range(5)]

    response = requests.get(
        f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes",
        params={"per_page": "2", "page": "2", "sort": "asc"},
        headers={"PRIVATE-TOKEN": TOKEN},
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


def test_python_gitlab_lists_every_page(gitlab_server: FakeGitLab) -> None:
    bot = gitlab_server.add_user("bot")
    gitlab_server.add_token(TOKEN, bot)
    mr = gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    for i in range(45):
        gitlab_server.add_note(mr, f"n{i}", bot)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=TOKEN)
    notes = gl.projects.get("g/p", lazy=True).mergerequests.get(1, lazy=True).notes
    assert [n.body for n in notes.list(get_all=True)] == [f"n{i}" for i in reversed(range(45))]
    assert gitlab_server.count("GET", "/notes$") == 3  # 20 a page by default


def test_unknown_token_gets_gitlabs_401(gitlab_server: FakeGitLab) -> None:
    response = requests.get(
        f"{gitlab_server.url}/api/v4/user", headers={"PRIVATE-TOKEN": "nope"}, timeout=5
    )
    assert (response.status_code, response.json()) == (401, {"message": "401 Unauthorized"})


def test_read_api_token_may_read_but_not_write(gitlab_server: FakeGitLab) -> None:
    gitlab_server.add_token(TOKEN, gitlab_server.add_user("reader"), scopes=["read_api"])
    gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    url = f"{gitlab_server.url}/api/v4/projects/g%2Fp/merge_requests/1/notes"
    headers = {"PRIVATE-TOKEN": TOKEN}
    assert requests.get(url, headers=headers, timeout=5).status_code == 200
    response = requests.post(url, json={"body": "hi"}, headers=headers, timeout=5)
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"


def test_note_over_the_limit_is_rejected_like_gitlab(gitlab_server: FakeGitLab) -> None:
    bot = gitlab_server.add_user("bot")
    gitlab_server.add_token(TOKEN, bot)
    project = gitlab_server.add_project("g/p")
    gitlab_server.add_merge_request(project, 1, sha="a" * 40)
    gl = gitlab.Gitlab(gitlab_server.url, private_token=TOKEN)
    mr = gl.projects.get("g/p", lazy=True).mergerequests.get(1, lazy=True)

    with pytest.raises(gitlab.GitlabCreateError) as caught:
        mr.notes.create({"body": "x" * 1_000_001})

    assert caught.value.response_code == 400
    assert caught.value.error_message == (
        '400 Bad request - Note {:note=>["is too long (maximum is 1000000 characters)"]}'
    )
    assert mr.notes.create({"body": "x" * 1_000_000}).id > 0


def test_only_the_author_may_edit_a_note(gitlab_server: FakeGitLab) -> None:
    gitlab_server.add_token(TOKEN, gitlab_server.add_user("bot"))
    mr = gitlab_server.add_merge_request(gitlab_server.add_project("g/p"), 1, sha="a" * 40)
    theirs = gitlab_server.add_note(mr, "mine", gitlab_server.add_user("someone"))
    gl = gitlab.Gitlab(gitlab_server.url, private_token=TOKEN)
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
