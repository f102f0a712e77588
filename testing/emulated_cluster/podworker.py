"""One pod's life on an emulated node, on its own thread: volumes, sandbox (network, UTS,
kubelet-managed files), init containers in order, containers with restartPolicy and back-off,
probes, status through the status subresource, graceful deletion.

Rules from kubernetes/kubernetes ``pkg/kubelet`` (kubelet_pods.go getPhase and
generateAPIPodStatus, kuberuntime_container.go, pod_workers.go, active_deadline.go), cited by
function. Of the ``DisruptionTarget`` conditions, the kubelet itself adds only
``TerminationByKubelet`` (node-pressure eviction, graceful node shutdown, preemption for a critical
pod): an emulated node does none of them, so it adds none; those the API server (Eviction API),
the scheduler or a controller add stay, through the strategic merge of the status patch."""

from __future__ import annotations

import hashlib
import secrets
import shutil
import signal
import subprocess
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from testing.emulated_cluster import dnsconf, network, podspec, volumes
from testing.emulated_cluster.api import ApiFailure, now_rfc3339
from testing.emulated_cluster.cgroups import Cgroup
from testing.emulated_cluster.container import ContainerProcess, Exit, Sandbox
from testing.emulated_cluster.crilog import LogFile
from testing.emulated_cluster.image import CMD, ENV, WORKDIR
from testing.emulated_cluster.imagestore import normalized
from testing.emulated_cluster.node import NodeContext, Slot, image_for, rfc3339
from testing.emulated_cluster.probes import ProbeState

JSON = dict[str, Any]
TICK = 0.05
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # kubelet's crash loop back-off
DEFAULT_GRACE = 30  # spec.terminationGracePeriodSeconds default
# active_deadline.go: the reason and message of a pod past spec.activeDeadlineSeconds.
DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"


class PodWorker:
    """Created by the kubelet for each pod bound to its node; :meth:`update` and
    :meth:`removed` feed it what the API says."""

    def __init__(self, ctx: NodeContext, pod: JSON) -> None:
        self.ctx = ctx
        self.pod = pod
        meta = pod["metadata"]
        self.uid, self.namespace, self.name = meta["uid"], meta["namespace"], meta["name"]
        self.dir: Path = ctx.state / "pods" / self.uid
        self.log_dir: Path = ctx.state / "logs" / f"{self.namespace}_{self.name}_{self.uid}"
        spec = pod["spec"]
        self.policy = spec.get("restartPolicy") or "Always"
        self.init_slots = [Slot(c, True) for c in spec.get("initContainers") or []]
        self.slots = [Slot(c, False) for c in spec.get("containers") or []]
        for slot in self.init_slots:
            slot.state = {"waiting": {"reason": "PodInitializing"}}
        if self.init_slots:
            for slot in self.slots:
                slot.state = {"waiting": {"reason": "PodInitializing"}}
        self.cgroup = Cgroup(ctx.cgroups / f"pod{self.uid}")
        self.ip: str | None = None
        self.sandbox: Sandbox | None = None
        self.volumes: dict[str, Path] = {}
        self.phase = "Pending"
        self.start_time = time.time()
        self.transitions: dict[str, tuple[str, float]] = {}
        self.grace: float | None = None  # set once the API object has a deletionTimestamp
        self.evicted: tuple[str, str] | None = None  # (reason, message): the kubelet ends it
        self.deleted = threading.Event()  # the API object is gone
        self.wake = threading.Event()
        self._last_status: JSON | None = None
        self._warned: set[str] = set()
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"pod-{self.name}", daemon=True)

    # -- inputs ------------------------------------------------------------------------------

    def update(self, pod: JSON) -> None:
        if pod["metadata"].get("uid") != self.uid:
            return
        self.pod = pod
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and self.grace is None:
            grace = meta.get("deletionGracePeriodSeconds")
            if grace is None:
                grace = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE)
            self.grace = float(grace)
        self.wake.set()

    def removed(self) -> None:
        self.deleted.set()
        if self.grace is None:
            self.grace = 0.0
        self.wake.set()

    def containers(self) -> list[Slot]:
        return self.init_slots + self.slots

    # -- helpers -----------------------------------------------------------------------------

    def event(
        self,
        kind: str,
        reason: str,
        message: str,
        slot: Slot | None = None,
        component: str = "kubelet",
    ) -> None:
        self.ctx.api.event(
            self.pod,
            kind,
            reason,
            message,
            component,
            self.ctx.node,
            slot.field_path if slot else None,
        )

    def warn_once(self, reason: str, message: str, component: str = "kubelet") -> None:
        if message not in self._warned:
            self._warned.add(message)
            self.event("Warning", reason, message, component=component)

    def _sleep(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    # -- life --------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self.post_status()
            if self._prepare():
                self._loop()
        except Exception:  # the kubelet logs and carries on with other pods
            traceback.print_exc()
        finally:
            self._stop_all(0.0 if self.deleted.is_set() else self._grace_to_stop())
            self._teardown_sandbox()
            if not self.deleted.is_set():
                self.post_status()
            self.finished.set()
            while self.grace is None and not self.deleted.is_set():
                self._sleep(1.0)
            self._teardown_volumes()
            shutil.rmtree(self.log_dir, ignore_errors=True)
            shutil.rmtree(self.dir, ignore_errors=True)
            if not self.deleted.is_set():
                try:
                    self.ctx.api.delete_pod_now(self.namespace, self.name, self.uid)
                except (ApiFailure, OSError):
                    traceback.print_exc()

    def _stopping(self) -> bool:
        return self.grace is not None or self.evicted is not None

    def _grace_to_stop(self) -> float:
        """pod_workers.go calculateEffectiveGracePeriod: the deletion's grace period, else (a pod
        the kubelet ends itself) the spec's."""
        if self.grace is not None:
            return self.grace
        return self._grace_of_pod() if self.evicted is not None else 0.0

    def _check_deadline(self, now: float) -> None:
        """active_deadline.go ShouldEvict: once ``spec.activeDeadlineSeconds`` have passed since
        the status's startTime, the pod ends Failed with reason DeadlineExceeded (its containers
        stopped with the pod's grace period) and a Normal event says so."""
        deadline = self.pod["spec"].get("activeDeadlineSeconds")
        if self.evicted is None and deadline is not None and now - self.start_time >= deadline:
            self.event("Normal", DEADLINE_REASON, DEADLINE_MESSAGE)
            self.evicted = (DEADLINE_REASON, DEADLINE_MESSAGE)

    def _prepare(self) -> bool:
        """Volumes, then the sandbox; retried until they succeed or the pod goes away."""
        while not self._stopping():
            try:
                self._mount_volumes()
                break
            except volumes.VolumeNotReady as err:
                reason, component = (
                    ("FailedAttachVolume", "attachdetach-controller")
                    if "Multi-Attach" in str(err)
                    else ("FailedMount", "kubelet")
                )
                self.warn_once(reason, str(err), component)
                self._sleep(1.0)
                self._check_deadline(time.time())
        if self._stopping():
            return False
        self._sandbox_up()
        self.post_status()
        return True

    def _mount_volumes(self) -> None:
        from testing.emulated_cluster.volumesetup import mount_pod_volumes

        self.volumes = mount_pod_volumes(self)

    def _sandbox_up(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        host_network = bool(self.pod["spec"].get("hostNetwork"))
        self.ip = self.ctx.node_ip if host_network else self.ctx.addresses.take()
        netns = None if host_network else network.pod_network_up(self.uid, self.ip)
        name, _ = podspec.hostname(self.pod)
        uts = self.dir / "uts"
        uts.touch()
        subprocess.run(["unshare", f"--uts={uts}", "hostname", name], check=True)
        self.sandbox = Sandbox(netns, uts)
        (self.dir / "etc-hostname").write_text(name + "\n")
        (self.dir / "etc-hosts").write_text(
            podspec.hosts_file(self.pod, self.ip, self.ctx.cluster_domain)
        )
        config = dnsconf.pod_dns(
            self.pod, self.ctx.cluster_dns, self.ctx.cluster_domain, self.ctx.resolv_conf
        )
        for warning in config.warnings:
            self.warn_once("DNSConfigForming", warning)
        (self.dir / "etc-resolv.conf").write_text(dnsconf.resolv_conf_text(config))
        self.cgroup.create(None)
        self.transitions["PodReadyToStartContainers"] = ("True", time.time())

    def _loop(self) -> None:
        while not self._stopping():
            now = time.time()
            self._check_deadline(now)
            if self._stopping():
                return
            if not self._step_init(now):
                return
            if all(s.done and s.succeeded() for s in self.init_slots):
                self._step_main(now)
            self.post_status()
            if self.phase in ("Succeeded", "Failed"):
                return
            self._sleep(TICK)

    def _step_init(self, now: float) -> bool:
        """Init containers one at a time (kuberuntime computeInitContainerActions). False when
        one failed for good (restartPolicy Never)."""
        for slot in self.init_slots:
            if slot.done and slot.succeeded():
                continue
            if slot.process is None:
                if now >= slot.next_start:
                    self._start(slot)
                return True
            if slot.process.running():
                return True
            self._exited(slot, self.policy == "Never")
            return not (slot.done and not slot.succeeded())
        return True

    def _step_main(self, now: float) -> None:
        for slot in self.slots:
            if slot.done:
                continue
            if slot.process is None:
                if now >= slot.next_start:
                    self._start(slot)
                continue
            if not slot.process.running():
                self._exited(slot, False)
                continue
            self._probe(slot, now)

    def _probe(self, slot: Slot, now: float) -> None:
        """pkg/kubelet/prober: the startup probe first; then readiness and liveness. A liveness
        or startup probe past its failureThreshold kills the container, which restarts as
        restartPolicy says."""
        process = slot.process
        assert process is not None and self.ip is not None
        starting = slot.startup is not None and not slot.startup.result
        probes = (
            [("Startup", slot.startup)]
            if starting
            else [("Readiness", slot.readiness), ("Liveness", slot.liveness)]
        )
        for kind, state in probes:
            if state is None:
                continue
            for output in state.take_failures():
                self.event("Warning", "Unhealthy", f"{kind} probe failed: {output}", slot)
            if state.due(now):
                state.run_async(self.ip, process.exec, self.wake.set)
        for kind, state in probes:
            if kind == "Readiness" or state is None:
                continue
            if state.failures >= state.probe.failure_threshold:
                self.event(
                    "Normal",
                    "Killing",
                    f"Container {slot.name} failed {kind.lower()} probe, will be restarted",
                    slot,
                )
                self._stop([slot], self._grace_of_pod(), restart=True)
                return

    def _grace_of_pod(self) -> float:
        return float(self.pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE))

    # -- containers --------------------------------------------------------------------------

    def _start(self, slot: Slot) -> None:
        from testing.emulated_cluster.volumesetup import container_binds, sources

        assert self.sandbox is not None
        spec = slot.spec
        if not self._pulled(slot):
            return
        try:
            env = podspec.environment(self._with_ips(), spec, dict(ENV), sources(self))
        except podspec.ConfigError as err:
            slot.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
            self.warn_once("Failed", f"Error: {err}")
            slot.next_start = time.time() + 1.0
            return
        command = [podspec.expand(a, env) for a in spec.get("command") or []]
        args = [podspec.expand(a, env) for a in spec.get("args") or []]
        argv = command + args if command else (args or list(CMD))
        instance = f"{slot.name}-{slot.restart_count}"
        termination = self.dir / "termination" / instance
        termination.parent.mkdir(parents=True, exist_ok=True)
        termination.write_text("")
        try:
            binds = container_binds(self, spec, termination)
        except podspec.ConfigError as err:
            slot.state = {"waiting": {"reason": "CreateContainerConfigError", "message": str(err)}}
            self.warn_once("Failed", f"Error: {err}")
            slot.next_start = time.time() + 1.0
            return
        image = str(spec.get("image") or "")
        if spec.get("imagePullPolicy") == "Always":
            self.event("Normal", "Pulling", f'Pulling image "{image}"', slot)
            self.event("Normal", "Pulled", f'Successfully pulled image "{image}" in 0s', slot)
        else:
            self.event(
                "Normal", "Pulled", f'Container image "{image}" already present on machine', slot
            )
        cgroup = Cgroup(self.cgroup.path / instance).create(podspec.memory_limit(spec))
        log = LogFile(self.log_dir / slot.name, slot.restart_count, time.time_ns)
        process = ContainerProcess(
            self.dir / "containers" / instance,
            self.sandbox,
            image_for(self.ctx, image),
            cgroup,
            log,
            argv,
            env,
            spec.get("workingDir") or WORKDIR,
            binds,
        )
        slot.container_id = "containerd://" + secrets.token_hex(32)
        self.event("Normal", "Created", f"Created container {slot.name}", slot)
        process.start()
        slot.process = process
        slot.state = {"running": {"startedAt": rfc3339(process.started_at)}}
        self.event("Normal", "Started", f"Started container {slot.name}", slot)
        if not slot.init:
            ready, live, startup = (
                podspec.probe(spec.get("readinessProbe"), spec),
                podspec.probe(spec.get("livenessProbe"), spec),
                podspec.probe(spec.get("startupProbe"), spec),
            )
            slot.readiness = ProbeState(ready, process.started_at, False) if ready else None
            slot.liveness = ProbeState(live, process.started_at, True) if live else None
            slot.startup = ProbeState(startup, process.started_at, False) if startup else None

    def _pulled(self, slot: Slot) -> bool:
        """An image the node does not have fails to pull: ErrImagePull, then ImagePullBackOff
        with the kubelet's back-off (10 s doubling to 300 s), retried for ever."""
        image = str(slot.spec.get("image") or "")
        known = {normalized(name) for name in self.ctx.images}
        if normalized(image) in known:
            return True
        ref = normalized(image)
        message = (
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed '
            f'to resolve reference "{ref}": {ref}: not found'
        )
        if slot.pull_backoff == 0:
            self.event("Normal", "Pulling", f'Pulling image "{image}"', slot)
            self.event("Warning", "Failed", f'Failed to pull image "{image}": {message}', slot)
            self.event("Warning", "Failed", "Error: ErrImagePull", slot)
            slot.state = {"waiting": {"reason": "ErrImagePull", "message": message}}
        else:
            self.event("Normal", "BackOff", f'Back-off pulling image "{image}"', slot)
            self.event("Warning", "Failed", "Error: ImagePullBackOff", slot)
            text = f'Back-off pulling image "{image}"'
            slot.state = {"waiting": {"reason": "ImagePullBackOff", "message": text}}
        slot.pull_backoff = min(BACKOFF_MAX, slot.pull_backoff * 2 or BACKOFF_START)
        slot.next_start = time.time() + slot.pull_backoff
        return False

    def _with_ips(self) -> JSON:
        pod = dict(self.pod)
        pod["status"] = {**(pod.get("status") or {}), "podIP": self.ip, "hostIP": self.ctx.node_ip}
        return pod

    def _exited(self, slot: Slot, never_restart: bool) -> None:
        """kuberuntime: record the exit, then restart per restartPolicy with back-off."""
        process = slot.process
        assert process is not None
        result: Exit = process.wait()
        terminated: JSON = {
            "exitCode": result.code,
            "reason": result.reason,
            "startedAt": rfc3339(process.started_at),
            "finishedAt": now_rfc3339(),
            "containerID": slot.container_id,
        }
        message = result.message or self._termination_message(slot)
        if message:
            terminated["message"] = message
        shutil.rmtree(process.directory, ignore_errors=True)
        process.cgroup.remove()
        slot.process = None
        slot.readiness = slot.liveness = slot.startup = None
        restart = (
            not never_restart
            and not self._stopping()
            and (
                self.policy == "Always"
                or (self.policy == "OnFailure" and result.code != 0)
                or (slot.init and result.code != 0 and self.policy != "Never")
            )
        )
        if slot.init and result.code == 0:
            restart = False
        if not restart:
            slot.state = {"terminated": terminated}
            slot.done = True
            return
        slot.last_state = {"terminated": terminated}
        slot.restart_count += 1
        slot.next_start = time.time() + slot.backoff
        if slot.backoff:
            text = (
                f"back-off {slot.backoff:g}s restarting failed container={slot.name} "
                f"pod={self.name}_{self.namespace}({self.uid})"
            )
            slot.state = {"waiting": {"reason": "CrashLoopBackOff", "message": text}}
            self.event(
                "Warning",
                "BackOff",
                f"Back-off restarting failed container {slot.name} "
                f"in pod {self.name}_{self.namespace}({self.uid})",
                slot,
            )
        else:
            slot.state = {"waiting": {"reason": result.reason}}
        slot.backoff = min(BACKOFF_MAX, slot.backoff * 2 if slot.backoff else BACKOFF_START)

    def _termination_message(self, slot: Slot) -> str:
        path = self.dir / "termination" / f"{slot.name}-{slot.restart_count}"
        try:
            return path.read_text()[:4096]
        except OSError:
            return ""

    def _stop(self, slots: list[Slot], grace: float, restart: bool = False) -> None:
        """SIGTERM, up to ``grace`` seconds, then SIGKILL (kuberuntime killContainer);
        ``restart``: the containers may restart as restartPolicy says (a failed probe)."""
        running = [s for s in slots if s.process is not None and s.process.running()]
        for slot in running:
            assert slot.process is not None
            if grace > 0 and not restart:  # a failed probe said why already
                self.event("Normal", "Killing", f"Stopping container {slot.name}", slot)
            slot.process.signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
        deadline = time.time() + grace
        while any(s.process is not None and s.process.running() for s in running):
            if time.time() >= deadline:
                for slot in running:
                    assert slot.process is not None
                    slot.process.signal(signal.SIGKILL)
                deadline = float("inf")
            time.sleep(TICK)
        for slot in running:
            self._exited(slot, not restart)

    def _stop_all(self, grace: float) -> None:
        self._stop(self.containers(), grace)
        for slot in self.containers():
            if slot.process is not None:
                self._exited(slot, True)

    def _teardown_sandbox(self) -> None:
        if self.sandbox is not None:
            if self.sandbox.netns:
                network.pod_network_down(self.uid)
            subprocess.run(["umount", str(self.sandbox.uts)], check=False, capture_output=True)
            self.sandbox = None
        if self.ip is not None and self.ip != self.ctx.node_ip:
            self.ctx.addresses.give_back(self.ip)
        self.cgroup.remove()

    def _teardown_volumes(self) -> None:
        from testing.emulated_cluster.volumesetup import unmount_pod_volumes

        unmount_pod_volumes(self)

    # -- status ------------------------------------------------------------------------------

    def compute_phase(self) -> str:
        """kubelet_pods.go getPhase (1.27+: a pod being deleted ends Failed or Succeeded)."""
        # generateAPIPodStatus: an evicted pod is Failed; the status manager writes it once
        # nothing runs.
        if self.evicted is not None and all(s.process is None for s in self.containers()):
            return "Failed"
        return self._phase_before_eviction()

    def _phase_before_eviction(self) -> str:
        if any(s.done and not s.succeeded() for s in self.init_slots):
            return "Failed"
        if not all(s.done and s.succeeded() for s in self.init_slots):
            return "Failed" if self.finished.is_set() and self._stopping() else "Pending"
        running = sum(s.running() for s in self.slots)
        stopped = sum(
            "terminated" in s.state or "terminated" in s.last_state
            for s in self.slots
            if not s.running()
        )
        waiting = len(self.slots) - running - stopped
        succeeded = sum(s.done and s.succeeded() for s in self.slots)
        if self.finished.is_set() and self._stopping():
            return "Succeeded" if succeeded == len(self.slots) else "Failed"
        if waiting > 0:
            return "Pending"
        if running > 0:
            return "Running"
        if all(s.done for s in self.slots):
            return "Succeeded" if succeeded == len(self.slots) else "Failed"
        return "Running"

    def _condition(self, kind: str, ok: bool, reason: str = "", message: str = "") -> JSON:
        status = "True" if ok else "False"
        previous = self.transitions.get(kind)
        if previous is None or previous[0] != status:
            self.transitions[kind] = (status, time.time())
        condition: JSON = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(self.transitions[kind][1]),
        }
        # Explicit nulls, as the two-way patch of PatchPodStatus has for fields that went away: a
        # strategic merge keeps any field of a condition the patch does not mention.
        said = not ok and bool(reason)
        condition["reason"] = reason if said else None
        condition["message"] = message if said else None
        return condition

    def _container_status(self, slot: Slot) -> JSON:
        image = str(slot.spec.get("image") or "")
        digest = hashlib.sha256(image.encode()).hexdigest()  # the emulated image has one digest
        status: JSON = {
            "name": slot.name,
            "state": slot.state,
            "lastState": slot.last_state,
            "ready": slot.ready() if not slot.init else (slot.done and slot.succeeded()),
            "restartCount": slot.restart_count,
            "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{digest}",
            "started": slot.started(),
        }
        if slot.container_id:
            status["containerID"] = slot.container_id
        return status

    def post_status(self) -> None:
        """generateAPIPodStatus, written through pods/{name}/status when it changed."""
        self.phase = self.compute_phase()
        terminal = self.phase in ("Succeeded", "Failed")
        initialized = all(s.done and s.succeeded() for s in self.init_slots)
        unready = [s.name for s in self.slots if not s.ready()]
        pending_init = [s.name for s in self.init_slots if not (s.done and s.succeeded())]
        ready = not unready and not terminal
        why = (
            ("PodCompleted", "")
            if terminal
            else ("ContainersNotReady", f"containers with unready status: [{' '.join(unready)}]")
        )
        conditions = [
            self._condition("PodReadyToStartContainers", self.sandbox is not None),
            self._condition(
                "Initialized",
                initialized,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{' '.join(pending_init)}]",
            ),
            self._condition("Ready", ready, *why),
            self._condition("ContainersReady", ready, *why),
            self._condition("PodScheduled", True),
        ]
        status: JSON = {
            "phase": self.phase,
            "conditions": conditions,
            "hostIP": self.ctx.node_ip,
            "hostIPs": [{"ip": self.ctx.node_ip}],
            "startTime": rfc3339(self.start_time),
            "containerStatuses": [self._container_status(s) for s in self.slots],
        }
        if self.init_slots:
            status["initContainerStatuses"] = [self._container_status(s) for s in self.init_slots]
        if self.ip is not None and (self.sandbox is not None or terminal):
            status["podIP"], status["podIPs"] = self.ip, [{"ip": self.ip}]
        if self.evicted is not None and terminal:
            status["reason"], status["message"] = self.evicted
        comparable = {**status, "conditions": [{**c, "lastTransitionTime": ""} for c in conditions]}
        if comparable == self._last_status or self.deleted.is_set():
            return
        self._last_status = comparable
        try:
            self.ctx.api.patch_pod_status(self.namespace, self.name, self.uid, status)
        except (ApiFailure, OSError):
            self._last_status = None  # try again on the next tick
