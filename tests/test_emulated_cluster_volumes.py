"""Volume rules of the emulated kubelet: AtomicWriter layout, items and modes, Multi-Attach."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from testing.emulated_cluster.api import ApiFailure
from testing.emulated_cluster.podworker import PodWorker
from testing.emulated_cluster.volumes import (
    VolumeNotReady,
    atomic_write,
    attach_conflict,
    projection,
)
from testing.emulated_cluster.volumesetup import mount_pod_volumes
from testing.kube_faults import status


def test_atomic_write_puts_files_in_a_timestamped_dir_behind_data_and_user_visible_links(
    tmp_path: Path,
) -> None:
    atomic_write(tmp_path, {"id": (b"key", 0o600), "conf/app.yaml": (b"a: 1", 0o644)})
    names = sorted(os.listdir(tmp_path))
    assert names[1:] == ["..data", "conf", "id"]
    assert re.fullmatch(r"\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+", names[0])
    assert os.readlink(tmp_path / "..data") == names[0]
    assert os.readlink(tmp_path / "id") == "..data/id"
    assert os.readlink(tmp_path / "conf") == "..data/conf"
    assert stat.S_IMODE(os.stat(tmp_path / names[0]).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(tmp_path / "id").st_mode) == 0o600
    assert (tmp_path / "conf" / "app.yaml").read_bytes() == b"a: 1"


def test_projection_takes_every_key_with_default_mode_or_the_items_with_their_modes() -> None:
    data = {"a": b"1", "b": b"2"}
    assert projection({}, data, "secret") == {"a": (b"1", 0o644), "b": (b"2", 0o644)}
    items = {
        "defaultMode": 0o600,
        "items": [{"key": "a", "path": "x"}, {"key": "b", "path": "y", "mode": 0o400}],
    }
    assert projection(items, data, "secret") == {"x": (b"1", 0o600), "y": (b"2", 0o400)}
    with pytest.raises(VolumeNotReady, match=r"^references non-existent secret key: c$"):
        projection({"items": [{"key": "c", "path": "z"}]}, data, "secret")


CLAIM = {"metadata": {"name": "pip-cache"}, "spec": {"volumeName": "pvc-123"}}


def test_a_read_write_once_claim_used_on_another_node_cannot_attach() -> None:
    rwo = {**CLAIM, "spec": {**CLAIM["spec"], "accessModes": ["ReadWriteOnce"]}}
    assert attach_conflict(rwo, ["train-worker-0"]) == (
        'Multi-Attach error for volume "pvc-123" Volume is already used by pod(s) train-worker-0'
    )
    assert attach_conflict(rwo, []) is None
    rwx = {**CLAIM, "spec": {**CLAIM["spec"], "accessModes": ["ReadWriteMany"]}}
    assert attach_conflict(rwx, ["train-worker-0"]) is None


FORBIDDEN = json.dumps(
    status(
        403,
        'persistentvolumeclaims "pip-cache" is forbidden: User "system:node:node-1" cannot get '
        'resource "persistentvolumeclaims" in API group "" in the namespace "ml": no '
        "relationship found between node 'node-1' and this object",
        "Forbidden",
    )
)


class _RefusingApi:
    def get(self, path: str) -> None:
        raise ApiFailure(403, FORBIDDEN)


def _worker(tmp_path: Path, volume: Mapping[str, object]) -> PodWorker:
    pod = {"spec": {"volumes": [volume]}}
    api = SimpleNamespace(api=_RefusingApi())
    return cast(PodWorker, SimpleNamespace(ctx=api, dir=tmp_path, pod=pod, namespace="ml"))


def test_a_refused_claim_is_a_mount_to_retry_with_the_api_servers_words(tmp_path: Path) -> None:
    # The Node authorizer refuses a pod's claim until its graph ties the pod to this node.
    volume = {"name": "pip-cache", "persistentVolumeClaim": {"claimName": "pip-cache"}}
    with pytest.raises(VolumeNotReady) as caught:
        mount_pod_volumes(_worker(tmp_path, volume))
    assert str(caught.value) == (
        "Unable to attach or mount volumes: unmounted volumes=[pip-cache]: error processing PVC "
        'ml/pip-cache: failed to fetch PVC from API server: persistentvolumeclaims "pip-cache" '
        'is forbidden: User "system:node:node-1" cannot get resource "persistentvolumeclaims" in '
        'API group "" in the namespace "ml": no relationship found between node \'node-1\' and '
        "this object"
    )


def test_a_refused_secret_is_a_mount_to_retry(tmp_path: Path) -> None:
    volume = {"name": "creds", "secret": {"secretName": "job-secrets"}}
    with pytest.raises(VolumeNotReady, match=r'^MountVolume.SetUp failed for volume "creds" : '):
        mount_pod_volumes(_worker(tmp_path, volume))
