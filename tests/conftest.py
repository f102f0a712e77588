"""Fixtures shared by every test module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gitlab.v4.objects import Project

from ci_runner.clock import ManualClock
from ci_runner.gitlab.client import connect, open_project
from ci_runner.gitlab.transport import BoundedSession
from tests.gitlab_server import FakeGitLab, User, manual_session, record_retry_sleeps
from tests.gitlab_server import Project as FakeProject
from tests.golden_files import GOLDEN_DIR, UPDATE_OPTION, Golden

REPO_ROOT = Path(__file__).resolve().parent.parent
# Upstream and seed files the tests read, vendored with their source and licence (README.md).
TEST_DATA = REPO_ROOT / "tests" / "data"
SEED_LOG = TEST_DATA / "seed" / "horovod-on-kubernetes.log"
FAKE_HOROVODRUN = REPO_ROOT / "tests" / "fake_horovodrun.py"

# The fake GitLab's bot: its token must never show up in an error message.
GITLAB_TOKEN = "glpat-CANARY-9f2c71d4e8"
GITLAB_BOT = "project_42_bot"
GITLAB_PROJECT = "group/proj"
# The commit the pipeline runs on, known to the fake GitLab's project.
GITLAB_SHA = "3f786850e387550fdab836ed7e6dc881de23001b"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        UPDATE_OPTION,
        action="store_true",
        help="rewrite the golden files in tests/golden/ that differ, after printing each diff",
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Golden:
    """``golden.check(name, text)``: ``text`` must equal tests/golden/<name> (see golden_files)."""

    def show(text: str) -> None:
        with capsys.disabled():
            sys.stdout.write("\n" + text)

    return Golden(GOLDEN_DIR, bool(request.config.getoption(UPDATE_OPTION)), show)


def run_git(args: list[str], cwd: Path) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(cwd)}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def git_repo(tmp_path: Path) -> Callable[[dict[str, str]], tuple[Path, str]]:
    """A git repository in tmp_path/repo; each call commits the given files, returns the SHA."""
    repo = tmp_path / "repo"
    repo.mkdir()
    run_git(["init", "-q", "-b", "main"], repo)

    def commit(files: dict[str, str], message: str = "commit") -> tuple[Path, str]:
        for name, text in files.items():
            target = repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        run_git(["add", "-A"], repo)
        run_git(["commit", "-q", "-m", message], repo)
        return repo, run_git(["rev-parse", "HEAD"], repo)

    return commit


@pytest.fixture
def horovodrun(tmp_path: Path) -> Path:
    """An executable ``horovodrun`` that runs tests/fake_horovodrun.py with this interpreter."""
    path = tmp_path / "bin" / "horovodrun"
    path.parent.mkdir()
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_HOROVODRUN}" "$@"\n')
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_horovodrun(horovodrun: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """:func:`horovodrun`, the one ``ci-runner train --local`` finds."""
    from ci_runner.commands import train

    monkeypatch.setattr(train, "find_horovodrun", lambda python, env: horovodrun)
    return horovodrun


@pytest.fixture
def gitlab_clock() -> ManualClock:
    """The clock of ci-runner's GitLab session: its retry waits land in ``.sleeps``."""
    return ManualClock()


@pytest.fixture
def gitlab_session(gitlab_clock: ManualClock) -> BoundedSession:
    """ci-runner's GitLab session (20 s budget) on :func:`gitlab_clock`."""
    return manual_session(gitlab_clock)


@pytest.fixture
def gitlab_sleeps(
    gitlab_clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[float]]:
    """The waits ci-runner's GitLab retries asked for, recorded instead of slept; python-gitlab's
    own retrying is off, so it never sleeps (checked at the end)."""
    own = record_retry_sleeps(monkeypatch)
    yield gitlab_clock.sleeps
    assert own == []


@pytest.fixture
def gitlab_server(gitlab_sleeps: list[float]) -> Iterator[FakeGitLab]:
    """An empty fake GitLab on loopback."""
    with FakeGitLab() as server:
        yield server


@pytest.fixture
def gitlab_bot(gitlab_server: FakeGitLab) -> User:
    """The user ``project_42_bot``, whose token is ``GITLAB_TOKEN``."""
    user = gitlab_server.add_user(GITLAB_BOT)
    gitlab_server.add_token(GITLAB_TOKEN, user)
    return user


@pytest.fixture
def gitlab_fake_project(gitlab_server: FakeGitLab) -> FakeProject:
    """The project ``group/proj`` as the fake GitLab holds it, with the commit ``GITLAB_SHA``."""
    project = gitlab_server.add_project(GITLAB_PROJECT)
    gitlab_server.add_commit(project, GITLAB_SHA)
    return project


@pytest.fixture
def gitlab_project(
    gitlab_server: FakeGitLab,
    gitlab_bot: User,
    gitlab_fake_project: FakeProject,
    gitlab_session: BoundedSession,
) -> Project:
    """``group/proj`` opened with python-gitlab as the bot, as ci-runner opens it."""
    return open_project(
        connect(gitlab_server.url, GITLAB_TOKEN, session=gitlab_session), GITLAB_PROJECT
    )


EXAMPLE = "examples/simple_ml"


@pytest.fixture
def example_project(tmp_path: Path) -> Path:
    """A fresh repository with the example committed, as a user's project would hold it."""
    repo = tmp_path / "project"
    shutil.copytree(
        REPO_ROOT / EXAMPLE, repo / EXAMPLE, ignore=shutil.ignore_patterns("__pycache__")
    )
    run_git(["init", "-q", "-b", "main"], repo)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "simple_ml example"], repo)
    return repo
