"""Probes as the kubelet's prober runs them (``pkg/kubelet/prober``): exec inside the container,
tcpSocket and httpGet from the node to the pod IP; results counted against the thresholds."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from testing.emulated_cluster.podspec import Probe

Exec = Callable[[list[str], float], tuple[int, str]]


def run_probe(probe: Probe, pod_ip: str, exec_in: Exec) -> tuple[bool, str]:
    """One probe: (success, output for the Unhealthy event)."""
    spec = probe.spec
    if "exec" in spec:
        code, output = exec_in(list(spec["exec"].get("command") or []), probe.timeout)
        if code == -1:
            return False, output
        return code == 0, output.strip()
    if "tcpSocket" in spec:
        port = int(spec["tcpSocket"]["port"])
        host = spec["tcpSocket"].get("host") or pod_ip
        try:
            with socket.create_connection((host, port), timeout=probe.timeout):
                return True, ""
        except OSError as err:
            return False, f"dial tcp {host}:{port}: connect: {err.strerror or err}"
    if "httpGet" in spec:
        get = spec["httpGet"]
        host = get.get("host") or pod_ip
        scheme = str(get.get("scheme") or "HTTP").lower()
        url = f"{scheme}://{host}:{get['port']}{get.get('path', '/')}"
        try:
            with urllib.request.urlopen(url, timeout=probe.timeout) as response:
                status = int(response.status)
        except urllib.error.HTTPError as err:
            status = err.code
        except OSError as err:
            return False, f'Get "{url}": {err}'
        if 200 <= status < 400:
            return True, ""
        return False, f"HTTP probe failed with statuscode: {status}"
    return True, ""


class ProbeState:
    """A probe of one container instance: when it runs next, consecutive results, its verdict.
    Readiness starts as failed (the prober's initial result), liveness as succeeded."""

    def __init__(self, probe: Probe, started: float, initial: bool) -> None:
        self.probe = probe
        self.next_at = started + probe.initial_delay
        self.successes = 0
        self.failures = 0
        self.result = initial
        self.last_output = ""
        self._running = False
        self._lock = threading.Lock()
        self.changed: list[tuple[bool, str]] = []  # verdict changes, for events

    def due(self, now: float) -> bool:
        with self._lock:
            return not self._running and now >= self.next_at

    def run_async(self, pod_ip: str, exec_in: Exec, on_done: Callable[[], None]) -> None:
        with self._lock:
            self._running = True

        def run() -> None:
            ok, output = run_probe(self.probe, pod_ip, exec_in)
            with self._lock:
                self._running = False
                self.next_at = time.time() + self.probe.period
                if ok:
                    self.successes, self.failures = self.successes + 1, 0
                    if self.successes >= self.probe.success_threshold:
                        self.result = True
                else:
                    self.successes, self.failures = 0, self.failures + 1
                    self.last_output = output
                    self.changed.append((False, output))
                    if self.failures >= self.probe.failure_threshold:
                        self.result = False
            on_done()

        threading.Thread(target=run, name="probe", daemon=True).start()

    def take_failures(self) -> list[str]:
        with self._lock:
            outputs = [out for ok, out in self.changed if not ok]
            self.changed.clear()
            return outputs
