"""Start and stop the real control plane of one run: etcd on loopback, kube-apiserver on the
address it is given (the emulated cluster's bridge gateway by default, or loopback for the
scripted cluster), kube-controller-manager, kube-scheduler, MPI Operator v0.8.2 (in a network
namespace of its own: its health server binds ``:8080`` on every interface, hard-wired in
``cmd/mpi-operator/app/server.go``; an :class:`OperatorNetwork` makes that namespace and says how
the operator reaches kube-apiserver from it) and, as asked (:class:`kueue.Mode`), Kueue v0.17.0's
CRDs or Kueue itself with its webhooks on loopback (:mod:`.kueue`). Every process goes into the
run's cgroup and every file into its state directory, so the owner's cleanup removes what a
killed run left
(``testing/emulated_cluster/cleanup.py``, ``testing/scripted_cluster/leftovers.py``)."""

from __future__ import annotations

import ipaddress
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import requests
import yaml

from testing.control_plane import accounts, binaries, kueue, pki, rbac
from testing.host import marks, network, processes
from testing.host.cgroups import Cgroup
from testing.kube_api import Api, ApiFailure
from testing.paths import REPO_ROOT
from testing.ports import free_port

JSON = dict[str, Any]
CRD = REPO_ROOT / "tests" / "data" / "mpi-operator-v0.8.2" / "kubeflow.org_mpijobs.yaml"
OPERATOR_NETNS = marks.NETNS_PREFIX + "mpi-operator"
OPERATOR_VETH = marks.VETH_PREFIX + "mpiop"
LOCK_NAMESPACE = "mpi-operator"  # the operator's -lock-namespace default; it must exist
START_TIMEOUT = 120.0  # kube-apiserver on 2 busy cores takes 10-40 s to be ready
# What the kubelets and tests need of kube-controller-manager (its --controllers names:
# cmd/kube-controller-manager/names/controller_names.go, kubernetes v1.35.4);
# the root CA publisher writes kube-root-ca.crt, which every pod's projected token volume reads;
# the node lifecycle controller lifts the not-ready taint admission puts on every new Node; the
# PersistentVolume binder binds claims to volumes (the scheduler waits for that); the
# EndpointSlice controller publishes the Services' endpoints CoreDNS answers from.
CONTROLLERS = (
    "endpointslice-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "persistentvolume-binder-controller",
    "job-controller",
    "ttl-after-finished-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourcequota-controller",
    "pod-garbage-collector-controller",
    "root-ca-certificate-publisher-controller",
)


class StartFailed(Exception):
    """A part of the control plane did not come up; the message ends with its log's tail."""


def kubeconfig(url: str, ca: Path, user: JSON) -> JSON:
    """A kubeconfig for ``url`` with the run's CA and one user entry (token or client cert)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "emulated", "cluster": {"server": url, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "emulated", "user": user}],
        "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "emulated"}}],
        "current-context": "emulated",
    }


def cert_user(pair: pki.KeyPair) -> JSON:
    return {"client-certificate": str(pair.cert), "client-key": str(pair.key)}


def log_tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def check(self) -> None:
        if self.popen.poll() is not None:
            raise StartFailed(
                f"{self.name} exited with {self.popen.returncode}:\n{log_tail(self.log)}"
            )


def spawn(
    argv: list[str], log: Path, cgroup: Cgroup, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """``argv`` in ``cgroup`` (where the run's cleanup finds it), its output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=cgroup.add_self,
        )


def operator_network_up() -> None:
    """The operator's netns, joined to the bridge (it only talks to kube-apiserver there)."""
    network.ip("netns", "add", OPERATOR_NETNS)
    network.ip("link", "add", OPERATOR_VETH, "type", "veth", "peer", "name", "eth0", "netns",
               OPERATOR_NETNS)  # fmt: skip
    network.ip("link", "set", OPERATOR_VETH, "master", marks.BRIDGE, "up")
    inside = ("netns", "exec", OPERATOR_NETNS, "ip")
    network.ip(*inside, "link", "set", "lo", "up")
    network.ip(*inside, "addr", "add", f"{marks.OPERATOR_ADDRESS}/{marks.PREFIX_LEN}", "dev",
               "eth0")  # fmt: skip
    network.ip(*inside, "link", "set", "eth0", "up")


class OperatorNetwork(Protocol):
    """The MPI Operator's network namespace: :meth:`up` makes it and gives the URL of
    kube-apiserver as seen from inside; :meth:`down` removes it."""

    netns: str

    def up(self, api_url: str) -> str: ...

    def down(self) -> None: ...


class BridgeOperatorNetwork:
    """The emulated cluster's: a veth on the bridge, kube-apiserver at the gateway address."""

    netns = OPERATOR_NETNS

    def up(self, api_url: str) -> str:
        operator_network_up()
        return api_url

    def down(self) -> None:
        network.ip("netns", "del", OPERATOR_NETNS, check=False)


class ControlPlane:
    """``start()`` needs ``address`` to exist (the emulated cluster's bridge up, by default);
    ``stop()`` ends the processes and removes the operator's network namespace (the caller's
    cleanup removes files and cgroup)."""

    def __init__(
        self,
        state: Path,
        cgroup: Cgroup,
        bin_dir: Path | None = None,
        address: str = marks.GATEWAY,
        port: int = marks.API_PORT,
        operator_network: OperatorNetwork | None = None,
        kueue_mode: kueue.Mode = kueue.Mode.CRDS,
    ) -> None:
        """``address``:``port``: where kube-apiserver binds and what it advertises;
        ``kueue_mode``: Kueue's CRDs only (the default: a second), all of it, or nothing."""
        self.state = state
        self.cgroup = cgroup
        self.bin_dir = bin_dir or binaries.bin_dir()
        self.address = address
        self.port = port
        self.operator_network: OperatorNetwork = operator_network or BridgeOperatorNetwork()
        self.url = f"https://{address}:{port}"
        self.admin_token = secrets.token_hex(24)
        self.processes: list[Process] = []
        self.pki_dir = state / "pki"
        self.authority: pki.Authority | None = None
        self.kueue_mode = kueue_mode
        self.kueue_ports: kueue.Ports | None = None
        self.kueue_start_seconds: float | None = None  # how long Kueue took to be ready

    @property
    def ca(self) -> Path:
        return self.pki_dir / "ca.crt"

    def admin_api(self) -> Api:
        return Api(self.url, self.admin_token, ca=self.ca)

    def client_certificate(self, user: str, groups: tuple[str, ...] = ()) -> pki.KeyPair:
        """A client certificate of this run's CA: ``user`` in ``groups``."""
        assert self.authority is not None, "start() first"
        stem = user.replace(":", "-")
        return self.authority.issue(stem, user, groups)

    def serving_certificate(self, stem: str, address: str, name: str) -> pki.KeyPair:
        assert self.authority is not None, "start() first"
        return self.authority.issue(stem, name, addresses=(address,), dns_names=(name,))

    def admin_kubeconfig(self, namespace: str = "default") -> JSON:
        config = kubeconfig(self.url, self.ca, {"token": self.admin_token})
        config["contexts"][0]["context"]["namespace"] = namespace
        return config

    # -- start ----------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        self.state.mkdir(parents=True, exist_ok=True)
        self.cgroup.create()
        self.authority = pki.Authority(self.pki_dir)
        etcd_url = self._etcd()
        self._apiserver(etcd_url)
        self._wait_ready()
        # The CRDs before kube-controller-manager: its garbage collector maps owner kinds from
        # discovery at start (then every 30 s); an MPIJob's orphans (a Job's Workload) wait for
        # that otherwise.
        self._apply_crd(self.admin_api())
        self._kueue_crds()
        rbac.grant_kubelet_client(self.admin_api())  # pods/log: the kubelets ask the API
        self._controller_manager()
        self._scheduler()
        self._operator()
        if self.kueue_mode is kueue.Mode.RUNNING:
            self._kueue()
        return self

    def _spawn(self, name: str, argv: list[str]) -> Process:
        log = self.state / f"{name}.log"
        process = Process(name, spawn(argv, log, self.cgroup), log)
        self.processes.append(process)
        return process

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _write_kubeconfig(self, name: str, config: JSON) -> Path:
        path = self.state / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
        return path

    def _etcd(self) -> str:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self._spawn(
            "etcd",
            [
                self._bin("etcd"),
                "--name=emulated",
                f"--data-dir={self.state / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=emulated={peer_url}",
                "--unsafe-no-fsync",  # a tmpfs that dies with the run: nothing to make durable
                "--log-level=warn",
            ],
        )
        return client_url

    def _apiserver(self, etcd_url: str) -> None:
        assert self.authority is not None
        serving = self.authority.issue(
            "apiserver",
            "kube-apiserver",
            addresses=tuple(
                dict.fromkeys((self.address, "127.0.0.1", marks.KUBERNETES_SERVICE_IP))
            ),
            dns_names=(
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                f"kubernetes.default.svc.{marks.CLUSTER_DOMAIN}",
            ),
        )
        kubelet_client = self.authority.issue(
            "apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("kubeadm:cluster-admins",)
        )
        accounts = pki.service_account_keys(self.pki_dir)
        tokens = self.pki_dir / "tokens.csv"
        # token,user,uid,"group1,group2" (the static token file's format)
        tokens.write_text(f'{self.admin_token},emulated-admin,emulated-admin,"system:masters"\n')
        tokens.chmod(0o600)
        # A loopback advertise address cannot be the "kubernetes" Service's endpoint (Endpoints
        # validation refuses loopback): no reconciler then; nothing here dials that Service.
        loopback = ipaddress.ip_address(self.address).is_loopback
        reconciler = ["--endpoint-reconciler-type=none"] if loopback else []
        self._spawn(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.port}",
                *reconciler,
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.ca}",
                f"--token-auth-file={tokens}",
                f"--service-account-key-file={accounts.cert}",
                f"--service-account-signing-key-file={accounts.key}",
                f"--service-account-issuer=https://kubernetes.default.svc.{marks.CLUSTER_DOMAIN}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                f"--service-cluster-ip-range={marks.SERVICE_RANGE}",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                f"--kubelet-certificate-authority={self.ca}",
                "--kubelet-preferred-address-types=InternalIP",
                f"--cert-dir={self.pki_dir}",
                "--profiling=false",
                "--allow-privileged=true",
                # A lost node's pods are deleted 5 s after its unreachable taint, not 300 s.
                "--default-unreachable-toleration-seconds=5",
            ],
        )

    def _wait_ready(self) -> None:
        """Until ``/readyz`` answers ok (RBAC's bootstrap roles exist then)."""
        deadline = time.monotonic() + START_TIMEOUT
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        while True:
            for process in self.processes:
                process.check()
            try:
                answer = requests.get(
                    f"{self.url}/readyz", headers=headers, verify=str(self.ca), timeout=5
                )
                if answer.status_code == 200:
                    return
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise StartFailed(
                    f"kube-apiserver not ready after {START_TIMEOUT:.0f}s:\n"
                    + log_tail(self.state / "kube-apiserver.log")
                )
            time.sleep(0.3)

    def _component(self, name: str, user: str, flags: list[str]) -> None:
        """kube-controller-manager or kube-scheduler: its own client certificate, no leader
        election (one of each) and no health server on any interface."""
        pair = self.client_certificate(user)
        config = self._write_kubeconfig(name, kubeconfig(self.url, self.ca, cert_user(pair)))
        self._spawn(
            name,
            [
                self._bin(name),
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--leader-elect=false",
                "--secure-port=0",
                "--profiling=false",
                *flags,
            ],
        )

    def _controller_manager(self) -> None:
        self._component(
            "kube-controller-manager",
            "system:kube-controller-manager",
            [
                f"--controllers={','.join(CONTROLLERS)}",
                # Each controller with its own service account and bootstrap role (kubeadm's way).
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki_dir / 'sa.key'}",
                f"--root-ca-file={self.ca}",
                "--node-monitor-period=1s",  # new Nodes lose their not-ready taint within a second
                # A node whose Lease (8 s, renewed every 2 s) went unrenewed for 16 s is lost.
                "--node-monitor-grace-period=16s",
            ],
        )

    def _scheduler(self) -> None:
        self._component("kube-scheduler", "system:kube-scheduler", [])

    def _operator(self) -> None:
        api = self.admin_api()
        accounts.create_namespace(api, LOCK_NAMESPACE, wait_for_account=False)
        self._apply_crd(api)
        rbac.grant_operator(api)  # upstream's ClusterRole, bound to the operator's own user
        pair = self.client_certificate(rbac.OPERATOR_USER)
        inside = self.operator_network.up(self.url)
        config = self._write_kubeconfig(
            "mpi-operator", kubeconfig(inside, self.ca, cert_user(pair))
        )
        self._spawn(
            "mpi-operator",
            [
                "ip",
                "netns",
                "exec",
                self.operator_network.netns,
                self._bin("mpi-operator"),
                f"-kubeConfig={config}",
                f"-lock-namespace={LOCK_NAMESPACE}",
                "-kube-api-qps=50",
                "-kube-api-burst=100",
            ],
        )

    def _apply_crd(self, api: Api) -> None:
        """Create the vendored CRD (too big for client-side apply) and wait until Established."""
        crd = yaml.safe_load(CRD.read_text())
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        try:
            api.create(path, crd)
        except ApiFailure as err:
            if err.code != 409:
                raise
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = api.get(f"{path}/{crd['metadata']['name']}") or {}
            conditions = (found.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            time.sleep(0.2)
        raise StartFailed("the MPIJob CRD never became Established")

    def _kueue_crds(self) -> None:
        if self.kueue_mode is kueue.Mode.OFF:
            return
        source = kueue.files(self.bin_dir)
        webhook_url = None
        if self.kueue_mode is kueue.Mode.RUNNING:
            self.kueue_ports = kueue.Ports(free_port(), free_port(), free_port())
            webhook_url = self.kueue_ports.webhook_url
        try:
            kueue.apply_crds(self.admin_api(), kueue.crds(source, webhook_url, self.ca))
        except kueue.KueueFailed as err:
            raise StartFailed(str(err)) from err

    def _kueue(self) -> None:
        """Kueue as its own user, its webhooks installed once it runs; ready when it returns."""
        assert self.kueue_ports is not None
        api = self.admin_api()
        source = kueue.files(self.bin_dir)
        accounts.create_namespace(api, kueue.NAMESPACE, wait_for_account=False)
        kueue.grant(api, source)
        client = self.client_certificate(kueue.USER)
        serving = self.serving_certificate("kueue-serving", kueue.ADDRESS, "kueue-webhook")
        root = self.state / "kueue-root"
        kueue.prepare_root(root, self.url, self.ca, client, serving, self.kueue_ports)
        process = self._spawn("kueue", kueue.command(self.bin_dir / "kueue", root))
        configurations = kueue.webhook_configurations(source, self.kueue_ports.webhook_url, self.ca)
        kueue.install_webhooks(api, configurations)
        try:
            self.kueue_start_seconds = kueue.wait_ready(
                api, self.kueue_ports, process.check, process.log, log_tail
            )
        except kueue.KueueFailed as err:
            raise StartFailed(str(err)) from err

    def wait_operator_leads(self, timeout: float = 60.0) -> JSON:
        """The operator's Lease once it holds it (it runs its controller only then)."""
        api = self.admin_api()
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LOCK_NAMESPACE}/leases/mpi-operator"
        deadline = time.monotonic() + timeout
        while True:
            for process in self.processes:
                process.check()
            lease = api.get(path)
            if lease is not None and (lease.get("spec") or {}).get("holderIdentity"):
                return lease
            if time.monotonic() > deadline:
                raise StartFailed("the MPI Operator never took its Lease:\n" + log_tail(
                    self.state / "mpi-operator.log"))  # fmt: skip
            time.sleep(0.2)

    # -- stop -----------------------------------------------------------------------------------

    def stop(self) -> None:
        """SIGTERM in reverse start order (the API server last but etcd), then SIGKILL."""
        for process in reversed(self.processes):
            processes.end(process.popen, 10)
        self.processes = []
        self.operator_network.down()
