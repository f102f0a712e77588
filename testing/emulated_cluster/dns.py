"""Cluster DNS: Debian's dnsmasq, authoritative for the cluster domain, answering from a hosts
file this module keeps in step with Services and pods through the API (as CoreDNS follows
Services and EndpointSlices). A headless Service publishes only Ready pods (the EndpointSlice
controller's rule; ``publishNotReadyAddresses`` publishes all): ``<svc>.<ns>.svc.<domain>`` has
an A record per pod and ``<hostname>.<svc>.<ns>.svc.<domain>`` one for each pod whose
``subdomain`` is the Service. TTL 5 s, the CoreDNS kubernetes plugin's default."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from testing.emulated_cluster import cleanup, marks
from testing.emulated_cluster.api import Api, Informer, Scope
from testing.emulated_cluster.cgroups import Cgroup

JSON = dict[str, Any]


def _ready(pod: JSON) -> bool:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or not status.get("podIP"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def records(services: list[JSON], pods: list[JSON], domain: str) -> list[tuple[str, str]]:
    """(address, name) pairs, sorted."""
    found: set[tuple[str, str]] = set()
    for service in services:
        meta, spec = service["metadata"], service.get("spec") or {}
        name, namespace = meta["name"], meta.get("namespace") or "default"
        fqdn = f"{name}.{namespace}.svc.{domain}"
        cluster_ip = spec.get("clusterIP")
        if cluster_ip and cluster_ip != "None":
            found.add((cluster_ip, fqdn))
            continue
        selector = spec.get("selector") or {}
        if not selector:
            continue
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if pod["metadata"].get("namespace") != namespace:
                continue
            if any(labels.get(k) != v for k, v in selector.items()):
                continue
            if not (_ready(pod) or spec.get("publishNotReadyAddresses")):
                continue
            ip = pod["status"].get("podIP")
            if not ip:
                continue
            found.add((ip, fqdn))
            pod_spec = pod.get("spec") or {}
            if pod_spec.get("subdomain") == name and pod_spec.get("hostname"):
                found.add((ip, f"{pod_spec['hostname']}.{fqdn}"))
    return sorted(found)


class ClusterDns:
    """dnsmasq on ``address``:53 plus the informers that feed it."""

    def __init__(
        self, api: Api, scope: Scope, directory: Path, address: str, domain: str, cgroup: Cgroup
    ) -> None:
        self.address = address
        self.domain = domain
        self.hosts = directory / "hosts"
        self.cgroup = cgroup
        directory.mkdir(parents=True, exist_ok=True)
        self.hosts.write_text("")
        self.process: subprocess.Popen[bytes] | None = None
        self._changed = threading.Event()
        self._stop = threading.Event()
        self.services = Informer(api, scope.path("services"), {}, self._poke, "dns-services")
        self.pods = Informer(api, scope.path("pods"), {}, self._poke, "dns-pods")
        self._thread = threading.Thread(target=self._run, name="dns", daemon=True)

    def _poke(self, kind: str, obj: JSON) -> None:
        self._changed.set()

    def start(self) -> ClusterDns:
        self.process = subprocess.Popen(
            [
                "dnsmasq",
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--no-resolv",
                "--no-hosts",
                "--no-negcache",
                "--bind-interfaces",
                f"--listen-address={self.address}",
                f"--port={marks.DNS_PORT}",
                "--user=root",
                "--group=root",
                "--pid-file=",
                f"--addn-hosts={self.hosts}",
                f"--local=/{self.domain}/",
                # No upstream here: every other name gets NXDOMAIN at once, as a real upstream
                # answers for names like "x.ns.svc" (CoreDNS forwards them).
                "--local=/#/",
                "--local-ttl=5",
                "--log-facility=/dev/null",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            preexec_fn=self.cgroup.add_self,
        )
        self._wait_answering()
        self.services.start()
        self.pods.start()
        self._thread.start()
        return self

    def _wait_answering(self, timeout: float = 10.0) -> None:
        """Until dnsmasq answers a query: a SIGHUP (reload the hosts) that comes before it set
        its signal handlers ends it."""
        labels = f"probe.{self.domain}".split(".")
        name = b"".join(bytes([len(label)]) + label.encode() for label in labels)
        query = b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + name + b"\x00\x00\x01\x00\x01"
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"dnsmasq exited with {self.process.returncode} at start")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.settimeout(0.2)
                try:
                    probe.sendto(query, (self.address, marks.DNS_PORT))
                    probe.recv(512)
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dnsmasq does not answer on {self.address} after {timeout}s")
            time.sleep(0.05)

    def _run(self) -> None:
        written = ""
        while not self._stop.is_set():
            self._changed.wait(0.5)
            self._changed.clear()
            if self._stop.is_set():
                return
            pairs = records(
                list(self.services.known.values()), list(self.pods.known.values()), self.domain
            )
            text = "".join(f"{ip} {name}\n" for ip, name in pairs)
            if text == written:
                continue
            temporary = self.hosts.with_suffix(".new")
            temporary.write_text(text)
            os.replace(temporary, self.hosts)
            written = text
            if self.process is not None and self.process.poll() is None:
                self.process.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        self._stop.set()
        self._changed.set()
        self.services.stop()
        self.pods.stop()
        if self.process is not None:
            cleanup.end(self.process, 5)
