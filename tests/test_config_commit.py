"""ci_runner.config.commit: train.yaml and its requirements read from a commit, each file's size
checked before the file is read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ci_runner.config import commit
from ci_runner.config.commit import (
    MAX_REQUIREMENTS_BYTES,
    MAX_REQUIREMENTS_FILES,
    load_train_config,
)
from ci_runner.config.yamlsource import MAX_BYTES
from ci_runner.errors import ConfigError, GitError
from ci_runner.gitrepo import read_blob

GitRepo = Callable[[dict[str, str]], tuple[Path, str]]
TRAIN_YAML = "name: job\nimage: img\ncommand: python train.py\nrequirements: requirements.txt\n"
FIX = (
    "fix: keep requirements files to package names and versions (a wheel or data does not belong "
    "in them)"
)


@pytest.fixture
def blobs_read(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every blob read from git."""
    read: list[int] = []

    def counted(oid: str, cwd: Path) -> bytes:
        data = read_blob(oid, cwd)
        read.append(len(data))
        return data

    monkeypatch.setattr(commit, "read_blob", counted)
    return read


def _refusal(repo: Path, sha: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_train_config(sha, "train.yaml", repo)
    return caught.value.lines()


def test_the_limits() -> None:
    assert (MAX_BYTES, MAX_REQUIREMENTS_BYTES, MAX_REQUIREMENTS_FILES) == (2**20, 2**20, 32)


def test_a_train_yaml_too_large_is_refused_before_it_is_read(
    git_repo: GitRepo, blobs_read: list[int]
) -> None:
    repo, sha = git_repo({"train.yaml": "a: " + "x" * MAX_BYTES + "\n"})
    with pytest.raises(GitError) as caught:
        load_train_config(sha, "train.yaml", repo)
    assert str(caught.value) == (
        f"train.yaml is {MAX_BYTES + 4} bytes in commit {sha[:8]}, more than the {MAX_BYTES} "
        "bytes a train.yaml may have; fix: keep train.yaml small: it describes one training job"
    )
    assert blobs_read == []


def test_a_train_yaml_too_large_in_the_working_tree_is_refused_before_it_is_read(
    git_repo: GitRepo,
) -> None:
    repo, sha = git_repo({"train.yaml": TRAIN_YAML})
    (repo / "train.yaml").write_text("a: " + "x" * MAX_BYTES + "\n")
    with pytest.raises(GitError) as caught:
        load_train_config(sha, "train.yaml", repo, working_tree=True)
    assert str(caught.value) == (
        f"train.yaml is {MAX_BYTES + 4} bytes in the working tree, more than the {MAX_BYTES} "
        "bytes a train.yaml may have; fix: keep train.yaml small: it describes one training job"
    )


def test_a_requirements_file_too_large_is_refused_before_it_is_read(
    git_repo: GitRepo, blobs_read: list[int]
) -> None:
    requirements = "numpy\n" * (MAX_REQUIREMENTS_BYTES // 6 + 1)
    repo, sha = git_repo({"train.yaml": TRAIN_YAML, "requirements.txt": requirements})
    assert _refusal(repo, sha) == [
        f"train.yaml:4: requirements: requirements.txt is {len(requirements)} bytes in commit "
        f"{sha[:8]}, more than the {MAX_REQUIREMENTS_BYTES} bytes requirements files may have "
        f"together (this one and those it includes); {FIX}"
    ]
    assert blobs_read == [len(TRAIN_YAML)]


def test_an_included_file_counts_with_those_before_it(
    git_repo: GitRepo, blobs_read: list[int]
) -> None:
    top = "-r reqs/base.txt\n-c constraints.txt\n"
    base = "numpy\n"
    constraints = "#" * (MAX_REQUIREMENTS_BYTES - len(top) - len(base) + 1)
    repo, sha = git_repo(
        {
            "train.yaml": TRAIN_YAML,
            "requirements.txt": top,
            "reqs/base.txt": base,
            "constraints.txt": constraints,
        }
    )
    left = MAX_REQUIREMENTS_BYTES - len(top) - len(base)
    assert _refusal(repo, sha) == [
        f"train.yaml:4: requirements: constraints.txt (included by requirements.txt) is "
        f"{left + 1} bytes in commit {sha[:8]}, more than the {left} bytes left of the "
        f"{MAX_REQUIREMENTS_BYTES} requirements files may have together; {FIX}"
    ]
    assert blobs_read == [len(TRAIN_YAML), len(top), len(base)]


def test_more_files_than_pip_needs_are_refused(git_repo: GitRepo) -> None:
    names = [f"r{i}.txt" for i in range(MAX_REQUIREMENTS_FILES)]
    files = {name: "numpy\n" for name in names}
    requirements = "".join(f"-r {name}\n" for name in names)  # missing ones count too
    repo, sha = git_repo({"train.yaml": TRAIN_YAML, "requirements.txt": requirements, **files})
    assert _refusal(repo, sha) == [
        f"train.yaml:4: requirements: requirements.txt and the files it includes (-r, -c) are more "
        f"than {MAX_REQUIREMENTS_FILES} files in commit {sha[:8]}; fix: merge them into fewer files"
    ]


def test_included_files_the_commit_lacks_are_left_to_pip(
    git_repo: GitRepo, blobs_read: list[int]
) -> None:
    requirements = (
        "-r missing.txt\n-c /etc/pip/constraints.txt\n-r ../outside.txt\n-r reqs\n-r\n"
        "-r ok.txt\n-r ./requirements.txt\nnumpy\n"
    )
    repo, sha = git_repo(
        {
            "train.yaml": TRAIN_YAML,
            "requirements.txt": requirements,
            "reqs/x.txt": "",
            "ok.txt": "pandas\n",
        }
    )
    assert load_train_config(sha, "train.yaml", repo).requirements == "requirements.txt"
    assert blobs_read == [len(TRAIN_YAML), len(requirements), len("pandas\n")]
