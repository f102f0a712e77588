"""gitlab-ci-local, which runs the CI files as GitLab evaluates them (installed by `make
gitlab-ci-local`), and the ci-runner project as another project includes it from a GitLab."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from testing.git import run_git
from testing.git_http import git_http
from testing.paths import REPO_ROOT, cache_dir

GCL_VERSION = "4.75.1"  # scripts/setup-gitlab-ci-local.sh installs this version
NODE_VERSION = "22.23.5"  # and runs it on this Node.js, from npm


def gitlab_ci_local() -> list[str]:
    """The command that runs the gitlab-ci-local `make gitlab-ci-local` installs, on the Node.js
    installed beside it (``GITLAB_CI_LOCAL`` names another executable instead)."""
    if os.environ.get("GITLAB_CI_LOCAL"):
        return [os.environ["GITLAB_CI_LOCAL"]]
    prefix = cache_dir() / f"gitlab-ci-local-{GCL_VERSION}" / "node_modules"
    arch = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    node = prefix / f"node-linux-{arch}" / "bin" / "node"
    script = prefix / "gitlab-ci-local" / "dist" / "index.js"
    if not (node.exists() and script.exists()):
        missing = f"gitlab-ci-local {GCL_VERSION} on Node.js {NODE_VERSION} is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} in {prefix}: make test installs it")
        pytest.skip(f"{missing} in {prefix} (make gitlab-ci-local installs it)")
    return [str(node), str(script)]


def run_gitlab_ci_local(
    project: Path,
    args: list[str],
    variables: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> str:
    """gitlab-ci-local ``args`` in ``project`` with pipeline ``variables`` (its own values of
    predefined ones ignored); its stdout, after checking it succeeded."""
    command = [*gitlab_ci_local(), *args]
    for name, value in (variables or {}).items():
        command += ["--variable", f"{name}={value}"]
    done = subprocess.run(
        command,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**(env or os.environ), "GCL_IGNORE_PREDEFINED_VARS": ",".join(variables or {})},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def ci_runner_project(tmp_path: Path) -> Path:
    """A copy of this checkout as GitLab would hold it: origin ``group/ci-runner``, so that
    ``component: $CI_SERVER_FQDN/$CI_PROJECT_PATH/train@$CI_COMMIT_SHA`` is this very commit."""
    project = tmp_path / "ci-runner"
    shutil.copytree(
        REPO_ROOT,
        project,
        ignore=shutil.ignore_patterns(".git", ".venv", "*cache*", "node_modules", "out", "dist"),
    )
    run_git(["init", "-q", "-b", "main"], project)
    run_git(["remote", "add", "origin", "git@gitlab.example.com:group/ci-runner.git"], project)
    run_git(["add", "-A"], project)
    run_git(["commit", "-q", "-m", "init"], project)
    return project


RELEASES = ("1.1.0", "1.2.0")  # the ci-runner project's tags, oldest first


@dataclass(frozen=True)
class CiRunnerRemote:
    """The ci-runner project ``group/ci-runner`` at ``host`` (git's HTTP protocol on loopback),
    tagged :data:`RELEASES`; ``sha`` is the commit they tag, holding this checkout's CI files."""

    host: str  # 127.0.0.1:<port>
    sha: str


@contextmanager
def ci_runner_remote(tmp_path: Path) -> Iterator[CiRunnerRemote]:
    """The ci-runner project on a git server, as a GitLab holds it, for gitlab-ci-local to fetch
    ``include: component`` and ``include: project`` from, resolving ``train@~latest`` and
    ``train@1.2`` from its tags as GitLab resolves them from the catalog's versions (semantic
    version ranges, lib/gitlab/ci/components/instance_path.rb). Like GitLab, it serves a commit by
    SHA and partial clones (uploadpack.allowAnySHA1InWant, allowFilter)."""
    work = tmp_path / "ci-runner-source"
    shutil.copytree(REPO_ROOT / "templates", work / "templates")
    run_git(["init", "-q", "-b", "main"], work)
    run_git(["add", "-A"], work)
    run_git(["commit", "-q", "-m", "CI files"], work)
    for tag in RELEASES:
        run_git(["tag", tag], work)
    served = tmp_path / "git"
    (served / "group").mkdir(parents=True)
    bare = served / "group" / "ci-runner.git"
    run_git(["clone", "-q", "--bare", str(work), str(bare)], tmp_path)
    for setting in ("uploadpack.allowAnySHA1InWant", "uploadpack.allowFilter"):
        run_git(["config", setting, "true"], bare)
    with git_http(served) as server:
        host = server.url.removeprefix("http://")
        yield CiRunnerRemote(host, run_git(["rev-parse", "HEAD"], work))
