"""train.yaml as it is in a commit: the file named on the command line, read with ``git show``."""

from __future__ import annotations

from pathlib import Path

from ci_runner.config.schema import load_config
from ci_runner.config.types import TrainConfig
from ci_runner.errors import ConfigError, GitError, Problem
from ci_runner.gitrepo import file_exists_at, read_bytes_at, resolve_commit


def path_in_repo(config_arg: str, cwd: Path, root: Path) -> str:
    """``--config`` (relative to ``cwd``, or absolute) as a path relative to the repository root."""
    absolute = (cwd / config_arg).resolve()
    try:
        return absolute.relative_to(root.resolve()).as_posix()
    except ValueError as error:
        raise GitError(
            f"--config {config_arg} is outside the repository {root}; fix: pass the path of a "
            "train.yaml inside the repository"
        ) from error


def load_train_config(
    sha: str, path: str, root: Path, *, working_tree: bool = False
) -> TrainConfig:
    """The validated train.yaml at ``path`` in commit ``sha`` (with ``working_tree``: in the
    working tree, the code that will actually run); its requirements file must exist there."""
    if working_tree:
        config = load_config((root / path).read_bytes(), path)
        where, fix = "the working tree", "create it"
    else:
        resolve_commit(sha, root)  # a commit missing from this clone is not a missing file
        if not file_exists_at(sha, path, root):
            raise GitError(
                f"{path} does not exist in commit {sha[:8]}; fix: commit it, or pass --config "
                "with the path of your train.yaml"
            )
        config = load_config(read_bytes_at(sha, path, root), path)
        where, fix = f"commit {sha[:8]}", "commit it"
    requirements = config.requirements
    if not requirements:
        return config
    found = (
        (root / requirements).is_file() if working_tree else file_exists_at(sha, requirements, root)
    )
    if not found:
        raise ConfigError(
            [
                Problem(
                    path,
                    "requirements",
                    None,
                    f"{requirements} does not exist in {where}",
                    f"{fix}, or give its path relative to the repository root",
                )
            ]
        )
    return config
