"""Pod volumes laid out as the kubelet lays them out, under the pod's directory on the node.

- emptyDir (``pkg/volume/emptydir``): a directory of mode 0777; ``medium: Memory`` a tmpfs.
- secret (``pkg/volume/secret``): a tmpfs (the kubelet wraps a memory-backed emptyDir, whose
  root a fresh tmpfs leaves at mode 1777) filled by the AtomicWriter.
- configMap (``pkg/volume/configmap``): a disk emptyDir filled by the AtomicWriter.
- AtomicWriter (``pkg/volume/util/atomic_writer.go``): the payload goes into a new directory
  ``..<UTC 2006_01_02_15_04_05>.<random>`` (mode 0755), ``..data`` is a symlink to it and each
  user-visible name is a symlink ``name -> ..data/name``. Files get ``items[].mode`` or
  ``defaultMode`` (0644 when unset, ``SecretVolumeSourceDefaultMode``/``ConfigMapVolume...``).
- persistentVolumeClaim: a directory per claim shared by every node of this machine; whether a
  second node may attach it is decided by :func:`attach_conflict` from the claim's access modes.
"""

from __future__ import annotations

import base64
import os
import random
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
DEFAULT_MODE = 0o644


class VolumeNotReady(Exception):
    """MountVolume.SetUp failed: the kubelet posts FailedMount and retries."""


@dataclass(frozen=True)
class Mounted:
    """A volume ready on the node: its host directory."""

    name: str
    path: Path


def mount_tmpfs(target: Path, tag: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", tag, str(target)], check=True)


def _mkdir_temp(parent: Path, prefix: str) -> Path:
    """Go's os.MkdirTemp: the prefix and a random uint32 in decimal, mode 0700."""
    while True:
        path = parent / f"{prefix}{random.getrandbits(32)}"
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue


def atomic_write(target: Path, payload: dict[str, tuple[bytes, int]]) -> None:
    """AtomicWriter.Write for a fresh volume: timestamped dir, ``..data``, user-visible links."""
    ts_dir = _mkdir_temp(target, time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()))
    os.chmod(ts_dir, 0o755)
    for name, (content, mode) in payload.items():
        path = ts_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        os.chmod(path, mode)
    os.symlink(ts_dir.name, target / "..data_tmp")
    os.rename(target / "..data_tmp", target / "..data")
    for name in payload:
        top = name.split("/", 1)[0]
        link = target / top
        if not link.is_symlink():
            os.symlink(f"..data/{top}", link)


def projection(source: JSON, data: dict[str, bytes], what: str) -> dict[str, tuple[bytes, int]]:
    """Which files a secret/configMap volume holds: every key, or ``items`` (key -> path, mode)."""
    default = source.get("defaultMode")
    mode = DEFAULT_MODE if default is None else int(default)
    items = source.get("items")
    if not items:
        return {key: (value, mode) for key, value in data.items()}
    chosen: dict[str, tuple[bytes, int]] = {}
    for item in items:
        key = item["key"]
        if key not in data:
            if source.get("optional"):
                continue
            raise VolumeNotReady(
                f"configmap references non-existent config key: {key}"
                if what == "configmap"
                else f"references non-existent secret key: {key}"
            )
        item_mode = item.get("mode")
        chosen[item["path"]] = (data[key], mode if item_mode is None else int(item_mode))
    return chosen


def secret_data(secret: JSON) -> dict[str, bytes]:
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    data.update({k: v.encode() for k, v in (secret.get("stringData") or {}).items()})
    return data


def configmap_data(configmap: JSON) -> dict[str, bytes]:
    data = {k: v.encode() for k, v in (configmap.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (configmap.get("binaryData") or {}).items()})
    return data


def attach_conflict(claim: JSON, claim_pods_elsewhere: list[str]) -> str | None:
    """The attach/detach controller's Multi-Attach check: a ReadWriteOnce (or ReadWriteOncePod)
    claim already used by a pod on another node cannot attach here. Returns the event message."""
    modes = set((claim.get("spec") or {}).get("accessModes") or [])
    shared = modes & {"ReadWriteMany", "ReadOnlyMany"}
    if shared or not claim_pods_elsewhere:
        return None
    volume = (claim.get("spec") or {}).get("volumeName") or claim["metadata"]["name"]
    return (
        f'Multi-Attach error for volume "{volume}" Volume is already used by pod(s) '
        + ", ".join(claim_pods_elsewhere)
    )
