"""The Horovod image's Python packages as an image layer, taken from the project's virtualenv
(where ``make horovod`` installed torch and the Horovod wheel it built): the distributions that
torch, Horovod, pip and the example's libraries need, each file its RECORD lists, placed where
``pip install`` puts them in ``horovod/horovod:0.28.1`` (the system Python's
``/usr/local/lib/pythonX.Y/dist-packages``, console scripts in ``/usr/local/bin`` run by
``/usr/bin/pythonX.Y``). The image's Python is Debian's 3.11, the virtualenv's a 3.11 too, so the
compiled modules load unchanged; the files are hard links into the virtualenv where the cache is
on the same file system, so the tree costs no copy."""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from testing.emulated_cluster import imagestore

# What the image is asked to have: the stock image's torch and Horovod with Horovod's own
# dependencies and pip, and what the tests' train.yaml needs beyond it (scikit-learn, boto3: the
# tests install requirements with PIP_NO_INDEX, as a cluster without an index would).
ROOTS = (
    "torch",
    "horovod",
    "pip",
    "setuptools",
    "wheel",
    "numpy",
    "cloudpickle",
    "psutil",
    "pyyaml",
    "packaging",
    "scikit-learn",
    "boto3",
)
# Debian's python3.11, by its versioned name: the stock-Python variant hides `python3`.
INTERPRETER = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
PREFIX = Path("usr/local")


class SiteFailed(Exception):
    """The virtualenv lacks what the image needs; the message names the fix."""


def closure(roots: Iterable[str], distributions: dict[str, metadata.Distribution]) -> list[str]:
    """Every distribution ``roots`` need (their requirements, with the extras they ask for),
    by canonical name, sorted."""
    found: set[str] = set()
    pending = [(canonicalize_name(name), frozenset[str]()) for name in roots]
    done: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, extras = pending.pop()
        if (name, extras) in done:
            continue
        done.add((name, extras))
        dist = distributions.get(name)
        if dist is None:
            raise SiteFailed(f"the virtualenv has no {name}; fix: make horovod")
        found.add(name)
        for text in dist.requires or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in {"", *extras}):
                pending.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return sorted(found)


def python_version() -> str:
    """``pythonX.Y``: the image's Python is the virtualenv's version (Debian's 3.11)."""
    return f"python{sys.version_info[0]}.{sys.version_info[1]}"


def _site(prefix: Path) -> Path:
    return prefix.resolve() / "lib" / python_version() / "site-packages"


def installed(prefix: Path) -> dict[str, metadata.Distribution]:
    """The distributions of the virtualenv at ``prefix``, by canonical name."""
    paths = [str(_site(prefix))]
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions(path=paths)}


def chosen(prefix: Path) -> list[metadata.Distribution]:
    dists = installed(prefix)
    return [dists[name] for name in closure(ROOTS, dists)]


def key(prefix: Path) -> str:
    """What the layer is made of: each chosen distribution's name, version and RECORD (which
    holds every file's digest), and where the files go."""
    sha = hashlib.sha256(f"site-layer-3 {INTERPRETER} {PREFIX}".encode())
    for dist in chosen(prefix):
        record = [_venv_free(line) for line in (dist.read_text("RECORD") or "").splitlines()]
        sha.update(f"{dist.metadata['Name']} {dist.version}\n".encode())
        sha.update("\n".join(record).encode())
    return sha.hexdigest()[:16]


def _venv_free(line: str) -> str:
    """A RECORD line without the digest of a console script, whose ``#!`` line names the
    virtualenv (the layer's names the image's interpreter): every clone of the repository has
    its own virtualenv, and the same key."""
    path = line.split(",", 1)[0]
    return path if path.startswith("../../../bin/") else line


def _place(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    imagestore.link_or_copy(source, target)


def _script(source: Path, target: Path, python: Path) -> None:
    """A console script, its ``#!`` line naming the image's interpreter instead of the
    virtualenv's."""
    data = source.read_bytes()
    first, newline, rest = data.partition(b"\n")
    if first.startswith(b"#!") and str(python).encode() in first:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"#!" + INTERPRETER.encode() + newline + rest)
        target.chmod(0o755)
    else:
        _place(source, target)


def write(prefix: Path, root: Path) -> Path:
    """The layer's tree under ``root``: each chosen distribution's files, placed as in the image."""
    prefix = prefix.resolve()
    site, bin_dir = _site(prefix), prefix / "bin"
    dist_packages = root / PREFIX / "lib" / python_version() / "dist-packages"
    for dist in chosen(prefix):
        for file in dist.files or []:
            source = Path(os.path.normpath(str(dist.locate_file(file))))
            if not source.is_file():
                continue  # a RECORD line for a file pip did not write (a .pyc, say)
            if source.is_relative_to(site):
                _place(source, dist_packages / source.relative_to(site))
            elif source.parent == bin_dir:
                _script(source, root / PREFIX / "bin" / source.name, bin_dir / "python")
            elif source.is_relative_to(prefix):
                _place(source, root / PREFIX / source.relative_to(prefix))
    (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    # The stock image's `ln -s /usr/bin/python3.8 /usr/bin/python` (docker/horovod/Dockerfile).
    (root / "usr" / "bin" / "python").symlink_to("python3")
    # Its Python (Ubuntu 20.04's) has no PEP 668 marker, so `pip install` as root goes to the
    # system's site packages, as the seed's workers do; Debian's marker is whited out (OCI).
    stdlib = root / "usr" / "lib" / python_version()
    stdlib.mkdir(parents=True, exist_ok=True)
    (stdlib / ".wh.EXTERNALLY-MANAGED").touch()
    return root
