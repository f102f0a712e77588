"""One containerd per real node (kubelets sharing one would garbage-collect each other's
containers): Debian's containerd 1.6 and runc, its root, state, socket, CNI configuration and
network namespaces all under the node's directory, the CRI plugin set for this host."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from testing.control_plane import run
from testing.emulated_cluster import cni
from testing.host import marks

START_TIMEOUT = 30.0


@dataclass(frozen=True)
class Layout:
    """Where one node's containerd keeps everything: in ``directory``, but its root (images,
    snapshots, containers' upper layers) in ``root_dir`` when given."""

    directory: Path
    root_dir: Path | None = None

    @property
    def root(self) -> Path:
        return self.root_dir or self.directory / "root"

    @property
    def state(self) -> Path:
        return self.directory / "state"

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def cni_conf(self) -> Path:
        return self.directory / "cni"

    @property
    def ipam(self) -> Path:
        return self.directory / "ipam"

    @property
    def config(self) -> Path:
        return self.directory / "config.toml"

    @property
    def endpoint(self) -> str:
        """The kubelet's ``containerRuntimeEndpoint``."""
        return f"unix://{self.socket}"


def config(layout: Layout) -> str:
    """containerd 1.6's configuration (version 2) for one node. The CRI plugin's options are
    those of pkg/cri/config/config.go in containerd 1.6: ``restrict_oom_score_adj`` because the
    host gives no CAP_SYS_RESOURCE (runc fails "failed to update /proc/self/oom_score_adj:
    Permission denied" otherwise); the cgroupfs driver (no systemd); network namespaces under
    the state directory, where the run's cleanup finds them; no stream server beyond loopback."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{layout.root}"
state = "{layout.state}"
oom_score = 0
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{layout.socket}"

[ttrpc]
  address = ""

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{layout.directory / "opt"}"

[{cri}]
  sandbox_image = "{marks.PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  max_container_log_line_size = 16384

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
  discard_unpacked_layers = true

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{layout.state / "runc"}"

[{cri}.cni]
  bin_dir = "{cni.PLUGIN_DIR}"
  conf_dir = "{layout.cni_conf}"
  max_conf_num = 1
"""


class ContainerdFailed(Exception):
    """containerd did not come up; the message ends with its log's tail."""


def missing_programs() -> list[str]:
    """Debian's containerd, runc and CNI plugins, as ``make real-node`` installs them."""
    found = [
        name
        for name in ("containerd", "containerd-shim-runc-v2", "runc", "ctr")
        if shutil.which(name) is None
    ]
    found += [
        f"{cni.PLUGIN_DIR}/{p}"
        for p in ("bridge", "host-local", "loopback")
        if not (cni.PLUGIN_DIR / p).exists()
    ]
    return found


def ctr(
    layout: Layout, *args: str, timeout: float = 300, stdin: IO[bytes] | None = None
) -> subprocess.CompletedProcess[str]:
    """``ctr`` against this node's containerd, in the CRI's namespace."""
    return subprocess.run(
        ["ctr", "--address", str(layout.socket), "--namespace", "k8s.io", *args],
        stdin=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def wait_ready(layout: Layout, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until containerd answers on its socket."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise ContainerdFailed(
                f"containerd exited with {process.returncode}:\n{run.log_tail(log)}"
            )
        if layout.socket.exists() and ctr(layout, "version", timeout=10).returncode == 0:
            return
        if time.monotonic() > deadline:
            raise ContainerdFailed(f"containerd did not answer on {layout.socket} in time")
        time.sleep(0.1)
