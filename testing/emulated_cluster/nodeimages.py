"""Images built here from Debian packages for the real nodes, no registry and no container
daemon: the lowest layer is ``debootstrap --variant=minbase`` with the image's packages, made
and cached the way ``make image-check`` makes its base (:func:`testing.image_check.base_archive`:
one tarball per suite, mirror and package list); the layers above are small trees written here.

- :data:`MPI_IMAGE`: Debian's Python, OpenMPI, OpenSSH (client and server) and git, with what
  ``horovod/horovod:0.28.1``'s Dockerfile adds for sshd (``/var/run/sshd``, that is ``/run/sshd``,
  ``StrictHostKeyChecking no``) and its ``WORKDIR /horovod/examples``: what the Horovod image
  is made of below its virtualenv;
- :data:`NON_ROOT_IMAGE`: the same with a numeric ``USER`` (a kubelet refuses ``runAsNonRoot``
  with a named one) whose account has a password field that is not locked (``*``: Debian's sshd
  refuses a locked ``!`` account even for key logins).

Each archive is cached under ``<cache>/node-images/`` by a key of its layers' contents."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from testing import image_check
from testing.emulated_cluster import imagestore
from testing.emulated_cluster.imagestore import ImageConfig, Named

SUITE = "bookworm"
PACKAGES = (
    "python3",
    "python3-venv",
    "openmpi-bin",
    "openssh-server",
    "openssh-client",
    "git",
    "ca-certificates",
    "procps",
)
MPI_IMAGE = "ci-runner.invalid/debian-mpi:bookworm"
NON_ROOT_IMAGE = "ci-runner.invalid/debian-mpi-non-root:bookworm"
NON_ROOT_UID = 1000
WORKDIR = "/horovod/examples"
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
}
# docker/horovod/Dockerfile at v0.28.1, lines 79-82: sshd's privilege separation directory and
# no host key prompts between workers.
SSH_CONFIG = "Host *\n    StrictHostKeyChecking no\n"


def base_layer(cache: Path) -> Path:
    """The debootstrap tarball (``make image-check``'s cache directory), made once."""
    image = image_check.Image(SUITE, list(PACKAGES))
    try:
        return image_check.base_archive(image, image_check.apt_mirror(SUITE), cache / "image-check")
    except image_check.CheckFailed as err:
        raise imagestore.ImageFailed(str(err)) from None


def _sshd_tree(root: Path) -> None:
    # The Dockerfile's `mkdir -p /var/run/sshd` follows Debian's /var/run -> /run link; a
    # var/run directory in this layer would hide that link.
    (root / "run" / "sshd").mkdir(parents=True, mode=0o755)
    config = root / "etc" / "ssh" / "ssh_config.d"
    config.mkdir(parents=True)
    (config / "ci-runner.conf").write_text(SSH_CONFIG)
    (root / WORKDIR.lstrip("/")).mkdir(parents=True)


def _account_tree(root: Path, base: Path) -> None:
    """/etc/passwd, /etc/group and /etc/shadow of ``base`` with the user ``mpiuser``."""
    etc = root / "etc"
    etc.mkdir(parents=True)
    uid = NON_ROOT_UID
    for name, line in (
        ("passwd", f"mpiuser:x:{uid}:{uid}::/home/mpiuser:/bin/sh\n"),
        ("group", f"mpiuser:x:{uid}:\n"),
        ("shadow", "mpiuser:*:19000:0:99999:7:::\n"),
    ):
        (etc / name).write_text((base / "etc" / name).read_text() + line)
    (etc / "shadow").chmod(0o640)
    home = root / "home" / "mpiuser"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    for path in (home, home / ".ssh"):
        os.chown(path, uid, uid)


def mpi_archive(cache: Path) -> Path:
    """:data:`MPI_IMAGE` and :data:`NON_ROOT_IMAGE` in one archive, keyed by the base tarball's
    name (its packages) and the digests of the layers written here (the same tree, the same
    bytes)."""
    base = base_layer(cache)
    directory = cache / "node-images"
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        scratch = Path(tmp)
        sshd = scratch / "sshd"
        _sshd_tree(sshd)
        etc = scratch / "base-etc"
        etc.mkdir()
        imagestore.extract(base, etc, ["./etc/passwd", "./etc/group", "./etc/shadow"])
        account = scratch / "account"
        _account_tree(account, etc)
        layers = [base, imagestore.layer_from_dir(sshd, scratch / "sshd.tar")]
        user_layer = imagestore.layer_from_dir(account, scratch / "account.tar")
        root_config = ImageConfig(cmd=["/bin/bash"], env=ENV, workdir=WORKDIR)
        user_config = ImageConfig(
            cmd=["/bin/bash"],
            env={**ENV, "HOME": "/home/mpiuser"},
            workdir=WORKDIR,
            user=str(NON_ROOT_UID),
        )
        images = [
            Named(MPI_IMAGE, layers, root_config),
            Named(NON_ROOT_IMAGE, [*layers, user_layer], user_config),
        ]
        inputs = [base.name, imagestore.FORMAT]
        for image in images:
            inputs += [image.name, json.dumps(image.config.as_json([]), sort_keys=True)]
            inputs += [imagestore.digest(layer) for layer in image.layers[1:]]
        key = hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:16]
        archive = directory / f"mpi-{key}.tar"
        if not archive.exists():
            imagestore.write_archive(archive, images)
    return archive
