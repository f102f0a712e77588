"""The emulated cluster's network: one bridge of our own with a private /24, a network namespace
per pod joined to it by a veth pair, node addresses on the bridge. Only names from
:mod:`.marks` are created or removed."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from testing.emulated_cluster import marks


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def bridge_up(node_addresses: list[str]) -> None:
    """The bridge with the gateway and every node's InternalIP on it."""
    ip("link", "add", marks.BRIDGE, "type", "bridge")
    ip("addr", "add", f"{marks.GATEWAY}/{marks.PREFIX_LEN}", "dev", marks.BRIDGE)
    for address in node_addresses:
        ip("addr", "add", f"{address}/32", "dev", marks.BRIDGE)
    ip("link", "set", marks.BRIDGE, "up")


def bridge_down() -> None:
    ip("link", "del", marks.BRIDGE, check=False)


def our_netns() -> list[str]:
    return sorted(p.name for p in Path("/run/netns").glob(marks.NETNS_PREFIX + "*"))


def our_links() -> list[str]:
    out = ip("-o", "link", "show", check=False).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line]
    return [n for n in names if n == marks.BRIDGE or n.startswith(marks.VETH_PREFIX)]


class Addresses:
    """Pod IPs from the /24, handed out and returned by the kubelets of this run."""

    def __init__(self) -> None:
        self._free = list(marks.POD_ADDRESSES)
        self._lock = threading.Lock()

    def take(self) -> str:
        with self._lock:
            return self._free.pop(0)

    def give_back(self, address: str) -> None:
        with self._lock:
            if address not in self._free:
                self._free.append(address)


def pod_network_up(uid: str, address: str) -> str:
    """A netns with lo and eth0 (``address``/24, default route via the bridge); its name."""
    netns, veth = marks.netns_name(uid), marks.veth_name(uid)
    ip("netns", "add", netns)
    ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
    ip("link", "set", veth, "master", marks.BRIDGE, "up")
    inside = ("netns", "exec", netns, "ip")
    ip(*inside, "link", "set", "lo", "up")
    ip(*inside, "addr", "add", f"{address}/{marks.PREFIX_LEN}", "dev", "eth0")
    ip(*inside, "link", "set", "eth0", "up")
    ip(*inside, "route", "add", "default", "via", marks.GATEWAY)
    return netns


def pod_network_down(uid: str) -> None:
    """Deleting the netns destroys eth0 and with it the host's end of the veth."""
    ip("netns", "del", marks.netns_name(uid), check=False)
    ip("link", "del", marks.veth_name(uid), check=False)
