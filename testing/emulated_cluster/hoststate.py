"""The machine-wide settings a real node changes, recorded before the first kubelet starts and
put back when the cluster stops (or at the next start, after a killed run): the kubelet sets
``vm.overcommit_memory=1``, ``kernel.panic=10`` and ``kernel.panic_on_oops=1``
(pkg/kubelet/cm/container_manager_linux.go, ``setupKernelTunables``), and the CNI bridge plugin
with ``isGateway`` turns on ``net.ipv4.ip_forward`` (plugins/main/bridge/bridge.go)."""

from __future__ import annotations

import json
from pathlib import Path

from testing.host import marks

SYSCTLS = ("vm.overcommit_memory", "kernel.panic", "kernel.panic_on_oops", "net.ipv4.ip_forward")
PROC_SYS = Path("/proc/sys")


def _path(name: str, proc_sys: Path) -> Path:
    return proc_sys / name.replace(".", "/")


def read(proc_sys: Path = PROC_SYS) -> dict[str, str]:
    """The current value of each of :data:`SYSCTLS`."""
    return {name: _path(name, proc_sys).read_text().strip() for name in SYSCTLS}


def record(record: Path = marks.SYSCTL_RECORD, proc_sys: Path = PROC_SYS) -> None:
    """Keep the values now, unless a record is already there (a killed run's: the older values
    are the machine's own)."""
    if record.exists():
        return
    record.write_text(json.dumps(read(proc_sys), sort_keys=True) + "\n")


def restore(record: Path = marks.SYSCTL_RECORD, proc_sys: Path = PROC_SYS) -> dict[str, str]:
    """Write the recorded values back and remove the record; what was changed (name: the value
    found), empty without a record."""
    if not record.exists():
        return {}
    wanted: dict[str, str] = json.loads(record.read_text())
    changed = {}
    for name, value in wanted.items():
        path = _path(name, proc_sys)
        found = path.read_text().strip()
        if found != value:
            path.write_text(value + "\n")
            changed[name] = found
    record.unlink()
    return changed
