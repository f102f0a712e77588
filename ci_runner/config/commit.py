"""train.yaml as it is in a commit: the file named on the command line, read from the commit's
tree (a symbolic link followed there, as long as it stays in the repository)."""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path
from typing import Final

from ci_runner.config.schema import load_config
from ci_runner.config.types import TrainConfig
from ci_runner.config.yamlsource import YScalar, parse
from ci_runner.errors import ConfigError, GitError, Problem
from ci_runner.gitrepo import read_blob, resolve_commit, tree_entry

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
MAX_LINKS: Final = 8  # symbolic links followed in a row (git's own limit for a path is 40)
_DAMAGED_FIX: Final = (
    "the clone is damaged: fetch again or clone afresh (git fsck names the damaged objects)"
)


def path_in_repo(config_arg: str, cwd: Path, root: Path) -> str:
    """``--config`` (relative to ``cwd``, or absolute) as a path relative to the repository root.

    The file itself is not resolved in the working tree: a symbolic link is judged as the
    commit has it (:func:`file_at`)."""
    if not config_arg:
        raise GitError(
            "--config is empty; fix: pass the path of your train.yaml (by default train.yaml)"
        )
    if not config_arg.isprintable():
        # argv's bytes that were not UTF-8 come as lone surrogates (surrogateescape)
        what = (
            "is not a UTF-8 file name"
            if _SURROGATE.search(config_arg)
            else "has control characters"
        )
        raise GitError(
            f"--config {config_arg!r} {what} (the manifest and every message name it); "
            "fix: rename the file"
        )
    lexical = Path(os.path.normpath(cwd / config_arg))
    absolute = lexical.parent.resolve() / lexical.name
    try:
        relative = absolute.relative_to(root.resolve()).as_posix()
    except ValueError as error:
        raise GitError(
            f"--config {config_arg} is outside the repository {root}; fix: pass the path of a "
            "train.yaml inside the repository"
        ) from error
    if relative == ".":
        raise GitError(
            f"--config {config_arg} is the repository's top directory; fix: pass the path of "
            "your train.yaml"
        )
    return relative


class FileProblem(Exception):
    """Why a file cannot be read from a commit: what is wrong, and the fix."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


def file_at(sha: str, path: str, root: Path, shown: str, missing_fix: str) -> bytes:
    """The bytes of ``path`` in commit ``sha``, following symbolic links that stay inside the
    repository; ``shown`` names the file in messages, ``missing_fix`` is the fix when it is not
    there. Raises FileProblem: no such file, a directory, a link out, an unreadable object."""
    short = sha[:8]
    for _ in range(MAX_LINKS + 1):
        try:
            entry = tree_entry(sha, path, root)
        except GitError as error:
            raise FileProblem(
                f"{shown} cannot be read from commit {short} ({error})", _DAMAGED_FIX
            ) from error
        if entry is None:
            raise FileProblem(f"{shown} does not exist in commit {short}", missing_fix)
        if entry.kind != "blob":
            what = "a directory" if entry.kind == "tree" else "a submodule"
            raise FileProblem(f"{shown} is {what} in commit {short}, not a file", missing_fix)
        try:
            data = read_blob(entry.oid, root)
        except GitError as error:
            raise FileProblem(
                f"{shown} cannot be read from commit {short} ({error})", _DAMAGED_FIX
            ) from error
        if not entry.symlink:
            return data
        target = data.decode("utf-8", "replace")
        followed = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
        if target.startswith("/") or followed == ".." or followed.startswith("../"):
            raise FileProblem(
                f"{shown} is a symbolic link to {target!r} in commit {short}, outside the "
                "repository",
                "commit the file itself, not a link to it",
            )
        path = followed
    raise FileProblem(
        f"{shown} is a chain of more than {MAX_LINKS} symbolic links in commit {short}",
        "commit the file itself, not a link to it",
    )


def load_train_config(
    sha: str, path: str, root: Path, *, working_tree: bool = False
) -> TrainConfig:
    """The validated train.yaml at ``path`` in commit ``sha`` (with ``working_tree``: in the
    working tree, the code that will actually run); its requirements file must exist there."""
    if working_tree:
        data = (root / path).read_bytes()
        where, fix = "the working tree", "create it"
    else:
        resolve_commit(sha, root)  # a commit missing from this clone is not a missing file
        try:
            data = file_at(
                sha,
                path,
                root,
                path,
                "commit it, or pass --config with the path of your train.yaml",
            )
        except FileProblem as problem:
            raise GitError(f"{problem.message}; fix: {problem.fix}") from problem
        where, fix = f"commit {sha[:8]}", "commit it"
    config = load_config(data, path)
    requirements = config.requirements
    if not requirements:
        return config
    line, written = _as_written(data, path, "requirements")
    if "://" in written:
        fix = "requirements names a file in the repository, not a URL: commit it and give its path"
    else:
        fix = f"{fix}, or give its path relative to the repository root"
    if working_tree:
        if not (root / requirements).is_file():
            message = f"{written} does not exist in {where}"
            raise ConfigError([Problem(path, "requirements", line, message, fix)])
        return config
    try:
        file_at(sha, requirements, root, written, fix)
    except FileProblem as problem:
        raise ConfigError(
            [Problem(path, "requirements", line, problem.message, problem.fix)]
        ) from problem
    return config


def _as_written(data: bytes, file: str, key: str) -> tuple[int | None, str]:
    """The line of top-level ``key``'s value in a valid train.yaml, and its text as written
    (before the schema normalised it)."""
    entry = parse(data, file).root.get(key)
    if entry is None or not isinstance(entry.value, YScalar):
        return None, ""
    return entry.value.line, str(entry.value.value)
