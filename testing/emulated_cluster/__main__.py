"""``python -m testing.emulated_cluster --kubeconfig PATH [--s3]``: the emulated cluster on this
machine (as root). Starts the fake API server with the control plane of
``testing/fake_kube/control_plane/``
(MPI Operator v0.8.2, Job controller, scheduler, garbage collector; no scripted kubelet), Node
objects for the emulated nodes, their kubelets and the cluster DNS; writes a kubeconfig; prints
``dns <address>``, with --s3 ``s3 <endpoint URL>``, then ``ready``, each on its own line; runs
until SIGTERM or Ctrl-C and then leaves nothing behind. A start after a crash removes first what
the killed run left."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from testing.emulated_cluster import marks
from testing.emulated_cluster.api import Api, ApiFailure, Scope
from testing.emulated_cluster.cluster import Busy, MachineSide, NodeShape
from testing.emulated_cluster.node import DEFAULT_IMAGE
from testing.fake_kube.control_plane import ControlPlane
from testing.fake_kube.server import FakeKubeServer

TOOLS = {  # command -> Debian package
    "ip": "iproute2",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "dnsmasq": "dnsmasq-base",
    "sshd": "openssh-server",
    "ssh": "openssh-client",
    "mpirun": "openmpi-bin",
}
NODES = (
    NodeShape("emulated-node-1"),
    NodeShape("emulated-node-2"),
    NodeShape(
        "emulated-node-3",
        gpus=1,
        labels={"nvidia.com/gpu.present": "true"},
        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    ),
)


def missing_tools() -> list[str]:
    found = []
    for tool, package in TOOLS.items():
        if shutil.which(tool) is None and shutil.which(tool, path="/usr/sbin:/sbin") is None:
            found.append(f"{tool} (apt-get install {package})")
    return found


def kubeconfig(url: str, token: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "emulated", "cluster": {"server": url}}],
        "users": [{"name": "emulated", "user": {"token": token}}],
        "contexts": [
            {
                "name": "emulated",
                "context": {"cluster": "emulated", "user": "emulated", "namespace": namespace},
            }
        ],
        "current-context": "emulated",
    }


def scope_for(api: Api, namespace: str) -> Scope:
    """Every namespace when the API server lists across namespaces (as kubelets watch), else
    the kubeconfig's namespace."""
    try:
        api.list("/api/v1/pods", {"limit": "1"})
        return Scope(None)
    except ApiFailure:
        return Scope(namespace)


def register_nodes(api: Api, side: MachineSide) -> str | None:
    """Create the Node objects; a note when the API server does not serve Nodes."""
    for node in side.node_objects():
        try:
            if api.create("/api/v1/nodes", node) is None:
                return "the API server serves no Node objects: pods need spec.nodeName"
        except ApiFailure as err:
            if err.code == 409:
                continue
            if err.code == 404:
                return "the API server serves no Node objects: pods need spec.nodeName"
            raise
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.emulated_cluster", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path, help="where to write it")
    parser.add_argument("--s3", action="store_true", help="also run a moto S3 server")
    parser.add_argument("--namespace", default="default", help="the kubeconfig's namespace")
    parser.add_argument("--nodes", type=int, default=2, choices=(2, 3))
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        metavar="NAME",
        help=f"an image name the nodes have besides {DEFAULT_IMAGE} (repeatable); any other "
        "name fails to pull",
    )
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print(
            "error: the emulated cluster needs root (namespaces, a bridge, cgroups, mounts): "
            "run it with sudo",
            file=sys.stderr,
        )
        return 1
    missing = missing_tools()
    if missing:
        print(f"error: missing tools: {', '.join(missing)}", file=sys.stderr)
        return 1
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints every thread's stack
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    server = FakeKubeServer().start()
    # Everything but the kubelet: the emulated kubelets play the nodes, over HTTP.
    control = ControlPlane(server, scripted_kubelet=False)
    api = Api(server.url, server.token)
    side = MachineSide(
        api,
        scope_for(api, args.namespace),
        list(NODES[: args.nodes]),
        images=frozenset({DEFAULT_IMAGE, *args.image}),
    )
    s3: Any = None
    try:
        try:
            side.start(wait_for_lock=False)
        except Busy as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        note = register_nodes(api, side)
        if note:
            print(f"note: {note}", file=sys.stderr, flush=True)
        args.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        args.kubeconfig.write_text(
            yaml.safe_dump(kubeconfig(server.url, server.token, args.namespace), sort_keys=False)
        )
        print(f"dns {side.dns_address}", flush=True)
        if args.s3:
            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request

            s3 = ThreadedMotoServer(ip_address=marks.GATEWAY, port=marks.S3_PORT, verbose=False)
            s3.start()
            print(f"s3 http://{marks.GATEWAY}:{marks.S3_PORT}", flush=True)
        print("ready", flush=True)
        while not stop.wait(1.0):  # a timeout, so signal handlers run promptly
            pass
    finally:
        if s3 is not None:
            s3.stop()
        side.stop()
        control.stop()
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
