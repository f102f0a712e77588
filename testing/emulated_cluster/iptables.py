"""The iptables rules the real nodes leave: the CNI bridge plugin's masquerade for each pod
(a ``CNI-<hash>`` chain in the nat table, jumped to from POSTROUTING by a rule whose comment
names the network: plugins/pkg/ip/ipmasq_linux.go), which a killed run never deletes, and the
kubelet's own chains, which it never deletes (pkg/kubelet/kubelet_network_linux.go: the
``KUBE-FIREWALL`` chain, jumped to from INPUT and OUTPUT, and the ``KUBE-KUBELET-CANARY`` and
``KUBE-IPTABLES-HINT`` chains, for IPv4 and IPv6). No other kubelet runs on this machine (one
emulated cluster at a time), so those chains are ours."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

from testing.host import marks

CHAIN = re.compile(r"-j (CNI-[0-9a-f]+)")


KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")
TABLES = ("filter", "nat", "mangle")
PROGRAMS = ("iptables", "ip6tables")


def _iptables(*args: str, program: str = "iptables") -> subprocess.CompletedProcess[str]:
    """``program`` with ``args``; a machine without it has none of these rules (an empty
    answer)."""
    if shutil.which(program) is None:
        return subprocess.CompletedProcess([program, *args], 0, "", "")
    return subprocess.run([program, "-w", *args], capture_output=True, text=True, check=False)


def kubelet_chains() -> list[str]:
    """``program table chain`` for each of :data:`KUBELET_CHAINS` that exists."""
    found = []
    for program in PROGRAMS:
        for table in TABLES:
            listed = _iptables("-t", table, "-S", program=program).stdout.splitlines()
            found += [
                f"{program} {table} {line.split()[1]}"
                for line in listed
                if line.startswith("-N ") and line.split()[1] in KUBELET_CHAINS
            ]
    return found


def remove_kubelet_chains() -> None:
    """The jumps to :data:`KUBELET_CHAINS` from the built-in chains, then the chains."""
    for entry in kubelet_chains():
        program, table, chain = entry.split()
        for line in _iptables("-t", table, "-S", program=program).stdout.splitlines():
            words = shlex.split(line)
            if words[0] == "-A" and words[-2:] == ["-j", chain]:
                _iptables("-t", table, "-D", *words[1:], program=program)
        _iptables("-t", table, "-F", chain, program=program)
        _iptables("-t", table, "-X", chain, program=program)


def our_rules() -> list[str]:
    """The nat POSTROUTING rules (``iptables -S`` lines) of :data:`marks.CNI_NETWORK`."""
    listed = _iptables("-t", "nat", "-S", "POSTROUTING").stdout.splitlines()
    mark = f'name: \\"{marks.CNI_NETWORK}\\"'
    return [line for line in listed if mark in line or f'name: "{marks.CNI_NETWORK}"' in line]


def remove_ours() -> None:
    """Delete each of :func:`our_rules` and the chain it jumps to, and the kubelet's chains."""
    for rule in our_rules():
        words = shlex.split(rule)
        _iptables("-t", "nat", "-D", *words[1:])
        found = CHAIN.search(rule)
        if found:
            _iptables("-t", "nat", "-F", found.group(1))
            _iptables("-t", "nat", "-X", found.group(1))
    remove_kubelet_chains()
