"""Fixtures shared by every test module."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from gitlab.v4.objects import Project

from ci_runner.backends.local.pyenv import BaseEnvironment, current_environment
from ci_runner.clock import ManualClock
from ci_runner.gitlab.client import connect_gitlab, open_project
from ci_runner.gitlab.transport import BoundedSession
from testing.fake_gitlab.accounts import GITLAB_BOT, GITLAB_PROJECT, GITLAB_SHA, GITLAB_TOKEN
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.model import User
from testing.fake_gitlab.retry_waits import manual_session, record_retry_sleeps
from testing.fake_gitlab.server import FakeGitLab
from testing.git import run_git
from testing.golden import UPDATE_OPTION, Golden
from testing.paths import EXAMPLE, FAKE_HOROVODRUN, GOLDEN_DIR, REPO_ROOT
from testing.rights import missing_rights, verdict

EMULATED_CLUSTER_MODULES = "tests.test_emulated_cluster_"

if TYPE_CHECKING:
    from testing.backend_harness import Cluster as ScriptedTestCluster
    from testing.mr_pipeline import Pipeline
    from testing.scripted_cluster.cluster import ScriptedCluster


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        UPDATE_OPTION,
        action="store_true",
        help="rewrite the golden files in tests/golden/ that differ, after printing each diff",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests of tests/test_emulated_cluster_* start the emulated cluster: mark them."""
    for item in items:
        module = getattr(item, "module", None)
        name = getattr(module, "__name__", "")
        if name.startswith(EMULATED_CLUSTER_MODULES) and item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.emulated_cluster)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """An emulated-cluster test without root, netns or cgroups skips, saying which it lacks,
    or fails where ``CI_RUNNER_REQUIRE_CLUSTER_RIGHTS=1`` (.ci/run, the e2e job) requires them."""
    if item.get_closest_marker("emulated_cluster") is None:
        return
    outcome = verdict(missing_rights(), os.environ)
    if outcome is not None:
        action, reason = outcome
        (pytest.fail if action == "fail" else pytest.skip)(reason)


@pytest.fixture
def golden(request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]) -> Golden:
    """``golden.check(name, text)``: ``text`` must equal tests/golden/<name> (see golden_files)."""

    def show(text: str) -> None:
        with capsys.disabled():
            sys.stdout.write("\n" + text)

    return Golden(GOLDEN_DIR, bool(request.config.getoption(UPDATE_OPTION)), show)


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


@pytest.fixture(scope="module")
def base() -> BaseEnvironment:
    """The environment running ci-runner: what a ``--local`` run's virtualenvs stand on."""
    return current_environment()


@pytest.fixture
def horovodrun(tmp_path: Path) -> Path:
    """An executable ``horovodrun`` that runs testing/fake_horovodrun.py with this interpreter."""
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
def no_retry_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """python-gitlab's own retry waits, recorded instead of slept (for modules that use it
    on every test: ``pytestmark = pytest.mark.usefixtures("no_retry_sleeps")``)."""
    return record_retry_sleeps(monkeypatch)


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
        connect_gitlab(gitlab_server.url, GITLAB_TOKEN, session=gitlab_session), GITLAB_PROJECT
    )


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


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedCluster]:
    """The scripted cluster of a test module (testing/scripted_cluster/: the real control plane;
    skips without root or its binaries); ``cluster_on(scripted, tmp_path)`` gives a test its
    namespace."""
    from testing.scripted_cluster.cluster import module_cluster

    yield from module_cluster(tmp_path_factory.mktemp("scripted-logs"))


@pytest.fixture
def pipeline(
    tmp_path: Path,
    git_repo: Callable[[dict[str, str]], tuple[Path, str]],
    scripted: ScriptedCluster,
) -> Iterator[Pipeline]:
    """An MR pipeline's CI job for ``ci-runner train`` on a repository holding
    testing/mr_pipeline.py's train.yaml, its GitLab, S3 and a namespace of the module's scripted
    cluster running."""
    # Imported here: moto and boto3 take half a second, and most test runs need neither.
    from testing.backend_harness import cluster_on
    from testing.mr_pipeline import mr_pipeline, train_yaml

    with cluster_on(scripted, tmp_path) as cluster:
        files = {"train.yaml": train_yaml(cluster.namespace), "train.py": "print('hi')\n"}
        repo, sha = git_repo(files)
        with mr_pipeline(tmp_path, repo, sha, cluster) as running:
            yield running


@pytest.fixture
def cluster(scripted: ScriptedCluster, tmp_path: Path) -> Iterator[ScriptedTestCluster]:
    """One test's namespace of the module's scripted cluster."""
    from testing.backend_harness import cluster_on

    with cluster_on(scripted, tmp_path) as cluster:
        yield cluster
