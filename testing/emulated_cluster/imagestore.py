"""Images for the real nodes, with no registry: each is written here as an OCI image layout
archive (one uncompressed layer, its config and manifest, the name in the index's
``io.containerd.image.name`` annotation, as ``ctr images export`` writes it), cached under
``<cache>/node-images/`` by a key of what went in, and imported into each node's containerd with
``ctr -n k8s.io images import``. Pods name them with ``imagePullPolicy: IfNotPresent``.

Two small images are made from this machine's files: the pause image (a static build of the
kubernetes module's ``build/pause/linux/pause.c``, as its ``build/pause/Makefile`` builds it)
and :data:`BUSYBOX_IMAGE` (Debian's busybox-static)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testing.emulated_cluster import containerd
from testing.host import marks
from testing.paths import REPO_ROOT

JSON = dict[str, Any]
BUSYBOX_IMAGE = "ci-runner.invalid/busybox-static:bookworm"
BUSYBOX = Path("/bin/busybox")
KUBERNETES_MODULE = REPO_ROOT / "testing" / "control_plane" / "modules" / "kubernetes"
PAUSE_VERSION = marks.PAUSE_IMAGE.rsplit(":", 1)[1]
# build/pause/Makefile's CFLAGS (kubernetes v1.35.4), REV named for this build.
PAUSE_CFLAGS = ("-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{PAUSE_VERSION}-ci-runner")
FORMAT = "oci-archive-3"  # bump when the way archives are written changes: a new cache key
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
LAYOUT_ENTRIES = ("oci-layout", "index.json", "blobs")  # an archive's, in this order


class ImageFailed(Exception):
    """An image could not be made or imported; the message says what and how to fix it."""


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an OCI image config a container sees."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    user: str = ""
    workdir: str = ""

    def as_json(self, diff_ids: list[str]) -> JSON:
        inner: JSON = {"Env": [f"{k}={v}" for k, v in self.env.items()]}
        if self.entrypoint:
            inner["Entrypoint"] = self.entrypoint
        if self.cmd:
            inner["Cmd"] = self.cmd
        if self.user:
            inner["User"] = self.user
        if self.workdir:
            inner["WorkingDir"] = self.workdir
        return {
            "architecture": "amd64",
            "os": "linux",
            "config": inner,
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }


@dataclass(frozen=True)
class Named:
    """One image of an archive: its name, its layers (uncompressed tars, lowest first) and
    config."""

    name: str
    layers: Sequence[Path]
    config: ImageConfig


@dataclass(frozen=True)
class Source:
    """Images for the nodes' seed: the key of what is in them, and how to have them (given a
    scratch directory, which the caller removes): an archive or an OCI layout directory."""

    key: str
    archive: Callable[[Path], Path]


def cached(archive: Path) -> Source:
    """An archive already kept in the cache under a name that is its key."""
    return Source(archive.name, lambda _: archive)


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
    return "sha256:" + sha.hexdigest()


def _blob(blobs: Path, data: bytes) -> JSON:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def layer_from_dir(root: Path, out: Path, keep_times: bool = False) -> Path:
    """An uncompressed layer tar of the directory ``root`` (numeric owners, xattrs kept), the
    same bytes for the same tree (sorted, every time stamp 0): a cache key can be its digest.
    ``keep_times``: each file's own modification time instead, as a Python package needs it (a
    ``.pyc`` records its module's time and size: a module of another time is compiled again at
    every import, by every container)."""
    times = [] if keep_times else ["--mtime=@0"]
    subprocess.run(
        [
            "tar",
            "--numeric-owner",
            "--xattrs",
            "--sort=name",
            *times,
            "--format=posix",
            "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
            "-C",
            str(root),
            "-cf",
            str(out),
            ".",
        ],
        check=True,
    )
    return out


def extract(layer: Path, dest: Path, members: Sequence[str]) -> None:
    """Some files of a layer tar (``./etc/passwd``...) into ``dest``."""
    subprocess.run(["tar", "-C", str(dest), "-xf", str(layer), *members], check=True)


def normalized(image: str) -> str:
    """docker.io/library/ for one path component, docker.io/ for a name without registry, as
    containerd (distribution/reference ParseNormalizedNamed) names it; :latest when untagged."""
    name = image.split("@")[0]
    first = name.split("/")[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if ":" not in name.rsplit("/", 1)[-1] and "@" not in image:
        name += ":latest"
    return name


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` the same file as ``source`` (a hard link), or a copy across file systems: a
    layer of gigabytes costs no copy on the same one."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def write_archive(archive: Path, images: Sequence[Named]) -> Path:
    """The OCI layout of ``images`` as one tar at ``archive`` (written beside it, then moved)."""
    with tempfile.TemporaryDirectory(dir=archive.parent) as tmp:
        layout = write_layout(Path(tmp) / "layout", images)
        partial = Path(tmp) / "archive.tar"
        subprocess.run(["tar", "-C", str(layout), "-cf", str(partial), *LAYOUT_ENTRIES], check=True)
        partial.replace(archive)
    return archive


def write_layout(layout: Path, images: Sequence[Named]) -> Path:
    """The OCI image layout of ``images`` in the directory ``layout``, the layers linked in."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    manifests = []
    for image in images:
        layers: list[JSON] = []
        for layer in image.layers:
            layer_digest = digest(layer)
            target = blobs / layer_digest.split(":", 1)[1]
            if not target.exists():
                link_or_copy(layer, target)
            layers.append(
                {"mediaType": LAYER_TYPE, "digest": layer_digest, "size": target.stat().st_size}
            )
        config = json.dumps(image.config.as_json([str(d["digest"]) for d in layers])).encode()
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                **_blob(blobs, config),
            },
            "layers": layers,
        }
        reference = image.name.rsplit(":", 1)[1]
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                **_blob(blobs, json.dumps(manifest).encode()),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": normalized(image.name),
                    "org.opencontainers.image.ref.name": reference,
                },
            }
        )
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    }
    (layout / "index.json").write_text(json.dumps(index))
    return layout


def import_archive(layout: containerd.Layout, archive: Path) -> None:
    """Import (and unpack) every image of ``archive`` into one node's containerd: a tar, or an
    OCI layout directory, streamed to ``ctr`` as a tar (no archive of gigabytes on disk)."""
    tar_code = 0
    if archive.is_dir():
        # Leaving the block closes tar's pipe and waits for it.
        with subprocess.Popen(
            ["tar", "-C", str(archive), "-cf", "-", *LAYOUT_ENTRIES], stdout=subprocess.PIPE
        ) as tar:
            done = containerd.ctr(layout, "images", "import", "-", stdin=tar.stdout)
        tar_code = tar.returncode
    else:
        done = containerd.ctr(layout, "images", "import", str(archive))
    if done.returncode != 0:  # ctr's words first: a tar whose reader quit fails too
        raise ImageFailed(f"ctr images import {archive.name} failed: {done.stderr.strip()}")
    if tar_code != 0:
        raise ImageFailed(f"tar of {archive} exited with {tar_code}")


def _key(*parts: bytes) -> str:
    sha = hashlib.sha256(FORMAT.encode())
    for part in parts:
        sha.update(hashlib.sha256(part).digest())
    return sha.hexdigest()[:16]


def _cached(cache: Path, key: str) -> tuple[Path, bool]:
    directory = cache / "node-images"
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / f"{key}.tar"
    return archive, archive.exists()


def prune(keep: Sequence[Path]) -> None:
    """Remove what the node-images directory holds besides the archives ``keep``: those of
    older keys (a new pause.c, busybox or format), which nothing reads again."""
    directory = keep[0].parent
    for path in directory.iterdir():
        if path not in keep and path.suffix == ".tar":
            path.unlink()


def pause_source() -> Path:
    """``build/pause/linux/pause.c`` of the pinned k8s.io/kubernetes module (Go's module cache)."""
    done = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=KUBERNETES_MODULE,
        capture_output=True,
        text=True,
        check=False,
    )
    source = Path(done.stdout.strip()) / "build" / "pause" / "linux" / "pause.c"
    if done.returncode != 0 or not source.is_file():
        raise ImageFailed(
            "cannot find the kubernetes module's build/pause/linux/pause.c; fix: run "
            "scripts/setup-control-plane.sh (it downloads the module)"
        )
    return source


def pause_archive(cache: Path) -> Path:
    """The pause image's archive, made once per pause.c and flags."""
    source = pause_source()
    archive, ready = _cached(cache, _key(source.read_bytes(), " ".join(PAUSE_CFLAGS).encode()))
    if ready:
        return archive
    with tempfile.TemporaryDirectory(dir=archive.parent) as tmp:
        root = Path(tmp) / "root"
        root.mkdir()
        done = subprocess.run(
            ["gcc", *PAUSE_CFLAGS, "-o", str(root / "pause"), str(source)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise ImageFailed(f"building pause.c failed: {done.stderr.strip()}")
        layer = layer_from_dir(root, Path(tmp) / "layer.tar")
        config = ImageConfig(entrypoint=["/pause"], user="65535:65535")
        write_archive(archive, [Named(marks.PAUSE_IMAGE, [layer], config)])
    return archive


def busybox_archive(cache: Path) -> Path:
    """:data:`BUSYBOX_IMAGE`: Debian's static busybox with its applets in /bin, root and nobody."""
    if not BUSYBOX.is_file():
        raise ImageFailed(f"{BUSYBOX} is missing; fix: apt-get install busybox-static")
    binary = BUSYBOX.read_bytes()
    archive, ready = _cached(cache, _key(binary))
    if ready:
        return archive
    applets = subprocess.run(
        [str(BUSYBOX), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    with tempfile.TemporaryDirectory(dir=archive.parent) as tmp:
        root = Path(tmp) / "root"
        for directory in ("bin", "etc", "tmp", "root"):
            (root / directory).mkdir(parents=True)
        (root / "tmp").chmod(0o1777)
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        for applet in applets:
            if applet != "busybox":
                (root / "bin" / applet).symlink_to("busybox")
        (root / "etc" / "passwd").write_text(
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
        )
        (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
        layer = layer_from_dir(root, Path(tmp) / "layer.tar")
        config = ImageConfig(cmd=["/bin/sh"], env={"PATH": "/bin"})
        write_archive(archive, [Named(BUSYBOX_IMAGE, [layer], config)])
    return archive
