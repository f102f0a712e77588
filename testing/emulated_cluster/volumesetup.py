"""A pod's volumes on the node (:mod:`.volumes` has the layout rules) and the bind mounts of a
container: its volumeMounts plus the files the kubelet and runtime manage (/etc/hosts,
/etc/hostname, /etc/resolv.conf, the termination message file)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testing.emulated_cluster import podspec, volumes
from testing.emulated_cluster.api import ApiFailure
from testing.emulated_cluster.podspec import Sources

if TYPE_CHECKING:
    from testing.emulated_cluster.podworker import PodWorker

JSON = dict[str, Any]
READ_ONLY_KINDS = (
    "secret",
    "configMap",
    "projected",
    "downwardAPI",
)  # always mounted read-only (API data volumes)


def _kind(volume: JSON) -> str:
    return next((k for k in volume if k != "name"), "")


def _get(worker: PodWorker, plural: str, name: str) -> JSON | None:
    return worker.ctx.api.get(f"/api/v1/namespaces/{worker.namespace}/{plural}/{name}")


def _volume_get(worker: PodWorker, plural: str, name: str, volume: str) -> JSON | None:
    """The object a volume is made of, or None when it does not exist. Any other answer is one
    more try later, as the kubelet's volume manager retries (such as the Node authorizer's 403
    while its graph does not yet tie the pod, just bound to this node, to the object)."""
    try:
        return _get(worker, plural, name)
    except ApiFailure as err:
        raise volumes.VolumeNotReady(
            f'MountVolume.SetUp failed for volume "{volume}" : {err.message}'
        ) from err


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
    attaches a ReadWriteOnce volume to one node, first come first served (it reads every
    node's pods, which a kubelet's own user may not)."""
    api = worker.ctx.attach_api or worker.ctx.api
    pods, _ = api.list(f"/api/v1/namespaces/{worker.namespace}/pods")
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


def _mode(source: JSON) -> int:
    mode = source.get("defaultMode")
    return volumes.DEFAULT_MODE if mode is None else int(mode)


def _format_map(values: dict[str, str]) -> str:
    """pkg/fieldpath FormatMap: sorted ``key="value"`` lines."""
    return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))


def _downward(worker: PodWorker, source: JSON, mode: int) -> dict[str, tuple[bytes, int]]:
    """downwardAPI items: fieldRef (labels and annotations as whole maps too)."""
    payload: dict[str, tuple[bytes, int]] = {}
    meta = worker.pod["metadata"]
    for item in source.get("items") or []:
        item_mode = mode if item.get("mode") is None else int(item["mode"])
        path = (item.get("fieldRef") or {}).get("fieldPath")
        if path in ("metadata.labels", "metadata.annotations"):
            text = _format_map(meta.get(path.split(".")[1]) or {})
        elif path:
            text = podspec.field_ref(worker._with_ips(), path)
        else:
            text = podspec.resource_field(
                next(
                    c
                    for c in worker.pod["spec"]["containers"]
                    if c["name"] == item["resourceFieldRef"].get("containerName")
                ),
                item["resourceFieldRef"],
            )
        payload[item["path"]] = (text.encode(), item_mode)
    return payload


def _projected(worker: PodWorker, name: str, source: JSON) -> dict[str, tuple[bytes, int]]:
    """projected sources: secret, configMap, downwardAPI and serviceAccountToken (asked of the
    API server's TokenRequest, as the kubelet's token manager does)."""
    mode = _mode(source)
    payload: dict[str, tuple[bytes, int]] = {}
    for part in source.get("sources") or []:
        if "secret" in part or "configMap" in part:
            kind = "secret" if "secret" in part else "configMap"
            ref = part[kind]
            plural = "secrets" if kind == "secret" else "configmaps"
            obj = _volume_get(worker, plural, ref["name"], name)
            what = kind.lower()
            if obj is None:
                if ref.get("optional"):
                    continue
                raise volumes.VolumeNotReady(
                    f'MountVolume.SetUp failed for volume "{name}" : {what} "{ref["name"]}" '
                    "not found"
                )
            data = volumes.secret_data(obj) if kind == "secret" else volumes.configmap_data(obj)
            payload.update(volumes.projection({**ref, "defaultMode": mode}, data, what))
        elif "downwardAPI" in part:
            payload.update(_downward(worker, part["downwardAPI"], mode))
        elif "serviceAccountToken" in part:
            token = part["serviceAccountToken"]
            account = worker.pod["spec"].get("serviceAccountName") or "default"
            request = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {
                    "audiences": [token["audience"]] if token.get("audience") else [],
                    "expirationSeconds": int(token.get("expirationSeconds") or 3600),
                    "boundObjectRef": {
                        "kind": "Pod",
                        "apiVersion": "v1",
                        "name": worker.name,
                        "uid": worker.uid,
                    },
                },
            }
            path = f"/api/v1/namespaces/{worker.namespace}/serviceaccounts/{account}/token"
            try:
                answer = worker.ctx.api.create(path, request)
            except ApiFailure as err:
                answer, detail = None, str(err)
            else:
                detail = f'serviceaccounts "{account}" not found'
            if answer is None:
                raise volumes.VolumeNotReady(
                    f'MountVolume.SetUp failed for volume "{name}" : failed to fetch token: '
                    f"{detail}"
                )
            payload[token["path"]] = (str(answer["status"]["token"]).encode(), mode)
    return payload


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
            obj = _volume_get(worker, plural, str(ref), name)
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
        elif kind in ("projected", "downwardAPI"):
            payload = (
                _projected(worker, name, source)
                if kind == "projected"
                else _downward(worker, source, _mode(source))
            )
            if not target.exists():
                volumes.mount_tmpfs(target, kind.lower())
                volumes.atomic_write(target, payload)
        elif kind == "persistentVolumeClaim":
            claim_name = str(source.get("claimName"))
            # desired_state_of_world_populator.go (kubernetes v1.35.4) getPVCExtractPV, lines
            # 523-528, wrapped at 447: any error of the Get is retried, and named in FailedMount.
            unmounted = (
                f"Unable to attach or mount volumes: unmounted volumes=[{name}]: error "
                f"processing PVC {worker.namespace}/{claim_name}: failed to fetch PVC from "
                "API server: "
            )
            try:
                claim = _get(worker, "persistentvolumeclaims", claim_name)
            except ApiFailure as err:
                raise volumes.VolumeNotReady(unmounted + err.message) from err
            if claim is None:
                raise volumes.VolumeNotReady(
                    f'{unmounted}persistentvolumeclaims "{claim_name}" not found'
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
            volume_root = os.path.realpath(source)
            source = source / mount["subPath"]
            if not source.exists():
                source.mkdir(parents=True)
            real = os.path.realpath(source)
            if os.path.commonpath([real, volume_root]) != volume_root:
                # subpath.go: a subPath may not lead out of its volume (through a symlink).
                raise podspec.ConfigError(
                    f'failed to prepare subPath for volumeMount "{mount["name"]}" of container '
                    f'"{spec["name"]}"'
                )
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
