from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from ci_runner.errors import GitError
from ci_runner.gitrepo import (
    blob_size,
    checkout_commit,
    file_exists_at,
    is_dirty,
    read_blob,
    read_file_at,
    repo_root,
    resolve_commit,
    tree_entry,
)

Commit = Callable[[dict[str, str]], tuple[Path, str]]


def test_read_file_at_the_commit_not_the_work_tree(git_repo: Commit) -> None:
    repo, first = git_repo({"train.yaml": "name: one\n"})
    _, second = git_repo({"train.yaml": "name: two\n"})
    (repo / "train.yaml").write_text("name: dirty\n")
    assert read_file_at(first, "train.yaml", repo) == "name: one\n"
    assert read_file_at(second, "train.yaml", repo) == "name: two\n"
    assert is_dirty(repo)


def test_resolve_commit_gives_full_sha(git_repo: Commit) -> None:
    repo, sha = git_repo({"a": "1"})
    assert resolve_commit("HEAD", repo) == sha
    assert resolve_commit(sha[:10], repo) == sha
    assert len(sha) == 40


def test_unknown_revision_is_one_clear_line(git_repo: Commit) -> None:
    repo, _ = git_repo({"a": "1"})
    with pytest.raises(GitError) as err:
        resolve_commit("no-such-branch", repo)
    assert str(err.value) == (
        f"no commit 'no-such-branch' in {repo}; fix: pass --sha with a commit that exists here "
        "(git fetch it first if it was pushed from elsewhere)"
    )


def test_missing_file_at_commit(git_repo: Commit) -> None:
    repo, sha = git_repo({"a": "1"})
    with pytest.raises(GitError) as err:
        read_file_at(sha, "train.yaml", repo)
    assert str(err.value) == (
        f"train.yaml does not exist in commit {sha[:8]}; fix: commit it, or pass --config with "
        "its path relative to the repository root"
    )
    assert file_exists_at(sha, "a", repo)
    assert not file_exists_at(sha, "train.yaml", repo)


def test_a_blobs_size_is_its_length_and_a_missing_one_is_a_git_error(git_repo: Commit) -> None:
    repo, sha = git_repo({"data.txt": "x" * 5000})
    entry = tree_entry(sha, "data.txt", repo)
    assert entry is not None
    assert blob_size(entry.oid, repo) == len(read_blob(entry.oid, repo)) == 5000
    with pytest.raises(GitError, match=r"^fatal: git cat-file: could not get object info$"):
        blob_size("0" * 40, repo)


def test_not_a_repository(tmp_path: Path) -> None:
    with pytest.raises(GitError) as err:
        repo_root(tmp_path)
    assert str(err.value) == (
        f"{tmp_path} is not inside a git repository; "
        "fix: run ci-runner from your project's checkout"
    )


def test_no_git_is_said_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GitError) as err:
        repo_root(tmp_path)
    assert str(err.value) == "git is not installed; fix: install git and run again"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the repository to another user needs root")
def test_a_checkout_of_another_user_is_said_as_such(git_repo: Commit) -> None:
    repo, _ = git_repo({"a": "1"})
    os.chown(repo, 12345, 12345)  # as a CI runner's clone, owned by root, seen by the job's user
    with pytest.raises(GitError) as err:
        repo_root(repo)
    assert str(err.value) == (
        f"git refuses {repo}: it belongs to another user (dubious ownership); fix: "
        "git config --global --add safe.directory '*' (in an image: --system)"
    )


def test_checkout_commit_pins_the_sha_and_is_reused(git_repo: Commit, tmp_path: Path) -> None:
    repo, first = git_repo({"code.py": "v1\n"})
    _, second = git_repo({"code.py": "v2\n"})
    dest = tmp_path / "cache" / "work"
    checkout_commit(repo, first, dest)
    assert (dest / "code.py").read_text() == "v1\n"
    (dest / "stray.txt").write_text("left over")
    checkout_commit(repo, first, dest)
    assert not (dest / "stray.txt").exists()
    checkout_commit(repo, second, dest)
    assert (dest / "code.py").read_text() == "v2\n"
