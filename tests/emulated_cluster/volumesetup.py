"""A pod's volumes on the node (:mod:`.volumes` has the layout rules) and the bind mounts of a
container: its volumeMounts plus the files the kubelet and runtime manage (/etc/hosts,
/etc/hostname, /etc/resolv.conf, the termination message file)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.emulated_cluster import volumes
from tests.emulated_cluster.podspec import Sources

if TYPE_CHECKING:
    from tests.emulated_cluster.podworker import PodWorker

JSON = dict[str, Any]
READ_ONLY_KINDS = ("secret", "configMap")  # always mounted read-only (API data volumes)


def _kind(volume: JSON) -> str:
    return next((k for k in volume if k != "name"), "")


def _get(worker: PodWorker, plural: str, name: str) -> JSON | None:
    return worker.ctx.api.get(f"/api/v1/namespaces/{worker.namespace}/{plural}/{name}")


def sources(worker: PodWorker) -> Sources:
    def secret(name: str) -> dict[str, bytes] | None:
        obj = _get(worker, "secrets", name)
        return None if obj is None else volumes.secret_data(obj)

    def configmap(name: str) -> dict[str, bytes] | None:
        obj = _get(worker, "configmaps", name)
        return None if obj is None else volumes.configmap_data(obj)

    return Sources(secret, configmap)


def _claim_users_elsewhere(worker: PodWorker, claim: str) -> list[str]:
    """Pods on other nodes that hold (or came first for) the claim: the attach/detach controller
    attaches a ReadWriteOnce volume to one node, first come first served."""
    pods, _ = worker.ctx.api.list(f"/api/v1/namespaces/{worker.namespace}/pods")
    mine = worker.pod["metadata"]
    me = (mine.get("creationTimestamp") or "", mine["name"])
    users = []
    for pod in pods:
        spec, meta = pod.get("spec") or {}, pod["metadata"]
        node = spec.get("nodeName")
        if not node or node == worker.ctx.node or meta.get("uid") == worker.uid:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        claims = {
            (v.get("persistentVolumeClaim") or {}).get("claimName")
            for v in spec.get("volumes") or []
        }
        if claim not in claims:
            continue
        attached = bool((pod.get("status") or {}).get("podIP"))
        earlier = (meta.get("creationTimestamp") or "", meta["name"]) < me
        if attached or earlier:
            users.append(meta["name"])
    return sorted(users)


def mount_pod_volumes(worker: PodWorker) -> dict[str, Path]:
    """Set up every volume of the pod; VolumeNotReady says why one cannot be (yet)."""
    base = worker.dir / "volumes"
    result: dict[str, Path] = {}
    for volume in worker.pod["spec"].get("volumes") or []:
        name, kind = volume["name"], _kind(volume)
        source = volume.get(kind) or {}
        target = base / f"kubernetes.io~{kind.lower()}" / name
        if kind == "emptyDir":
            if target.exists():
                result[name] = target
                continue
            if source.get("medium") == "Memory":
                volumes.mount_tmpfs(target, "emptydir")
            else:
                target.mkdir(parents=True)
            os.chmod(target, 0o777)
        elif kind in ("secret", "configMap"):
            ref = source.get("secretName") if kind == "secret" else source.get("name")
            plural = "secrets" if kind == "secret" else "configmaps"
            obj = _get(worker, plural, str(ref))
            what = "secret" if kind == "secret" else "configmap"
            if obj is None and not source.get("optional"):
                raise volumes.VolumeNotReady(
                    f'MountVolume.SetUp failed for volume "{name}" : {what} "{ref}" not found'
                )
            data = (
                {}
                if obj is None
                else (volumes.secret_data(obj) if kind == "secret" else volumes.configmap_data(obj))
            )
            payload = volumes.projection(source, data, what)
            if not target.exists():
                if kind == "secret":
                    volumes.mount_tmpfs(target, "secret")
                else:
                    target.mkdir(parents=True)
                    os.chmod(target, 0o777)
                volumes.atomic_write(target, payload)
        elif kind == "persistentVolumeClaim":
            claim_name = str(source.get("claimName"))
            claim = _get(worker, "persistentvolumeclaims", claim_name)
            if claim is None:
                raise volumes.VolumeNotReady(
                    f"Unable to attach or mount volumes: unmounted volumes=[{name}]: error "
                    f"processing PVC {worker.namespace}/{claim_name}: failed to fetch PVC from "
                    f'API server: persistentvolumeclaims "{claim_name}" not found'
                )
            conflict = volumes.attach_conflict(claim, _claim_users_elsewhere(worker, claim_name))
            if conflict:
                raise volumes.VolumeNotReady(conflict)
            target = worker.ctx.claims / worker.namespace / claim_name
            target.mkdir(parents=True, exist_ok=True)
        else:
            raise volumes.VolumeNotReady(
                f'MountVolume.SetUp failed for volume "{name}" : the emulated node does not '
                f"support {kind} volumes"
            )
        result[name] = target
    return result


def unmount_pod_volumes(worker: PodWorker) -> None:
    base = worker.dir / "volumes"
    if not base.exists():
        return
    for path in sorted(base.glob("*/*"), reverse=True):
        if os.path.ismount(path):
            subprocess.run(["umount", str(path)], check=False, capture_output=True)


def container_binds(worker: PodWorker, spec: JSON, termination: Path) -> list[dict[str, object]]:
    kinds = {v["name"]: _kind(v) for v in worker.pod["spec"].get("volumes") or []}
    binds: list[dict[str, object]] = []
    for mount in spec.get("volumeMounts") or []:
        source = worker.volumes[mount["name"]]
        if mount.get("subPath"):
            source = source / mount["subPath"]
            if not source.exists():
                source.mkdir(parents=True)
        binds.append(
            {
                "source": str(source),
                "target": mount["mountPath"],
                "readOnly": bool(mount.get("readOnly"))
                or kinds.get(mount["name"]) in READ_ONLY_KINDS,
                "file": source.is_file(),
            }
        )
    for name, target in (
        ("etc-hosts", "/etc/hosts"),
        ("etc-hostname", "/etc/hostname"),
        ("etc-resolv.conf", "/etc/resolv.conf"),
    ):
        binds.append({"source": str(worker.dir / name), "target": target, "file": True})
    path = spec.get("terminationMessagePath") or "/dev/termination-log"
    binds.append({"source": str(termination), "target": path, "file": True})
    return binds
