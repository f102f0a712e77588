"""The run's cgroups, for the control plane, each node's kubelet and containerd (and the pods
they make) and the system programs: in the cgroup v2 hierarchy when it has the memory controller,
else the v1 memory hierarchy (this kind of machine mounts v1 + an empty v2). Every cgroup lives
under one directory named :data:`marks.CGROUP_NAME`, so a later start finds the processes and
cgroups of a killed run."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from testing.host import marks

V2 = Path("/sys/fs/cgroup")
V2_UNIFIED = Path("/sys/fs/cgroup/unified")
V1_MEMORY = Path("/sys/fs/cgroup/memory")


def _v2_root() -> Path | None:
    for root in (V2, V2_UNIFIED):
        controllers = root / "cgroup.controllers"
        if controllers.is_file() and "memory" in controllers.read_text().split():
            return root
    return None


def hierarchy() -> tuple[Path, bool]:
    """(mount point of the memory hierarchy, is it v2)."""
    root = _v2_root()
    if root is not None:
        return root, True
    if (V1_MEMORY / "memory.limit_in_bytes").exists():
        return V1_MEMORY, False
    raise RuntimeError("no memory cgroup controller on this machine (v2 or v1)")


def own_cgroup(root: Path, v2: bool) -> Path:
    """The cgroup this process is in, in that hierarchy."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if (v2 and number == "0") or (not v2 and "memory" in controllers.split(",")):
            return root / path.lstrip("/")
    return root


def run_root() -> Path:
    """Where this run's cgroups go: beside the process that starts the cluster."""
    root, v2 = hierarchy()
    parent = own_cgroup(root, v2)
    if v2:
        # v2: processes only in leaves; our directory is a sibling-level child with memory on.
        path = parent / marks.CGROUP_NAME
        path.mkdir(exist_ok=True)
        (path / "cgroup.subtree_control").write_text("+memory")
        return path
    path = parent / marks.CGROUP_NAME
    path.mkdir(exist_ok=True)
    return path


def v1_hierarchies() -> list[Path]:
    """The mount point of every cgroup v1 hierarchy (cpu, memory, pids, ...; none on a v2-only
    machine)."""
    if not V2.is_dir():
        return []
    return sorted(
        p
        for p in V2.iterdir()
        if p.is_dir()
        and not p.is_symlink()
        and (p / "cgroup.procs").exists()
        and not (p / "cgroup.controllers").exists()
    )


def make_everywhere(relative: str) -> None:
    """The cgroup ``relative`` (a path from the root, as a v1 kubelet's ``cgroupRoot``) in every
    v1 hierarchy. A new cpuset cgroup has no CPUs or memory nodes until given its parent's."""
    for hierarchy in v1_hierarchies():
        path = hierarchy / relative.strip("/")
        missing = [p for p in (path, *path.parents) if not p.exists()]
        for directory in reversed(missing):
            directory.mkdir()
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (directory / name).exists() and not (directory / name).read_text().strip():
                    (directory / name).write_text((directory.parent / name).read_text())


def ours() -> list[Path]:
    """Every cgroup directory named :data:`marks.CGROUP_NAME` (this run's or a killed one's), in
    every hierarchy (a real node's kubelet and runc make the pods' in each v1 one)."""
    found: list[Path] = []
    roots = [r for r in (V2, V2_UNIFIED) if (r / "cgroup.controllers").is_file()]
    roots += v1_hierarchies()
    for root in roots:
        for dirpath, dirnames, _ in os.walk(root):
            if os.path.basename(dirpath) == marks.CGROUP_NAME:
                found.append(Path(dirpath))
                dirnames.clear()
            elif dirpath.count("/") - str(root).count("/") > 4:
                dirnames.clear()
    return found


def _enable_memory_down_to(path: Path) -> None:
    """v2: a child has memory.max only if every ancestor delegates the memory controller."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        control = directory.parent / "cgroup.subtree_control"
        if "memory" not in control.read_text().split():
            control.write_text("+memory")
        directory.mkdir()


class Cgroup:
    """One cgroup of this run: the control plane's, a node's, a system program's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        existing = next(p for p in (path, *path.parents) if p.exists())
        self.v2 = (existing / "cgroup.controllers").exists()

    def create(self) -> Cgroup:
        if self.v2:
            _enable_memory_down_to(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    def add_self(self) -> None:
        """Move the calling process in (run in the child between fork and exec)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def pids(self) -> list[int]:
        found: list[int] = []
        for dirpath, _, files in os.walk(self.path):
            if "cgroup.procs" in files:
                try:
                    text = Path(dirpath, "cgroup.procs").read_text()
                except OSError:
                    continue
                found.extend(int(p) for p in text.split())
        return found

    def kill_all(self) -> None:
        """SIGKILL every process in it and below until none is left."""
        for _ in range(100):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)

    def remove(self) -> None:
        """Kill what is left and remove the directory tree, leaves first."""
        if not self.path.exists():
            return
        self.kill_all()
        for dirpath, _, _ in sorted(os.walk(self.path), key=lambda t: -len(t[0])):
            for _ in range(50):
                try:
                    os.rmdir(dirpath)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
