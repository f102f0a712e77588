"""train.yaml as it is in a commit: the file named on the command line, read from the commit's
tree (a symbolic link followed there, as long as it stays in the repository), and its
requirements file with those it includes. Each file's size is read from git before the file: a
branch's files are bounded before any of them is read."""

from __future__ import annotations

import os
import posixpath
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ci_runner.config.schema import load_config
from ci_runner.config.types import TrainConfig
from ci_runner.config.yamlsource import MAX_BYTES, YScalar, parse
from ci_runner.errors import ConfigError, GitError, Problem
from ci_runner.gitrepo import blob_size, read_blob, resolve_commit, tree_entry
from ci_runner.venv_layer import includes

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
MAX_LINKS: Final = 8  # symbolic links followed in a row (git's own limit for a path is 40)
# A requirements file lists packages, a few KB; these bound it and the files it includes (-r, -c)
# together, as pip reads them in the pod.
MAX_REQUIREMENTS_BYTES: Final = 1024 * 1024
MAX_REQUIREMENTS_FILES: Final = 32
_REQUIREMENTS_FIX: Final = (
    "keep requirements files to package names and versions (a wheel or data does not belong "
    "in them)"
)
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


class NotAFile(FileProblem):
    """The commit has no file there: nothing, a directory, a submodule, a link out of the
    repository or too long a chain of links."""


@dataclass(frozen=True)
class SizeLimit:
    """The most bytes a file may have; the message ends with ``whose`` ("a train.yaml may
    have"), and ``fix`` says how to stay within."""

    most: int
    whose: str
    fix: str


TRAIN_YAML_LIMIT: Final = SizeLimit(
    MAX_BYTES, "a train.yaml may have", "keep train.yaml small: it describes one training job"
)


def file_at(
    sha: str, path: str, root: Path, shown: str, missing_fix: str, limit: SizeLimit
) -> bytes:
    """The bytes of ``path`` in commit ``sha``, following symbolic links that stay inside the
    repository, each blob's size checked against ``limit`` before it is read; ``shown`` names
    the file in messages, ``missing_fix`` is the fix when it is not there. Raises NotAFile, or
    FileProblem: too large, an unreadable object."""
    short = sha[:8]
    for _ in range(MAX_LINKS + 1):
        try:
            entry = tree_entry(sha, path, root)
        except GitError as error:
            raise FileProblem(
                f"{shown} cannot be read from commit {short} ({error})", _DAMAGED_FIX
            ) from error
        if entry is None:
            raise NotAFile(f"{shown} does not exist in commit {short}", missing_fix)
        if entry.kind != "blob":
            what = "a directory" if entry.kind == "tree" else "a submodule"
            raise NotAFile(f"{shown} is {what} in commit {short}, not a file", missing_fix)
        try:
            size = blob_size(entry.oid, root)
            if size > limit.most:
                raise FileProblem(
                    f"{shown} is {size} bytes in commit {short}, more than the {limit.most} "
                    f"bytes {limit.whose}",
                    limit.fix,
                )
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
            raise NotAFile(
                f"{shown} is a symbolic link to {target!r} in commit {short}, outside the "
                "repository",
                "commit the file itself, not a link to it",
            )
        path = followed
    raise NotAFile(
        f"{shown} is a chain of more than {MAX_LINKS} symbolic links in commit {short}",
        "commit the file itself, not a link to it",
    )


def requirements_at(sha: str, path: str, root: Path, shown: str, missing_fix: str) -> None:
    """Check that the requirements file ``path`` is a file in commit ``sha`` and that it and
    the files it includes (-r, -c; those the commit has) stay within
    :data:`MAX_REQUIREMENTS_BYTES` and :data:`MAX_REQUIREMENTS_FILES`. Raises FileProblem."""
    pending = deque([(path, shown)])
    seen = {path}
    used = 0
    while pending:
        name, label = pending.popleft()
        whose = (
            "requirements files may have together (this one and those it includes)"
            if name == path
            else f"left of the {MAX_REQUIREMENTS_BYTES} requirements files may have together"
        )
        limit = SizeLimit(MAX_REQUIREMENTS_BYTES - used, whose, _REQUIREMENTS_FIX)
        try:
            data = file_at(sha, name, root, label, missing_fix, limit)
        except NotAFile:
            if name == path:
                raise
            continue  # pip says so in the pod; there is nothing here to bound
        used += len(data)
        for included in includes(name, data):
            if included in seen or not _in_repository(included):
                continue
            if len(seen) == MAX_REQUIREMENTS_FILES:
                raise FileProblem(
                    f"{shown} and the files it includes (-r, -c) are more than "
                    f"{MAX_REQUIREMENTS_FILES} files in commit {sha[:8]}",
                    "merge them into fewer files",
                )
            seen.add(included)
            pending.append((included, f"{included} (included by {name})"))


def _in_repository(path: str) -> bool:
    """Whether an included file's path may name a file of the commit (an absolute one is the
    image's, one above the code directory is nothing)."""
    return not (path.startswith("/") or path == ".." or path.startswith("../") or "\0" in path)


def load_train_config(
    sha: str, path: str, root: Path, *, working_tree: bool = False
) -> TrainConfig:
    """The validated train.yaml at ``path`` in commit ``sha`` (with ``working_tree``: in the
    working tree, the code that will actually run); its requirements file must exist there."""
    if working_tree:
        size = (root / path).stat().st_size
        if size > MAX_BYTES:
            raise GitError(
                f"{path} is {size} bytes in the working tree, more than the {MAX_BYTES} bytes "
                f"{TRAIN_YAML_LIMIT.whose}; fix: {TRAIN_YAML_LIMIT.fix}"
            )
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
                TRAIN_YAML_LIMIT,
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
        requirements_at(sha, requirements, root, written, fix)
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
