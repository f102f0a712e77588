"""The one image every container runs: this machine, seen through an overlay, made to look like
``horovod/horovod:0.28.1`` where it matters (its ``docker/horovod/Dockerfile`` at tag v0.28.1):

- ``WORKDIR /horovod/examples`` (Dockerfile line 134), root, no ENTRYPOINT; ``/bin/sh`` is dash
  (Debian's, as Ubuntu's in the image);
- ``mkdir -p /var/run/sshd`` (line 79) and ``StrictHostKeyChecking no`` in ``/etc/ssh/ssh_config``
  (lines 80-82); the distribution's sshd config and host keys (Debian openssh-server) untouched,
  so ``StrictModes yes`` as in the image;
- ``python``/``pip``/``horovodrun`` on PATH are the project's virtualenv (Horovod with PyTorch,
  Gloo and MPI; Debian's OpenMPI instead of the image's 4.1.4 built from source);
- ENV as the image sets it (``DEBIAN_FRONTEND``, the CUDA base image's PATH).

The layer is a directory used as the top lower layer of every container's overlay; what the image
does not have (other worktrees under /work, /tmp's contents, /root/.ssh) is made opaque.

:func:`build_stock_python` writes a variant, :data:`STOCK_PYTHON_IMAGE`, shaped like the stock
image's Python where the default one is not (see its docstring).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

WORKDIR = "/horovod/examples"
PATH = (
    "/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:"
    "/usr/sbin:/usr/bin:/sbin:/bin"
)
ENV = {"PATH": PATH, "DEBIAN_FRONTEND": "noninteractive", "HOME": "/root"}
CMD = ["/bin/bash"]
OPAQUE = ("tmp", "run", "root/.ssh", "work", "var/tmp")
# The variant whose Python is shaped like the stock image's (build_stock_python), and the pip it
# has: the image pins pip~=21.0.0 after get-pip (docker/horovod/Dockerfile, v0.28.1).
STOCK_PYTHON_IMAGE = "ci-runner.test/horovod-stock-python:0.28.1"
STOCK_PIP = "pip==21.0.1"
STOCK_PIP_WHEEL = "pip-21.0.1-py3-none-any.whl"
STOCK_PIP_SHA256 = "37fd50e056e2aed635dec96594606f0286640489b0db0ce7607f7e51890372d5"


@dataclass(frozen=True)
class Image:
    """A prepared layer plus the virtualenv each container sees (through its own overlay)."""

    layer: Path
    venv: Path


def _opaque(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.setxattr(path, "trusted.overlay.opaque", b"y")


def _script(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _whiteout(layer: Path, path: str) -> None:
    """Hide ``path`` of the layers below (overlayfs: a 0/0 character device)."""
    target = layer / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(target, 0o600 | 0o020000, os.makedev(0, 0))


def _base(layer: Path, venv: Path) -> Path:
    """The layer with what every image has: opaque directories, WORKDIR, the venv's mount point,
    sshd's directory and the image's ssh_config."""
    if layer.exists():
        shutil.rmtree(layer)
    layer.mkdir(parents=True)
    for name in OPAQUE:
        _opaque(layer / name)
    (layer / "run" / "sshd").mkdir(mode=0o755)  # /var/run -> /run on Debian
    (layer / WORKDIR.lstrip("/")).mkdir(parents=True)
    # The virtualenv's own overlay is mounted here; /work above it is opaque.
    (layer / str(venv).lstrip("/")).mkdir(parents=True)
    ssh = layer / "etc" / "ssh"
    ssh.mkdir(parents=True)
    lines = Path("/etc/ssh/ssh_config").read_text().splitlines()
    kept = [line for line in lines if "StrictHostKeyChecking" not in line]
    (ssh / "ssh_config").write_text("\n".join([*kept, "    StrictHostKeyChecking no"]) + "\n")
    bin_dir = layer / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    return bin_dir


def build(layer: Path, venv: Path) -> Image:
    """Write the image layer into ``layer`` (a directory on the run's tmpfs)."""
    venv = venv.resolve()
    bin_dir = _base(layer, venv)
    _script(bin_dir / "python", f'#!/bin/sh\nexec {venv}/bin/python "$@"\n')
    _script(bin_dir / "python3", f'#!/bin/sh\nexec {venv}/bin/python "$@"\n')
    _script(bin_dir / "pip", f'#!/bin/sh\nexec {venv}/bin/python -m pip "$@"\n')
    _script(bin_dir / "pip3", f'#!/bin/sh\nexec {venv}/bin/python -m pip "$@"\n')
    _script(bin_dir / "horovodrun", f'#!/bin/sh\nexec {venv}/bin/horovodrun "$@"\n')
    return Image(layer, venv)


def stock_pip_wheel(cache: Path) -> Path:
    """The stock image's pip (:data:`STOCK_PIP`), which ``make cluster-tools`` downloads into
    ``cache``; raises FileNotFoundError naming the command when it is not there."""
    wheel = cache / "stock-image" / STOCK_PIP_WHEEL
    if not wheel.is_file():
        raise FileNotFoundError(f"{wheel} is missing; fix: make cluster-tools")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != STOCK_PIP_SHA256:
        raise ValueError(f"{wheel} has sha256 {digest}, not PyPI's {STOCK_PIP_SHA256}")
    return wheel


_BASE_PYTHON = """\
import json, site, sys, sysconfig
print(json.dumps({
    "executable": sys.executable,
    "version": "%d.%d" % sys.version_info[:2],
    "stdlib": sysconfig.get_path("stdlib"),
    "site": site.getsitepackages(),
}))
"""


def build_stock_python(layer: Path, venv: Path, pip_wheel: Path) -> Image:
    """The variant whose Python is shaped like ``horovod/horovod:0.28.1``'s (Ubuntu 20.04's 3.8):

    - ``python`` only: ``/usr/bin/python`` runs the system interpreter (the Dockerfile's
      ``ln -s /usr/bin/python3.8 /usr/bin/python``), ``python3`` is on no directory of PATH;
    - no ``ensurepip`` (Ubuntu's is in ``python3-venv``, which the image lacks): ``-m venv``
      fails unless given ``--without-pip``;
    - an old pip (:data:`STOCK_PIP`, installed by get-pip, then pinned), in a ``dist-packages``
      of ``/usr/local/lib`` on the system Python's path, as get-pip leaves it, with ``pip`` and
      ``horovodrun`` scripts in ``/usr/local/bin`` run by the system interpreter;
    - Horovod, torch and the rest in the system site packages, so ``--system-site-packages``
      reaches them (and the old pip) directly, as in the image.

    No package registry has a Python 3.8 that installs on Debian bookworm (Debian never shipped
    3.8; the npm and PyPI "portable Python" packages download their builds from elsewhere at
    install time), so the system interpreter here is the one under the project's virtualenv
    (``sys.base_prefix``), of this machine's version. Its site directories are made opaque (what
    this machine installed there, its own pip included, is not the image's), and a ``.pth`` file
    in the first adds the old pip, then the virtualenv's packages (Horovod, torch, setuptools and
    wheel, built or installed for this interpreter). Whiteouts hide that interpreter's
    ``ensurepip`` and ``python3`` on every PATH directory.
    """
    venv = venv.resolve()
    bin_dir = _base(layer, venv)
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c", "import sys; print(sys._base_executable)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    base = json.loads(
        subprocess.run(
            [found, "-I", "-c", _BASE_PYTHON], check=True, capture_output=True, text=True
        ).stdout
    )
    _whiteout(layer, f"{base['stdlib']}/ensurepip")
    # The image's system site packages are the image's: whatever this machine installed there
    # (its own pip, older copies of the virtualenv's libraries) is hidden.
    for directory in base["site"]:
        _opaque(layer / directory.lstrip("/"))
    for directory in PATH.split(":"):
        if os.path.lexists(f"{directory}/python3") and not Path(directory).is_symlink():
            _whiteout(layer, f"{directory}/python3")
    # get-pip's place on Ubuntu: /usr/local/lib/pythonX.Y/dist-packages.
    dist = layer / "usr" / "local" / "lib" / f"python{base['version']}" / "dist-packages"
    dist.mkdir(parents=True)
    with zipfile.ZipFile(pip_wheel) as wheel:
        wheel.extractall(dist)
    site_dir = Path(base["site"][0])
    pth = layer / str(site_dir).lstrip("/") / "_ci_runner_stock_image.pth"
    pth.parent.mkdir(parents=True, exist_ok=True)
    packages = _site_packages(venv)
    pth.write_text(f"/{dist.relative_to(layer)}\n{packages}\n")
    # Not a symlink: a virtualenv made by a symlink's Python would look for its standard library
    # beside the symlink (/usr/lib), where this machine may have another Python's.
    system_bin = layer / "usr" / "bin"
    system_bin.mkdir(parents=True, exist_ok=True)
    _script(system_bin / "python", f'#!/bin/sh\nexec {found} "$@"\n')
    # As pip writes console scripts: horovodrun's children are spawned, and re-import __main__.
    entry = f"#!{found}\nimport sys\nfrom {{}} import {{}}\n\nif __name__ == '__main__':\n"
    entry += "    sys.exit({}())\n"
    _script(bin_dir / "pip", entry.format("pip._internal.cli.main", "main", "main"))
    _script(bin_dir / "pip3", entry.format("pip._internal.cli.main", "main", "main"))
    horovodrun = entry.format("horovod.runner.launch", "run_commandline", "run_commandline")
    _script(bin_dir / "horovodrun", horovodrun)
    return Image(layer, venv)


def _site_packages(venv: Path) -> str:
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return subprocess.run(
        [str(venv / "bin" / "python"), "-I", "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()


def build_named(name: str, layer: Path, venv: Path, cache: Path) -> Image:
    """The layer for image ``name``: :func:`build_stock_python` for :data:`STOCK_PYTHON_IMAGE`,
    else the default one (every other name a node has looks the same)."""
    if name == STOCK_PYTHON_IMAGE:
        return build_stock_python(layer, venv, stock_pip_wheel(cache))
    return build(layer, venv)


def fetch_stock_pip(cache: Path) -> Path:
    """Download :data:`STOCK_PIP` from the package index this machine's pip uses into
    ``cache`` (once; ``make cluster-tools``), checked against PyPI's sha256."""
    try:
        return stock_pip_wheel(cache)
    except FileNotFoundError:
        pass
    folder = cache / "stock-image"
    folder.mkdir(parents=True, exist_ok=True)
    download = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder)]
    options = ["--disable-pip-version-check", "--only-binary", ":all:"]
    subprocess.run([*download, *options, STOCK_PIP], check=True)
    return stock_pip_wheel(cache)


if __name__ == "__main__":
    from testing.paths import cache_dir

    print(f"[emulated image] {fetch_stock_pip(cache_dir())}")
