"""The fake GitLab's PyPI package registry (testing/fake_gitlab/pypi.py): its routes and the
authentication rules GitLab gives them, over real HTTP."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from testing.fake_gitlab.model import Project
from testing.fake_gitlab.server import FakeGitLab

WHEEL = b"PK\x03\x04 not really a wheel"
SHA = hashlib.sha256(WHEEL).hexdigest()
FILE = "ci_runner-1.2.0-py3-none-any.whl"
JOB = ("gitlab-ci-token", "job-token-1")
DEPLOY_READ = ("anyone", "deploy-read")
DEPLOY_WRITE = ("deployer", "deploy-write")


@pytest.fixture
def fake() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        yield server


@pytest.fixture
def project(fake: FakeGitLab) -> Project:
    project = fake.add_project("group/ci-runner", project_id=42)
    other = fake.add_project("group/other", project_id=43)
    bot = fake.add_user("releaser")
    fake.add_maintainer(project, bot)
    fake.add_token("pat-api", bot, ["api"])
    fake.add_token("pat-read", bot, ["read_api"])
    fake.add_token("pat-stranger", fake.add_user("stranger"), ["api"])
    fake.pypi.add_job_token(project, JOB[1], bot)
    fake.pypi.add_deploy_token(
        project, DEPLOY_READ[1], "gitlab+deploy-token-1", ["read_package_registry"]
    )
    fake.pypi.add_deploy_token(
        project,
        DEPLOY_WRITE[1],
        "gitlab+deploy-token-2",
        ["read_package_registry", "write_package_registry"],
    )
    fake.pypi.add_deploy_token(other, "deploy-other", "x", ["read_package_registry"])
    return project


def url(fake: FakeGitLab, project: str | int = 42) -> str:
    return f"{fake.url}/api/v4/projects/{project}/packages/pypi"


def upload(fake: FakeGitLab, project: str | int = 42, **kwargs: Any) -> requests.Response:
    data = {
        ":action": "file_upload",
        "name": "ci-runner",
        "version": "1.2.0",
        "requires_python": ">=3.10",
        "sha256_digest": SHA,
    }
    return requests.post(
        url(fake, project), data=data, files={"content": (FILE, WHEEL)}, timeout=10, **kwargs
    )


def test_the_job_token_uploads_and_the_simple_page_links_the_file(
    fake: FakeGitLab, project: Project
) -> None:
    done = upload(fake, auth=JOB)
    assert (done.status_code, done.json()) == (201, {"message": "201 Created"})
    page = requests.get(f"{url(fake)}/simple/CI_Runner/", auth=DEPLOY_READ, timeout=10)
    assert page.status_code == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    link = (
        f'<a href="{fake.url}/api/v4/projects/42/packages/pypi/files/{SHA}/{FILE}#sha256={SHA}" '
        f'data-requires-python="&gt;=3.10">{FILE}</a>'
    )
    assert page.text == (
        "        <!DOCTYPE html>\n        <html>\n          <head>\n"
        "            <title>Links for ci-runner</title>\n          </head>\n          <body>\n"
        f"            <h1>Links for ci-runner</h1>\n            {link}\n"
        "          </body>\n        </html>\n"
    )
    file = requests.get(f"{url(fake)}/files/{SHA}/{FILE}", auth=DEPLOY_READ, timeout=10)
    assert (file.status_code, file.content) == (200, WHEEL)
    assert [f.file_name for f in fake.pypi.files(project)] == [FILE]


def test_the_same_file_twice_is_refused(fake: FakeGitLab, project: Project) -> None:
    assert upload(fake, auth=JOB).status_code == 201
    again = upload(fake, auth=DEPLOY_WRITE)
    assert (again.status_code, again.json()) == (
        400,
        {"message": "400 Bad request - Validation failed: File name has already been taken"},
    )


def test_a_missing_field_is_grapes_400(fake: FakeGitLab, project: Project) -> None:
    done = requests.post(
        url(fake), data={"version": "1"}, files={"x": ("a", b"")}, auth=JOB, timeout=10
    )
    assert (done.status_code, done.json()) == (
        400,
        {"error": "content is missing, name is missing"},
    )


@pytest.mark.parametrize(
    ("auth", "headers", "status"),
    [
        (None, {}, 401),  # private project, no credentials
        (None, {"JOB-TOKEN": JOB[1]}, 401),  # not read on these routes: basic auth only
        (("someone", JOB[1]), {}, 401),  # a job token under another user name is no PAT
        (("gitlab-ci-token", "expired"), {}, 401),
        (DEPLOY_READ, {}, 403),  # read_package_registry only
        (None, {"Deploy-Token": DEPLOY_WRITE[1]}, 201),
        (("any-name", "pat-api"), {}, 201),  # personal token: the user name is not checked
        (None, {"PRIVATE-TOKEN": "pat-api"}, 201),
        (None, {"PRIVATE-TOKEN": "pat-read"}, 403),  # read_api does not upload
        (("x", "pat-stranger"), {}, 404),  # not a member
        (("y", "deploy-other"), {}, 404),  # another project's deploy token
    ],
)
def test_who_may_upload(
    fake: FakeGitLab,
    project: Project,
    auth: tuple[str, str] | None,
    headers: dict[str, str],
    status: int,
) -> None:
    assert upload(fake, auth=auth, headers=headers).status_code == status


def test_no_credentials_asks_for_basic_auth(fake: FakeGitLab, project: Project) -> None:
    done = requests.get(f"{url(fake)}/simple/ci-runner", timeout=10)
    assert (done.status_code, done.json()) == (401, {"message": "401 Unauthorized"})
    assert done.headers["WWW-Authenticate"] == 'Basic realm="GitLab Packages Registry"'


def test_a_job_token_reaches_its_own_project_only(fake: FakeGitLab, project: Project) -> None:
    assert upload(fake, "group%2Fci-runner", auth=JOB).status_code == 201  # id or path
    assert upload(fake, 43, auth=JOB).status_code == 404


def test_an_unknown_package_or_file_is_404(fake: FakeGitLab, project: Project) -> None:
    page = requests.get(f"{url(fake)}/simple/nothing", auth=DEPLOY_READ, timeout=10)
    assert (page.status_code, page.json()) == (404, {"message": "404 Package Not Found"})
    file = requests.get(f"{url(fake)}/files/{SHA}/{FILE}", auth=DEPLOY_READ, timeout=10)
    assert file.status_code == 404
