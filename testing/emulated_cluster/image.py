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
"""

from __future__ import annotations

import os
import shutil
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


def build(layer: Path, venv: Path) -> Image:
    """Write the image layer into ``layer`` (a directory on the run's tmpfs)."""
    venv = venv.resolve()
    if layer.exists():
        shutil.rmtree(layer)
    layer.mkdir(parents=True)
    for name in OPAQUE:
        _opaque(layer / name)
    (layer / "run" / "sshd").mkdir(mode=0o755)  # /var/run -> /run on Debian
    (layer / WORKDIR.lstrip("/")).mkdir(parents=True)
    # The virtualenv's own overlay is mounted here; /work above it is opaque.
    (layer / str(venv).lstrip("/")).mkdir(parents=True)
    bin_dir = layer / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    _script(bin_dir / "python", f'#!/bin/sh\nexec {venv}/bin/python "$@"\n')
    _script(bin_dir / "python3", f'#!/bin/sh\nexec {venv}/bin/python "$@"\n')
    _script(bin_dir / "pip", f'#!/bin/sh\nexec {venv}/bin/python -m pip "$@"\n')
    _script(bin_dir / "pip3", f'#!/bin/sh\nexec {venv}/bin/python -m pip "$@"\n')
    _script(bin_dir / "horovodrun", f'#!/bin/sh\nexec {venv}/bin/horovodrun "$@"\n')
    ssh = layer / "etc" / "ssh"
    ssh.mkdir(parents=True)
    lines = Path("/etc/ssh/ssh_config").read_text().splitlines()
    kept = [line for line in lines if "StrictHostKeyChecking" not in line]
    (ssh / "ssh_config").write_text("\n".join([*kept, "    StrictHostKeyChecking no"]) + "\n")
    return Image(layer, venv)
