"""gitlab-ci-local, which runs the CI files as GitLab evaluates them (installed by `make
gitlab-ci-local`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testing.git import run_git
from testing.paths import REPO_ROOT

GCL_VERSION = "4.65.1"


def gitlab_ci_local() -> Path:
    """The gitlab-ci-local `make test` installs (``GITLAB_CI_LOCAL`` overrides the path)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = Path(
        os.environ.get("GITLAB_CI_LOCAL")
        or cache / "ci-runner" / "npm" / "node_modules" / ".bin" / "gitlab-ci-local"
    )
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"gitlab-ci-local {GCL_VERSION} is not installed at {path}: make test installs it"
            )
        pytest.skip(
            f"gitlab-ci-local {GCL_VERSION} is not installed at {path} (make test installs it)"
        )
    return path


def run_gitlab_ci_local(
    project: Path,
    args: list[str],
    variables: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> str:
    """gitlab-ci-local ``args`` in ``project`` with pipeline ``variables`` (its own values of
    predefined ones ignored); its stdout, after checking it succeeded."""
    command = [str(gitlab_ci_local()), *args]
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
