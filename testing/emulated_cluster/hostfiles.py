"""Files the real nodes' programs write outside the run's directory, at paths they hard-wire:
containerd 1.6's shims listen on sockets in ``/run/containerd/s`` (runtime/v2/shim/util_unix.go,
a socket removed when the shim exits cleanly, left when it is killed), libcni caches each
attachment's result in ``/var/lib/cni/results/<network>-<container>-<interface>``
(libcni's ``CacheDir``) and the kubelet's device manager listens in
``/var/lib/kubelet/device-plugins`` (pluginapi.DevicePluginPath), whatever its root directory.
Only what is ours, or a stale socket nothing listens on, is removed; directories only if empty."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

from testing.host import marks

SHIM_SOCKETS = Path("/run/containerd/s")
CNI_RESULTS = Path("/var/lib/cni/results")
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = DEVICE_PLUGINS / "kubelet.sock"
# The directories removed when they end empty, innermost first.
DIRECTORIES = (
    SHIM_SOCKETS,
    SHIM_SOCKETS.parent,
    CNI_RESULTS,
    CNI_RESULTS.parent,
    DEVICE_PLUGINS,
    DEVICE_PLUGINS.parent,
)


def stale(path: Path) -> bool:
    """A unix socket nobody accepts on."""
    with socket.socket(socket.AF_UNIX) as sock:
        try:
            sock.connect(str(path))
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


def socket_inode() -> int | None:
    """The inode of the kubelet's socket file, or None when there is none."""
    try:
        return KUBELET_SOCKET.stat().st_ino
    except OSError:
        return None


def leftovers() -> list[str]:
    """Our files at those paths (stale shim sockets, our CNI results, the kubelet's socket when
    no kubelet listens)."""
    found = []
    if SHIM_SOCKETS.is_dir():
        found += [str(p) for p in sorted(SHIM_SOCKETS.iterdir()) if stale(p)]
    if CNI_RESULTS.is_dir():
        found += [str(p) for p in sorted(CNI_RESULTS.glob(f"{marks.CNI_NETWORK}-*"))]
    if KUBELET_SOCKET.exists() and stale(KUBELET_SOCKET):
        found.append(str(KUBELET_SOCKET))
    return found


def remove_leftovers() -> None:
    for path in leftovers():
        Path(path).unlink(missing_ok=True)
    for directory in DIRECTORIES:
        with contextlib.suppress(OSError):
            directory.rmdir()
