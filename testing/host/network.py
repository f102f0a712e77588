"""The emulated cluster's network: one bridge of our own with a private /24 and the node
addresses on it (the nodes' CNI bridge plugin joins each pod to it). Only names from
:mod:`.marks` are created or removed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testing.host import marks


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
