"""Fixtures shared by every test module."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Upstream and seed files the tests read, vendored with their source and licence (README.md).
TEST_DATA = REPO_ROOT / "tests" / "data"
SEED_LOG = TEST_DATA / "seed" / "horovod-on-kubernetes.log"

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
}


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
