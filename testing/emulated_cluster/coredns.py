"""Cluster DNS for the real nodes: CoreDNS v1.15.0 (built from its module by
``scripts/setup-control-plane.sh``) on the bridge's gateway, its kubernetes plugin serving the
cluster domain from Services and EndpointSlices, every other name forwarded to this machine's
resolver, as kubeadm's default Corefile does (cmd/kubeadm/app/phases/addons/dns/manifests.go).
It reads the API as the user ``system:coredns`` with kubeadm's ClusterRole of that name."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import yaml

from testing.control_plane import rbac
from testing.control_plane.run import ControlPlane, cert_user, kubeconfig, log_tail, spawn
from testing.host import marks, processes
from testing.host.cgroups import Cgroup
from testing.kube_api import Api, ApiFailure

USER = "system:coredns"
# kubeadm's ClusterRole system:coredns (manifests.go, CoreDNSClusterRole).
RULES = (
    {
        "apiGroups": [""],
        "resources": ["endpoints", "services", "pods", "namespaces"],
        "verbs": ["list", "watch"],
    },
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["list", "watch"],
    },
)
START_TIMEOUT = 30.0


def corefile(address: str, domain: str, config: Path, upstream: str = "/etc/resolv.conf") -> str:
    """kubeadm's Corefile, bound to ``address``, the API reached with ``config``."""
    return f""".:{marks.DNS_PORT} {{
    bind {address}
    errors
    kubernetes {domain} in-addr.arpa ip6.arpa {{
        kubeconfig {config}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    forward . {upstream}
    cache 5
    loop
}}
"""


def grant(api: Api) -> None:
    """kubeadm's ClusterRole ``system:coredns``, bound to :data:`USER`."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": USER},
        "rules": list(RULES),
    }
    try:
        api.create(f"{rbac.RBAC}/clusterroles", role)
    except ApiFailure as err:
        if err.code != 409:
            raise
    rbac.bind_cluster_role(api, USER, USER)


class CoreDns:
    """``start()`` after the control plane; ``stop()`` ends it."""

    def __init__(
        self, control: ControlPlane, binary: Path, state: Path, domain: str, cgroup: Cgroup
    ) -> None:
        self.control = control
        self.binary = binary
        self.state = state
        self.domain = domain
        self.cgroup = cgroup
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.state / "coredns.log"

    def start(self) -> CoreDns:
        self.state.mkdir(parents=True, exist_ok=True)
        grant(self.control.admin_api())
        pair = self.control.client_certificate(USER)
        config = self.state / "coredns.kubeconfig"
        config.write_text(
            yaml.safe_dump(kubeconfig(self.control.url, self.control.ca, cert_user(pair)))
        )
        core = self.state / "Corefile"
        core.write_text(corefile(marks.GATEWAY, self.domain, config))
        self.process = spawn(
            [str(self.binary), "-conf", str(core)], self.log, self.cgroup, cwd=self.state
        )
        self._wait_answering()
        return self

    def _wait_answering(self) -> None:
        """Until it answers for the API's own Service (its kubernetes plugin has synced)."""
        name = f"kubernetes.default.svc.{self.domain}"
        query = b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
        query += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00"
        query += b"\x00\x01\x00\x01"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"coredns exited with {self.process.returncode}:\n{log_tail(self.log)}"
                )
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.settimeout(0.3)
                try:
                    probe.sendto(query, (marks.GATEWAY, marks.DNS_PORT))
                    answer = probe.recv(512)
                    if answer[3] & 0x0F == 0 and answer[6:8] != b"\x00\x00":
                        return  # NOERROR with an answer
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"coredns does not answer for {name} after {START_TIMEOUT}s")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None:
            processes.end(self.process, 5)
            self.process = None
