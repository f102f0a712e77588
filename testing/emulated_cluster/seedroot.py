"""The real nodes' containerd roots. Every image is imported once into a seed root on disk,
``<cache>/node-roots/seed-<key>`` (the key: containerd's version and the archives' keys); each
run gives each node a copy whose files are hard links to the seed's (``cp -al``), so the
Horovod image's gigabytes cost a node nothing and a run about a second. Only the two bolt
databases, which containerd writes in place, are real copies: a snapshot's files are overlayfs
lower layers, which no container writes (it writes its own upper layer), and content blobs are
never rewritten. The run's copies are in ``<cache>/node-roots/run``, on the seed's file system
(hard links cannot cross one), and go when the run stops."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from testing.control_plane.run import spawn
from testing.emulated_cluster import containerd, imagestore
from testing.emulated_cluster.imagestore import Source
from testing.host import marks, processes
from testing.host.cgroups import Cgroup

FORMAT = "seed-1"  # bump when the way seeds are made changes
# containerd's metadata store and the overlayfs snapshotter's: bolt files, written in place.
DATABASES = (
    "io.containerd.metadata.v1.bolt/meta.db",
    "io.containerd.snapshotter.v1.overlayfs/metadata.db",
)


def key(sources: Sequence[Source]) -> str:
    version = subprocess.run(
        ["containerd", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    sha = hashlib.sha256(f"{FORMAT}\n{version}".encode())
    for source in sources:
        sha.update(f"\n{source.key}".encode())
    return sha.hexdigest()[:16]


def seed(sources: Sequence[Source], state: Path, cgroup: Cgroup) -> Path:
    """The seed root with every archive of ``sources`` imported (made now if it is not there):
    a containerd of its own, its state and socket in ``state``, its process in ``cgroup``. An
    older seed is removed when a new one is made."""
    path = marks.node_roots() / f"seed-{key(sources)}"
    if path.is_dir():
        return path
    marks.node_roots().mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"[real nodes] making the nodes' seed root {path.name} (once)", file=sys.stderr)
    shutil.rmtree(marks.seed_building(), ignore_errors=True)
    layout = containerd.Layout(state, root_dir=marks.seed_building())
    state.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(containerd.config(layout))
    log = state / "containerd.log"
    cgroup.create()
    process = spawn(["containerd", "--config", str(layout.config)], log, cgroup)
    try:
        containerd.wait_ready(layout, process, log)
        for source in sources:
            with tempfile.TemporaryDirectory(dir=marks.node_roots()) as scratch:
                imagestore.import_archive(layout, source.archive(Path(scratch)))
    finally:
        processes.end(process, 30)
        cgroup.remove()
    for old in marks.node_roots().glob("seed-*"):
        shutil.rmtree(old)
    marks.seed_building().rename(path)
    print(f"[real nodes] {path.name} made in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return path


def clone(seed_root: Path, root: Path) -> None:
    """A node's containerd root at ``root``: the seed's files linked, its databases copied."""
    root.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", str(seed_root), str(root)], check=True)
    for name in DATABASES:
        target = root / name
        copy = target.with_name(target.name + ".copy")
        shutil.copy2(target, copy)
        copy.replace(target)
