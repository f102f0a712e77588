"""What scripted-cluster runs left on this machine (found by :mod:`.names`) and its removal:
a start removes what runs whose process is dead left; a stop removes its own run's."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from testing.host import cgroups, network
from testing.scripted_cluster.names import (
    CGROUP_PREFIX,
    NETNS_PREFIX,
    STATE_PREFIX,
    alive,
    run_of,
)


def _cgroup_dirs() -> list[Path]:
    """Every cgroup directory named ``ci-runner-scripted-<pid>`` (any hierarchy, shallow)."""
    root, _ = cgroups.hierarchy()
    found: list[Path] = []
    for dirpath, dirnames, _ in os.walk(root):
        if os.path.basename(dirpath).startswith(CGROUP_PREFIX):
            found.append(Path(dirpath))
            dirnames.clear()
        elif dirpath.count("/") - str(root).count("/") > 4:
            dirnames.clear()
    return found


def _netns() -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob(NETNS_PREFIX + "*"))


def _state_dirs() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(STATE_PREFIX + "*"))


def inventory(run: str | None = None) -> dict[str, list[str]]:
    """What exists now of ``run`` (``<pid>-<serial>``; of every run when None)."""

    def chosen(name: str) -> bool:
        return run is None or run_of(name) == run

    return {
        "processes": [
            str(p) for c in _cgroup_dirs() if chosen(c.name) for p in cgroups.Cgroup(c).pids()
        ],
        "cgroups": [str(c) for c in _cgroup_dirs() if chosen(c.name)],
        "netns": [n for n in _netns() if chosen(n)],
        "state": [str(d) for d in _state_dirs() if chosen(d.name)],
    }


def remove(run: str) -> None:
    """Everything of ``run``: processes first (they hold the namespace), then the namespace,
    the cgroup and the state directory."""
    for path in _cgroup_dirs():
        if run_of(path.name) == run:
            cgroups.Cgroup(path).remove()
    for name in _netns():
        if run_of(name) == run:
            network.ip("netns", "del", name, check=False)
    for directory in _state_dirs():
        if run_of(directory.name) == run:
            shutil.rmtree(directory, ignore_errors=True)


def remove_dead_runs() -> list[str]:
    """Remove what runs whose process is gone left; those runs."""
    names = [p.name for p in _cgroup_dirs()] + _netns() + [d.name for d in _state_dirs()]
    dead = sorted(
        {run for run in map(run_of, names) if run is not None and not alive(int(run.split("-")[0]))}
    )
    for run in dead:
        remove(run)
    return dead
