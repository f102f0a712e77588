"""The scripted cluster itself: its nodes are real node agents of kube-apiserver (the node's
own user, a Lease), kube-apiserver proxies pods/log to a node on loopback, the node's log server
lets only the API server's kubelet client in, and a stop leaves nothing."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testing.emulated_cluster import network
from testing.scripted_cluster import leftovers
from testing.scripted_cluster.harness import ScriptedCluster, module_cluster

pytestmark = pytest.mark.control_plane


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScriptedCluster]:
    yield from module_cluster(tmp_path_factory.mktemp("scripted-logs"))


def test_nodes_register_as_their_own_user_and_hold_a_lease(scripted: ScriptedCluster) -> None:
    admin = scripted.plane.plane.admin_api()
    node = admin.get("/api/v1/nodes/node-1")
    assert node is not None
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.1"}
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    lease = admin.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1")
    assert lease is not None and lease["spec"]["holderIdentity"] == "node-1"
    # NodeRestriction: a node may not touch another node.
    assert scripted.kubelet is not None
    own = scripted.kubelet.nodes["node-1"].api
    with pytest.raises(Exception, match="403"):
        own.merge_patch("/api/v1/nodes/node-2", {"metadata": {"labels": {"x": "y"}}})


def _get(scripted: ScriptedCluster, cert: tuple[str, str] | None) -> requests.Response:
    assert scripted.kubelet is not None
    plane = scripted.plane.plane
    port = scripted.kubelet.nodes["node-1"].logs.port
    return requests.get(
        f"https://127.0.0.1:{port}/containerLogs/default/p/c",
        verify=str(plane.ca),
        cert=cert,
        timeout=10,
    )


def test_the_node_log_server_refuses_other_clients(scripted: ScriptedCluster) -> None:
    plane = scripted.plane.plane
    someone = plane.client_certificate("someone", ("developers",))
    answer = _get(scripted, (str(someone.cert), str(someone.key)))
    assert (answer.status_code, answer.text) == (
        403,
        "Forbidden (user=someone, verb=get, resource=nodes, subresource(s)=[proxy])\n",
    )
    assert (_get(scripted, None).status_code, _get(scripted, None).text) == (401, "Unauthorized")
    client = plane.pki_dir / "apiserver-kubelet-client"
    allowed = _get(scripted, (f"{client}.crt", f"{client}.key"))
    assert (allowed.status_code, allowed.text) == (404, 'pod "p/default" does not exist\n')


def test_a_stop_leaves_nothing_and_a_start_removes_a_dead_runs_leftovers(tmp_path: Path) -> None:
    # A killed run's leftovers: a namespace and a state directory of a pid that is gone.
    dead = "999999999-1"
    network.ip("netns", "add", f"cirs-{dead}-mpiop")
    (Path(tempfile.gettempdir()) / f"ci-runner-scripted-{dead}-x").mkdir()
    scripted = ScriptedCluster(tmp_path).start()
    run = scripted.plane.names.run
    assert leftovers.inventory(dead) == {"processes": [], "cgroups": [], "netns": [], "state": []}
    assert leftovers.inventory(run)["netns"] == [f"cirs-{run}-mpiop"]
    assert len(leftovers.inventory(run)["processes"]) == 5  # etcd, 3 of Kubernetes, operator
    scripted.stop()
    assert leftovers.inventory(run) == {"processes": [], "cgroups": [], "netns": [], "state": []}
