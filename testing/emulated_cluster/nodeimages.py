"""Images built here from Debian packages for the real nodes, no registry and no container
daemon: the lowest layer is ``debootstrap --variant=minbase`` with the image's packages, made
and cached the way ``make image-check`` makes its base (:func:`testing.image_check.base_archive`:
one tarball per suite, mirror and package list); the layers above are written here.

- :data:`MPI_IMAGE`: Debian's Python, OpenMPI, OpenSSH (client and server) and git, with what
  ``horovod/horovod:0.28.1``'s Dockerfile adds for sshd (``/var/run/sshd``, that is ``/run/sshd``,
  ``StrictHostKeyChecking no``) and its ``WORKDIR /horovod/examples``: what the Horovod image
  is made of below its Python packages;
- :data:`NON_ROOT_IMAGE`: the same with a numeric ``USER`` (a kubelet refuses ``runAsNonRoot``
  with a named one) whose account has a password field that is not locked (``*``: Debian's sshd
  refuses a locked ``!`` account even for key logins);
- :data:`HOROVOD_IMAGE`, under the stock name: :data:`MPI_IMAGE` with torch, Horovod (the wheel
  ``make horovod`` built against this OpenMPI) and pip in the system Python's site directory
  (:mod:`.sitelayer`), and the stock image's PATH;
- :data:`HOROVOD_NON_ROOT_IMAGE`: that with the non-root user.

All four are one archive (:func:`source`), imported once into the nodes' seed
(:mod:`.seedroot`), which is what is cached."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from testing import image_check
from testing.emulated_cluster import imagestore, sitelayer
from testing.emulated_cluster.imagestore import ImageConfig, Named, Source

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
HOROVOD_IMAGE = "horovod/horovod:0.28.1"  # the stock name train.yaml files write
HOROVOD_NON_ROOT_IMAGE = "ci-runner.invalid/horovod-non-root:0.28.1"
NON_ROOT_UID = 1000
WORKDIR = "/horovod/examples"
ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
}
# The stock image's PATH: its CUDA base image's.
HOROVOD_ENV = {**ENV, "PATH": "/usr/local/nvidia/bin:/usr/local/cuda/bin:" + ENV["PATH"]}
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


def _small_layers(cache: Path, scratch: Path) -> tuple[Path, Path, Path]:
    """The base tarball, the sshd layer and the account layer (written into ``scratch``)."""
    base = base_layer(cache)
    sshd = scratch / "sshd"
    _sshd_tree(sshd)
    etc = scratch / "base-etc"
    etc.mkdir()
    imagestore.extract(base, etc, ["./etc/passwd", "./etc/group", "./etc/shadow"])
    account = scratch / "account"
    _account_tree(account, etc)
    sshd_layer = imagestore.layer_from_dir(sshd, scratch / "sshd.tar")
    return base, sshd_layer, imagestore.layer_from_dir(account, scratch / "account.tar")


def _images(base: Path, sshd: Path, account: Path, site: Path) -> list[Named]:
    home = {"HOME": "/home/mpiuser"}
    user = str(NON_ROOT_UID)

    def config(env: dict[str, str], user: str = "") -> ImageConfig:
        return ImageConfig(cmd=["/bin/bash"], env=env, workdir=WORKDIR, user=user)

    return [
        Named(MPI_IMAGE, [base, sshd], config(ENV)),
        Named(NON_ROOT_IMAGE, [base, sshd, account], config({**ENV, **home}, user)),
        Named(HOROVOD_IMAGE, [base, sshd, site], config(HOROVOD_ENV)),
        Named(
            HOROVOD_NON_ROOT_IMAGE,
            [base, sshd, site, account],
            config({**HOROVOD_ENV, **home}, user),
        ),
    ]


def source(cache: Path, venv: Path) -> Source:
    """The archive of the four images, keyed by the base tarball's name (its packages), the
    digests of the small layers written here, the site layer's key (the virtualenv's
    distributions) and the images' configs; written only when a node seed needs it."""
    with tempfile.TemporaryDirectory() as tmp:
        base, sshd, account = _small_layers(cache, Path(tmp))
        inputs = [base.name, imagestore.FORMAT, sitelayer.key(venv)]
        inputs += [imagestore.digest(sshd), imagestore.digest(account)]
        for image in _images(base, sshd, account, base):
            inputs += [image.name, json.dumps(image.config.as_json([]), sort_keys=True)]
    key = "images-" + hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:16]

    def archive(scratch: Path) -> Path:
        base, sshd, account = _small_layers(cache, scratch)
        site = sitelayer.write(venv, scratch / "site")
        layer = imagestore.layer_from_dir(site, scratch / "site.tar")
        shutil.rmtree(site)
        return imagestore.write_archive(scratch / f"{key}.tar", _images(base, sshd, account, layer))

    return Source(key, archive)
