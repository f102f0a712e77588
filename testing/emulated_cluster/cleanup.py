"""What the emulated cluster leaves on this machine, found by the names in
:mod:`testing.host.marks`, and
its removal: the first thing a start does (after a crash) and the last thing a stop does. The
real nodes' seed root is the cache's and stays."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testing.emulated_cluster import hostfiles, hoststate, iptables
from testing.host import cgroups, marks, network


def _on_disk() -> list[Path]:
    """What a run keeps on disk: its real nodes' containerd roots and a seed it was making."""
    return [marks.run_node_roots(), marks.seed_building()]


def our_mounts() -> list[str]:
    """Mount points in this mount namespace under the state root, ours in /run/netns, or under
    what a run keeps on disk."""
    prefixes = (
        str(marks.STATE_ROOT),
        "/run/netns/" + marks.NETNS_PREFIX,
        *(f"{path}/" for path in _on_disk()),
    )
    return [
        point
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if (point := line.split()[4]).startswith(prefixes)
    ]


def our_processes() -> list[int]:
    return sorted(pid for path in cgroups.ours() for pid in cgroups.Cgroup(path).pids())


def inventory() -> dict[str, list[str]]:
    """Everything of ours that exists now (empty lists when nothing is left)."""
    return {
        "processes": [str(p) for p in our_processes()],
        "netns": network.our_netns(),
        "links": network.our_links(),
        "mounts": our_mounts(),
        "cgroups": [str(p) for p in cgroups.ours()],
        "iptables": iptables.our_rules() + iptables.kubelet_chains(),
        "files": hostfiles.leftovers(),
        "sysctls": [str(marks.SYSCTL_RECORD)] if marks.SYSCTL_RECORD.exists() else [],
        "state": [str(p) for p in (marks.STATE_ROOT, *_on_disk()) if p.exists()],
    }


def remove_everything() -> None:
    """Processes first (they hold namespaces and mounts), then namespaces, links, mounts,
    cgroups, iptables rules and the state directory; the sysctls a kubelet changed go back."""
    for path in cgroups.ours():
        cgroups.Cgroup(path).kill_all()
    for name in network.our_netns():
        network.ip("netns", "del", name, check=False)
    for link in network.our_links():
        if link != marks.BRIDGE:
            network.ip("link", "del", link, check=False)
    network.bridge_down()
    for point in sorted(our_mounts(), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)
    for path in cgroups.ours():
        cgroups.Cgroup(path).remove()
    iptables.remove_ours()
    hostfiles.remove_leftovers()
    hoststate.restore()
    if not our_mounts():
        for path in (marks.STATE_ROOT, *_on_disk()):
            if path.exists():
                subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)
