"""One real node: its containerd (Debian's, with runc and the CNI plugins) and kubelet v1.35.4
(built from the k8s.io/kubernetes module), registered with its ``system:node`` certificate,
serving HTTPS on its InternalIP on the cluster's bridge. Both processes go into the node's
cgroup, every file under the node's directory in the run's state tmpfs but containerd's root (a
copy of the seed's: :mod:`.seedroot`) and the kubelet's (pods' volumes), which are on disk; the
pods' cgroups under a cgroup root of the run's."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from testing.control_plane.run import ControlPlane, cert_user, kubeconfig, log_tail, spawn
from testing.emulated_cluster import cni, containerd, hostfiles, kubeletconfig, seedroot
from testing.host import cgroups, marks, processes
from testing.host.cgroups import Cgroup

READY_TIMEOUT = 90.0  # the kubelet's first status on 2 busy cores


class NodeFailed(Exception):
    """A real node did not come up; the message ends with the log's tail."""


@dataclass
class NodeSettings:
    """What one real node is: its name, address, pod CIDR, shape and the images it has."""

    name: str
    ip: str
    pod_cidr: str
    cpu: str
    memory: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)


class RealNode:
    """``start()`` brings containerd up, imports the images and starts the kubelet; ``stop()``
    ends both (the run's cleanup removes pods' processes, mounts, netns and cgroups)."""

    def __init__(
        self,
        settings: NodeSettings,
        control: ControlPlane,
        kubelet_binary: Path,
        directory: Path,
        cgroup: Path,
        cgroup_root: str,
    ) -> None:
        """``cgroup``: where containerd and the kubelet run (memory hierarchy); ``cgroup_root``:
        the kubelet's ``cgroupRoot``, a path in every v1 hierarchy."""
        self.settings = settings
        self.control = control
        self.kubelet_binary = kubelet_binary
        self.directory = directory
        self.cgroup = Cgroup(cgroup)
        self.cgroup_root = cgroup_root
        # On disk: the images, and what pods write (emptyDirs); a node's ephemeral-storage is
        # its kubelet root's file system, and a worker asks for gigabytes.
        self.on_disk = marks.run_node_roots() / settings.name
        self.layout = containerd.Layout(directory / "containerd", self.on_disk / "containerd")
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def kubelet_log(self) -> Path:
        return self.directory / "kubelet.log"

    @property
    def containerd_log(self) -> Path:
        return self.directory / "containerd.log"

    def _spawn(self, argv: list[str], log: Path) -> subprocess.Popen[bytes]:
        process = spawn(argv, log, self.cgroup)
        self.processes.append(process)
        return process

    def start_runtime(self, seed: Path) -> RealNode:
        """containerd up on a copy of the ``seed`` root (the images), with the node's CNI
        configuration."""
        self.directory.mkdir(parents=True, exist_ok=True)
        seedroot.clone(seed, self.layout.root)
        self.cgroup.create()
        cni.write(self.layout.cni_conf, self.settings.pod_cidr, self.layout.ipam)
        self.layout.config.write_text(containerd.config(self.layout))
        process = self._spawn(
            ["containerd", "--config", str(self.layout.config), "--log-level", "warn"],
            self.containerd_log,
        )
        containerd.wait_ready(self.layout, process, self.containerd_log)
        return self

    def start_kubelet(self) -> RealNode:
        """The kubelet, once its runtime answers."""
        settings, control = self.settings, self.control
        pair = control.client_certificate(f"system:node:{settings.name}", ("system:nodes",))
        serving = control.serving_certificate(
            f"kubelet-{settings.name}", settings.ip, settings.name
        )
        config_path = self.directory / "kubelet.kubeconfig"
        config_path.write_text(yaml.safe_dump(kubeconfig(control.url, control.ca, cert_user(pair))))
        cgroups.make_everywhere(self.cgroup_root)
        files = kubeletconfig.NodeFiles(
            control.ca, serving.cert, serving.key, self.directory / "pod-logs"
        )
        reserved = kubeletconfig.system_reserved(
            settings.cpu, settings.memory, kubeletconfig.machine()
        )
        body = kubeletconfig.config(
            settings.ip, self.layout.endpoint, self.cgroup_root, files, reserved
        )
        if settings.taints:
            body["registerWithTaints"] = settings.taints
        kubelet_config = self.directory / "kubelet.yaml"
        kubelet_config.write_text(yaml.safe_dump(body, sort_keys=False))
        labels = ",".join(f"{k}={v}" for k, v in sorted(settings.labels.items()))
        self._spawn(
            [
                str(self.kubelet_binary),
                f"--config={kubelet_config}",
                f"--kubeconfig={config_path}",
                f"--root-dir={self.on_disk / 'kubelet'}",
                f"--hostname-override={settings.name}",
                f"--node-ip={settings.ip}",
                *([f"--node-labels={labels}"] if labels else []),
                "--v=1",
            ],
            self.kubelet_log,
        )
        return self

    def wait_bound(self, before: int | None, timeout: float = 30.0) -> None:
        """Until this kubelet has bound the device manager's socket (a new file at
        :data:`hostfiles.KUBELET_SOCKET` than the inode ``before``), or has exited (then
        :meth:`wait_ready` says why). Every kubelet of the machine binds that same path after
        removing what is in its directory: two started together can both remove, then both bind,
        and the later exits with "address already in use"."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.processes[-1].poll() is None:
            if hostfiles.socket_inode() not in (None, before):
                return
            time.sleep(0.05)

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Until the Node says Ready (the kubelet registered it and its runtime and network are
        up)."""
        api = self.control.admin_api()
        deadline = time.monotonic() + timeout
        while True:
            for process, program, log in zip(
                self.processes,
                ("containerd", "kubelet"),
                (self.containerd_log, self.kubelet_log),
                strict=False,
            ):
                if process.poll() is not None:
                    raise NodeFailed(
                        f"{self.settings.name}: {program} exited with {process.returncode}:\n"
                        + log_tail(log)
                    )
            node = api.get(f"/api/v1/nodes/{self.settings.name}") or {}
            conditions = (node.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                return
            if time.monotonic() > deadline:
                raise NodeFailed(
                    f"{self.settings.name} not Ready after {timeout:.0f}s:\n"
                    + log_tail(self.kubelet_log)
                )
            time.sleep(0.3)

    def stop(self) -> None:
        """SIGTERM the kubelet, then containerd (their pods are the cleanup's)."""
        for process in reversed(self.processes):
            processes.end(process, 10)
        self.processes = []
