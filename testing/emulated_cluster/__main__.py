"""``python -m testing.emulated_cluster --kubeconfig PATH [--s3] [--no-kueue]``: the emulated
cluster on this machine (as root). Starts the real control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, MPI Operator v0.8.2, Kueue v0.17.0 with its webhooks
(unless --no-kueue: then not even its CRDs) and CoreDNS: ``scripts/setup-control-plane.sh``
builds them) and two real nodes (kubelet v1.35.4, containerd, runc and CNI: ``make real-node``)
with the images of ``nodeimages.py``, the Horovod image among them; writes an admin kubeconfig (a
``system:masters`` token, the CA inline); prints ``dns <address>``, with --s3 ``s3 <endpoint
URL>``, then ``ready``, each on its own line; runs until SIGTERM or Ctrl-C and then leaves nothing
behind. A start after a crash removes first what the killed run left."""

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

from testing.control_plane import accounts, binaries
from testing.control_plane.kueue import Mode
from testing.control_plane.run import StartFailed
from testing.emulated_cluster import realcluster, realnode
from testing.emulated_cluster.cluster import Busy, MachineSide
from testing.host import marks

TOOLS = {"ip": "iproute2", "mount": "util-linux"}  # command -> Debian package
NODES = (realcluster.Shape("emulated-node-1"), realcluster.Shape("emulated-node-2"))


def missing_tools() -> list[str]:
    found = []
    for tool, package in TOOLS.items():
        if shutil.which(tool) is None and shutil.which(tool, path="/usr/sbin:/sbin") is None:
            found.append(f"{tool} (apt-get install {package})")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testing.emulated_cluster", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path, help="where to write it")
    parser.add_argument("--s3", action="store_true", help="also run a moto S3 server")
    parser.add_argument("--namespace", default="default", help="the kubeconfig's namespace")
    parser.add_argument(
        "--no-kueue",
        action="store_true",
        help="without Kueue v0.17.0 (by default it runs, with its CRDs and webhooks, and manages "
        "the Jobs and MPIJobs labelled kueue.x-k8s.io/queue-name)",
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
    try:
        binaries.bin_dir()
    except binaries.NotBuilt as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints every thread's stack
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    side = MachineSide(list(NODES), kueue=Mode.OFF if args.no_kueue else Mode.RUNNING)
    s3: Any = None
    try:
        try:
            side.start(wait_for_lock=False)
        except (Busy, StartFailed, realcluster.NotInstalled, realnode.NodeFailed) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        control = side.control
        assert control is not None
        accounts.create_namespace(side.api, args.namespace)
        config = accounts.kubeconfig(control.url, control.ca, control.admin_token, args.namespace)
        args.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        args.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
