"""The real nodes' configuration, written without starting anything: the kubelet's, CNI's,
containerd's, the OCI archives and the sysctl record (fast, no root)."""

from __future__ import annotations

import json
import socket
import subprocess
import tarfile
from pathlib import Path

import pytest

from testing.emulated_cluster import (
    cni,
    containerd,
    hostfiles,
    hoststate,
    imagestore,
    kubeletconfig,
)
from testing.host import marks

GI = 1 << 30


def test_system_reserved_holds_back_what_the_shape_does_not_have() -> None:
    have = (4000, 24 * GI)
    assert kubeletconfig.system_reserved("2", "8Gi", have) == {
        "cpu": "2000m",
        "memory": str(16 * GI),
    }
    assert kubeletconfig.system_reserved("500m", "24Gi", have) == {"cpu": "3500m"}
    assert kubeletconfig.system_reserved("8", "64Gi", have) == {}


@pytest.mark.parametrize("text", ["8G1", "lots", "1.5Gi"])
def test_a_quantity_the_module_does_not_read_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=f"not a memory quantity this module reads: '{text}'"):
        kubeletconfig.quantity_bytes(text)


def test_the_kubelet_config_is_cgroup_v1_cgroupfs_webhook_auth_and_the_cluster_dns(
    tmp_path: Path,
) -> None:
    files = kubeletconfig.NodeFiles(
        tmp_path / "ca", tmp_path / "crt", tmp_path / "key", tmp_path / "logs"
    )
    body = kubeletconfig.config(marks.NODE_ADDRESSES[0], "unix:///x.sock", "/a/b", files, {})
    picked = {
        k: body[k]
        for k in (
            "failCgroupV1",
            "cgroupDriver",
            "cgroupRoot",
            "address",
            "readOnlyPort",
            "healthzPort",
            "clusterDNS",
            "authorization",
        )
    }
    assert picked == {
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/a/b",
        "address": marks.NODE_ADDRESSES[0],
        "readOnlyPort": 0,
        "healthzPort": 0,
        "clusterDNS": [marks.GATEWAY],
        "authorization": {"mode": "Webhook"},
    }
    assert body["authentication"]["x509"] == {"clientCAFile": str(tmp_path / "ca")}
    assert body["authentication"]["anonymous"] == {"enabled": False}


def test_each_node_has_its_own_pod_cidr_on_the_bridge_and_masquerades(tmp_path: Path) -> None:
    assert [marks.pod_cidr(i) for i in range(6)] == [
        f"{marks.SUBNET}.{n}/27" for n in (32, 64, 96, 128, 160, 192)
    ]
    with pytest.raises(ValueError, match="a real node's index is 0-5, not 6"):
        marks.pod_cidr(6)
    path = cni.write(tmp_path / "cni", marks.pod_cidr(1), tmp_path / "ipam")
    bridge = json.loads(path.read_text())["plugins"][0]
    assert (bridge["bridge"], bridge["isGateway"], bridge["ipMasq"]) == (marks.BRIDGE, True, True)
    assert bridge["ipam"]["ranges"] == [
        [
            {
                "subnet": f"{marks.SUBNET}.0/24",
                "rangeStart": f"{marks.SUBNET}.65",
                "rangeEnd": f"{marks.SUBNET}.94",
                "gateway": marks.GATEWAY,
            }
        ]
    ]


def test_containerd_keeps_everything_under_the_node_directory(tmp_path: Path) -> None:
    text = containerd.config(containerd.Layout(tmp_path))
    assert "restrict_oom_score_adj = true" in text
    assert "netns_mounts_under_state_dir = true" in text
    assert "SystemdCgroup = false" in text
    paths = [line.split('"')[1] for line in text.splitlines() if '= "/' in line]
    assert paths and all(p.startswith(str(tmp_path)) or p == str(cni.PLUGIN_DIR) for p in paths), (
        paths
    )


def test_the_sysctls_recorded_first_are_the_ones_restored(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for name, value in {
        "vm.overcommit_memory": "0",
        "kernel.panic": "0",
        "kernel.panic_on_oops": "0",
        "net.ipv4.ip_forward": "0",
    }.items():
        path = proc / name.replace(".", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    record = tmp_path / "record"
    hoststate.record(record, proc)
    (proc / "kernel" / "panic").write_text("10\n")
    hoststate.record(record, proc)  # a second start keeps the first values
    (proc / "vm" / "overcommit_memory").write_text("1\n")
    assert hoststate.restore(record, proc) == {"kernel.panic": "10", "vm.overcommit_memory": "1"}
    assert hoststate.read(proc) == {name: "0" for name in hoststate.SYSCTLS}
    assert not record.exists()
    assert hoststate.restore(record, proc) == {}


def test_an_archive_is_an_oci_layout_with_the_name_containerd_imports(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "hello").write_text("#!/bin/sh\necho hi\n")
    layer = imagestore.layer_from_dir(root, tmp_path / "layer.tar")
    config = imagestore.ImageConfig(
        cmd=["/bin/hello"], user="1000", workdir="/w", env={"PATH": "/bin"}
    )
    archive = imagestore.write_archive(
        tmp_path / "image.tar", [imagestore.Named("example.invalid/hello:1", [layer], config)]
    )
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        (entry,) = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == "example.invalid/hello:1"
        manifest = json.load(tar.extractfile(f"blobs/sha256/{entry['digest'][7:]}"))  # type: ignore[arg-type]
        image = json.load(tar.extractfile(f"blobs/sha256/{manifest['config']['digest'][7:]}"))  # type: ignore[arg-type]
    assert image["config"] == {
        "Env": ["PATH=/bin"],
        "Cmd": ["/bin/hello"],
        "User": "1000",
        "WorkingDir": "/w",
    }
    assert image["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    listed = subprocess.run(["tar", "tf", str(layer)], capture_output=True, text=True).stdout
    assert listed.split() == ["./", "./bin/", "./bin/hello"]


def test_a_shim_socket_nobody_listens_on_is_stale_one_that_listens_is_not(tmp_path: Path) -> None:
    left, live = tmp_path / "left", tmp_path / "live"
    with socket.socket(socket.AF_UNIX) as killed:
        killed.bind(str(left))  # a killed shim's socket: the file stays, nobody accepts
    with socket.socket(socket.AF_UNIX) as shim:
        shim.bind(str(live))
        shim.listen()
        assert (hostfiles.stale(left), hostfiles.stale(live)) == (True, False)
