"""Git, through the real ``git`` command: exact SHAs, files at a commit, clean worktrees."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ci_runner.errors import GitError


def git(args: list[str], cwd: Path) -> str:
    """Run ``git args`` in ``cwd`` and return its stdout; a failure is a :class:`GitError`."""
    try:
        # errors="replace": a file name or message that is not UTF-8 must not crash us.
        proc = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, errors="replace", check=False
        )
    except FileNotFoundError as exc:
        raise GitError("git is not installed; fix: install git and run again") from exc
    except NotADirectoryError as exc:
        raise GitError(f"{cwd} is not a directory") from exc
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise GitError(f"git {' '.join(args)} failed in {cwd}: {detail}")
    return proc.stdout


def repo_root(cwd: Path) -> Path:
    """The top of the git work tree containing ``cwd``."""
    try:
        return Path(git(["rev-parse", "--show-toplevel"], cwd).strip())
    except GitError as exc:
        if isinstance(exc.__cause__, OSError):  # no git at all, or no such directory: say so
            raise
        if "safe.directory" in str(exc):  # git's advice on a checkout of another user (CI images)
            raise GitError(
                f"git refuses {cwd}: it belongs to another user (dubious ownership); fix: "
                "git config --global --add safe.directory '*' (in an image: --system)"
            ) from exc
        raise GitError(
            f"{cwd} is not inside a git repository; fix: run ci-runner from your project's checkout"
        ) from exc


def resolve_commit(rev: str, cwd: Path) -> str:
    """The full 40-hex SHA of the commit ``rev`` names."""
    try:
        return git(
            ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}"], cwd
        ).strip()
    except GitError as exc:
        raise GitError(
            f"no commit {rev!r} in {cwd}; fix: pass --sha with a commit that exists here "
            "(git fetch it first if it was pushed from elsewhere)"
        ) from exc


def read_file_at(sha: str, path: str, cwd: Path) -> str:
    """The text of ``path`` (relative to the repository root) in commit ``sha``."""
    try:
        return git(["show", f"{sha}:{path}"], cwd)
    except GitError as exc:
        raise GitError(
            f"{path} does not exist in commit {sha[:8]}; fix: commit it, or pass --config with "
            "its path relative to the repository root"
        ) from exc


@dataclass(frozen=True)
class TreeEntry:
    """A path's entry in a commit's tree: its mode (100644, 100755, 120000 for a symbolic
    link, 040000, 160000), its kind (blob, tree, commit) and its object's name."""

    mode: str
    kind: str
    oid: str

    @property
    def symlink(self) -> bool:
        return self.mode == "120000"


def tree_entry(sha: str, path: str, cwd: Path) -> TreeEntry | None:
    """The entry of ``path`` (relative to the repository root, taken literally) in commit
    ``sha``, or None when there is none. Only the trees are read, not the file."""
    args = ["--literal-pathspecs", "ls-tree", "-z", "--full-tree", sha, "--", path]
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False)
    except FileNotFoundError as exc:
        raise GitError("git is not installed; fix: install git and run again") from exc
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(lines[-1] if lines else f"git ls-tree exited with {proc.returncode}")
    wanted = os.fsencode(path)  # as the argument went to git: a name that is not UTF-8 too
    for record in proc.stdout.split(b"\0"):
        meta, _, name = record.partition(b"\t")
        if name == wanted:
            mode, kind, oid = meta.decode("ascii").split(" ")
            return TreeEntry(mode, kind, oid)
    return None


def blob_size(oid: str, cwd: Path) -> int:
    """The size in bytes of the blob ``oid``, from its header (the content is not read): check
    it before :func:`read_blob`. A missing or damaged object is a GitError with git's words."""
    return int(_cat_file(["-s", oid], cwd))


def read_blob(oid: str, cwd: Path) -> bytes:
    """The bytes of the blob ``oid``, undecoded (train.yaml may not be UTF-8, and only its reader
    can say so on the right line); a missing or damaged object is a GitError with git's words."""
    return _cat_file(["blob", oid], cwd)


def _cat_file(args: list[str], cwd: Path) -> bytes:
    try:
        proc = subprocess.run(["git", "cat-file", *args], cwd=cwd, capture_output=True)
    except FileNotFoundError as exc:
        raise GitError("git is not installed; fix: install git and run again") from exc
    if proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise GitError(lines[-1] if lines else f"git cat-file exited with {proc.returncode}")
    return proc.stdout


def file_exists_at(sha: str, path: str, cwd: Path) -> bool:
    """Whether ``path`` is a file in commit ``sha``."""
    try:
        kind = git(["cat-file", "-t", f"{sha}:{path}"], cwd).strip()
    except GitError:
        return False
    return kind == "blob"


def differs_from_commit(sha: str, path: str, cwd: Path) -> bool:
    """Whether ``path`` in the work tree is not as in commit ``sha`` (changed or deleted;
    git's own comparison, line-ending filters included)."""
    return bool(git(["diff", "--name-only", sha, "--", path], cwd).strip())


def is_dirty(cwd: Path) -> bool:
    """Whether the work tree has uncommitted changes to tracked files."""
    return bool(git(["status", "--porcelain", "--untracked-files=no"], cwd).strip())


def checkout_commit(repo: Path, sha: str, dest: Path) -> Path:
    """A detached worktree of ``repo`` at exactly ``sha`` in ``dest`` (reused if already there)."""
    if (dest / ".git").exists():
        current = git(["rev-parse", "HEAD"], dest).strip()
        if current == sha:
            git(["reset", "--hard", "--quiet", sha], dest)
            git(["clean", "-fdxq"], dest)
            return dest
        git(["worktree", "remove", "--force", str(dest)], repo)
    git(["worktree", "prune"], repo)
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(["worktree", "add", "--detach", "--force", str(dest), sha], repo)
    return dest
