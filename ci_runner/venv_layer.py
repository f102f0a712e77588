"""A virtualenv layered over a base Python: the key it is kept under (and what is never kept), the
.pth files that show it the base's packages, and the pods' cache of them.

The base is an image's Python in a pod and ci-runner's own for ``--local``
(:mod:`ci_runner.backends.local.pyenv` imports this module). In a pod, install-requirements.sh
runs this file with the image's Python from the job's ConfigMap, where it lies beside the script::

    python3 venv_layer.py key REQUIREMENTS        # in the code directory: the key, or nothing
    python3 venv_layer.py pth VENV                # the .pth files of a new virtualenv
    python3 venv_layer.py store VENV CACHE KEY DAYS
    python3 venv_layer.py build CACHE KEY         # a new directory to make the virtualenv in
    python3 venv_layer.py keep BUILD CACHE KEY DAYS VENV

So: the standard library only, and nothing newer than Python 3.8 (ruff checks this file's syntax
against 3.8).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Final, Iterable, Mapping, NamedTuple, Sequence

KEY_PREFIX: Final = b"ci-runner virtualenv 1\0"
# What marks a kept virtualenv whole; its time is when a pod last used it.
COMPLETE: Final = ".ci-runner-complete"
IMAGE_PTH: Final = "_ci_runner_image.pth"
LINE_BUFFERED_PTH: Final = "_ci_runner_line_buffered.pth"
# Each rank's output lines reach mpirun whole. PYTHONUNBUFFERED makes print() two writes (the text,
# then the newline), and mpirun's --tag-output tags each write: another rank's line could land
# between them, on the same line of the CI log. Line buffering writes a line at once and still
# flushes at every newline or carriage return (progress bars).
LINE_BUFFERED: Final = (
    "import sys; [s.reconfigure(line_buffering=True, write_through=False) for s in "
    '(sys.stdout, sys.stderr) if hasattr(s, "reconfigure")]\n'
)
_INCLUDES: Final = ("-r", "--requirement", "-c", "--constraint")
_EDITABLE: Final = ("-e", "--editable")
_METADATA: Final = (".dist-info", ".egg-info")
_SITE_DIRS: Final = ("site-packages", "dist-packages")
# Run by the new virtualenv's Python: where its packages go, then what it already sees.
_VENV_PATHS: Final = (
    "import sys, sysconfig; print(sysconfig.get_path('purelib')); print(*sys.path, sep='\\n')"
)


class Requirements(NamedTuple):
    """A requirements file and those it includes (``-r``, ``-c``), as read."""

    files: list[tuple[str, bytes]]  # (path as named from the code directory, bytes), in order
    # Why the virtualenv may not be kept: the first line that names a local path (which may
    # change with any commit), or an included file that cannot be read; None when it may.
    uncached: str | None


def names_local_path(token: str, root: str = ".") -> bool:
    """Whether a requirement's word is a path (``./libs/pkg``, ``wheels``, ``file:...``)."""
    return token.startswith((".", "/", "~", "file:")) or os.path.exists(os.path.join(root, token))


def read_requirements(path: str, root: str = ".") -> Requirements:
    """``path`` (relative to ``root``, the code directory) and the files it includes, recursively;
    the reading stops at the first line that names a local path."""
    files: list[tuple[str, bytes]] = []
    return Requirements(files, _read(os.path.normpath(path), root, files, set()))


def _read(path: str, root: str, files: list[tuple[str, bytes]], seen: set[str]) -> str | None:
    """Add the file and those it includes; the local path it names (or the file it cannot read),
    if any."""
    if path in seen:
        return None
    seen.add(path)
    try:
        with open(os.path.join(root, path), "rb") as file:
            data = file.read()
    except OSError as error:
        return f"{path} ({error.strerror})"
    files.append((path, data))
    for line in data.decode("utf-8", "replace").splitlines():
        tokens = _words(line)
        if not tokens:
            continue
        included = _included(tokens, path)
        if included is not None:
            found = _read(included, root, files, seen)
            if found:
                return found
        elif (
            tokens[0].partition("=")[0] in _EDITABLE
            or any(names_local_path(t, root) for t in tokens)
            or "file:" in line
        ):
            return line.strip()
    return None


def includes(path: str, data: bytes) -> list[str]:
    """The files the requirements file ``path`` (``data``, its bytes) includes (``-r``, ``-c``),
    in order, as named from the code directory (pip reads each relative to ``path``'s own)."""
    found = []
    for line in data.decode("utf-8", "replace").splitlines():
        tokens = _words(line)
        included = _included(tokens, path) if tokens else None
        if included is not None:
            found.append(included)
    return found


def _words(line: str) -> list[str]:
    """A requirements line's words, without its comment."""
    tokens = line.split(" #")[0].split()
    return [] if not tokens or tokens[0].startswith("#") else tokens


def _included(tokens: list[str], path: str) -> str | None:
    """The file the line of ``tokens`` in the requirements file ``path`` includes, if any."""
    option, _, value = tokens[0].partition("=")
    if option not in _INCLUDES:
        return None
    if not value and len(tokens) > 1:
        value = tokens[1]
    # Normalised: a file that includes itself by another name (../reqs/x.txt) is seen.
    return os.path.normpath(os.path.join(os.path.dirname(path), value))


def interpreter() -> list[str]:
    """The running Python: version, executable, prefix and platform."""
    return [sys.version, sys.executable, sys.prefix, sysconfig.get_platform()]


def base_paths() -> list[str]:
    """The running Python's ``sys.path`` without the running program's own directory (its first
    entry, unless ``-P`` or PYTHONSAFEPATH left it out): what a virtualenv over it sees."""
    return list(sys.path if getattr(sys.flags, "safe_path", False) else sys.path[1:])


def venv_key(
    files: Iterable[tuple[str, bytes]],
    python: Sequence[str],
    paths: Sequence[str],
    environ: Mapping[str, str],
) -> str:
    """The key of a virtualenv over ``python`` (:func:`interpreter`) and its ``paths``: the
    requirements' bytes, the distributions installed on ``paths`` and the PIP_* settings."""
    digest = hashlib.sha256(KEY_PREFIX)

    def add(label: str, data: bytes) -> None:
        digest.update(label.encode() + b"\0" + data + b"\0")

    for path, data in files:
        add("file " + path, data)
    add("python", "\n".join([*python, *paths]).encode())
    for path in paths:
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.endswith(_METADATA))
            add("site " + path, "\n".join(names).encode())
    for name in sorted(environ):
        if name.startswith("PIP_") and name != "PIP_CACHE_DIR":
            add("env " + name, environ[name].encode())
    return digest.hexdigest()[:32]


def site_pth(paths: Iterable[str], seen: Iterable[str]) -> str:
    """A .pth that adds the base's site directories a virtualenv lacks (when the base is itself a
    virtualenv, ``--system-site-packages`` reaches the Python below it, not the base's packages);
    ``site.addsitedir`` reads their own .pth files too, after the virtualenv's own packages."""
    known = set(seen)
    dirs = [p for p in paths if p.endswith(_SITE_DIRS) and p not in known]
    return "".join(f"import site; site.addsitedir({d!r})\n" for d in dirs)


def write_pth_files(venv: str) -> None:
    """Show the virtualenv ``venv`` the running Python's packages, and make its ranks' output
    line-buffered."""
    python = os.path.join(venv, "bin", "python")
    out = subprocess.run(
        [python, "-c", _VENV_PATHS], stdout=subprocess.PIPE, text=True, check=True
    ).stdout
    site_dir, *seen = out.splitlines()
    with open(os.path.join(site_dir, IMAGE_PTH), "w") as pth:
        pth.write(site_pth(base_paths(), seen))
    with open(os.path.join(site_dir, LINE_BUFFERED_PTH), "w") as pth:
        pth.write(LINE_BUFFERED)


def _age(path: str) -> float | None:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return None


def prune(cache: str, keep: str, days: float) -> None:
    """Remove the kept virtualenvs (but ``keep``) no pod used for ``days`` days."""
    for name in os.listdir(cache):
        entry = os.path.join(cache, name)
        # A copy or a virtualenv in the making has no marker yet; its directory's time is its
        # last write.
        unused = _age(os.path.join(entry, COMPLETE))
        if unused is None:
            unused = _age(entry)
        if name != keep and unused is not None and unused > days * 86400:
            shutil.rmtree(entry, ignore_errors=True)


def store(venv: str, cache: str, key: str, days: float) -> None:
    """Keep ``venv`` in ``cache`` under ``key``, after pruning.

    Copied under a name of this pod's, then renamed: a pod that looks finds a whole virtualenv
    or none, and of two pods storing the same key one keeps its copy, the other drops its own.
    """
    os.makedirs(cache, exist_ok=True)
    prune(cache, key, days)
    tmp = os.path.join(cache, f".{key}.{socket.gethostname()}.{os.getpid()}")
    try:
        shutil.copytree(venv, tmp, symlinks=True)
        open(os.path.join(tmp, COMPLETE), "w").close()
        os.rename(tmp, os.path.join(cache, key))
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isdir(os.path.join(cache, key)):  # else another pod stored it first
            raise


def build(cache: str, key: str) -> str:
    """A new directory in ``cache`` to make the virtualenv of ``key`` in, readable by every pod's
    user as a stored one is; its name marks it unfinished (see :func:`prune`)."""
    os.makedirs(cache, exist_ok=True)
    path = tempfile.mkdtemp(prefix=f".{key}.{socket.gethostname()}.", dir=cache)
    os.chmod(path, 0o755)
    return path


def keep(built: str, cache: str, key: str, days: float, venv: str) -> None:
    """Keep the virtualenv made in ``built`` (:func:`build`) under ``key``, after pruning, and
    point ``venv`` (the symbolic link every pod's scripts name) at what is kept.

    A rename: of two pods keeping the same key one keeps its own, the other drops its own and
    takes the first's. The activate scripts name the path the pods see, ``venv``, not ``built``.
    """
    prune(cache, os.path.basename(built), days)
    bin_dir = os.path.join(built, "bin")
    for name in os.listdir(bin_dir):
        if name.startswith("activate"):
            path = os.path.join(bin_dir, name)
            with open(path, "rb") as file:
                data = file.read()
            with open(path, "wb") as file:
                file.write(data.replace(os.fsencode(built), os.fsencode(venv)))
    open(os.path.join(built, COMPLETE), "w").close()
    kept = os.path.join(cache, key)
    try:
        os.rename(built, kept)
    except OSError:
        if not os.path.isdir(kept):
            raise
        shutil.rmtree(built, ignore_errors=True)  # another pod kept it first
    # Replaced in one step: ``venv`` never names nothing.
    link = f"{venv}.{os.getpid()}"
    os.symlink(kept, link)
    os.replace(link, venv)


def main(argv: Sequence[str] | None = None) -> int:
    """The pods' command line (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="venv_layer.py")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("key").add_argument("requirements")
    commands.add_parser("pth").add_argument("venv")
    stored = commands.add_parser("store")
    for name in ("venv", "cache", "key"):
        stored.add_argument(name)
    stored.add_argument("days", type=float)
    built = commands.add_parser("build")
    for name in ("cache", "key"):
        built.add_argument(name)
    kept = commands.add_parser("keep")
    for name in ("built", "cache", "key"):
        kept.add_argument(name)
    kept.add_argument("days", type=float)
    kept.add_argument("venv")
    args = parser.parse_args(argv)
    if args.command == "key":
        requirements = read_requirements(args.requirements)
        if requirements.uncached:
            why = f"{args.requirements} names {requirements.uncached}"
            print(f"ci-runner: the virtualenv is not cached: {why}", file=sys.stderr)
        else:
            print(venv_key(requirements.files, interpreter(), base_paths(), os.environ))
    elif args.command == "pth":
        write_pth_files(args.venv)
    else:
        try:
            if args.command == "build":
                print(build(args.cache, args.key))
            elif args.command == "keep":
                keep(args.built, args.cache, args.key, args.days, args.venv)
            else:
                store(args.venv, args.cache, args.key, args.days)
        except OSError as error:
            print(f"ci-runner: {error}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
