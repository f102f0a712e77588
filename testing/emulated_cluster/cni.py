"""The CNI configuration of one real node: Debian's bridge and host-local plugins
(containernetworking-plugins) on the cluster's bridge, the node's pod CIDR as the address range,
the bridge's address as every pod's gateway, and outside traffic masqueraded (``ipMasq``), so pods
reach what this machine reaches as on a cluster."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

from testing.host import marks

JSON = dict[str, Any]
PLUGIN_DIR = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
VERSION = "0.4.0"  # the newest config version containerd 1.6's libcni and plugins 1.1.1 share


def conflist(pod_cidr: str, ipam_dir: Path) -> JSON:
    """The network list for a node whose pods take addresses from ``pod_cidr`` (a block of the
    bridge's subnet); host-local keeps its leases in ``ipam_dir``."""
    block = ipaddress.ip_network(pod_cidr)
    hosts = list(block.hosts())
    return {
        "cniVersion": VERSION,
        "name": marks.CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": marks.BRIDGE,
                "isGateway": True,
                "ipMasq": True,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [
                        [
                            {
                                "subnet": f"{marks.SUBNET}.0/{marks.PREFIX_LEN}",
                                "rangeStart": str(hosts[0]),
                                "rangeEnd": str(hosts[-1]),
                                "gateway": marks.GATEWAY,
                            }
                        ]
                    ],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def write(conf_dir: Path, pod_cidr: str, ipam_dir: Path) -> Path:
    """The conflist in ``conf_dir`` (containerd's CRI reads the first file there)."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / "10-ci-runner.conflist"
    path.write_text(json.dumps(conflist(pod_cidr, ipam_dir), indent=2) + "\n")
    return path
