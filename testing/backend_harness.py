"""The backend harness: the real Kubernetes backend run on a thread against any control plane,
the scripted cluster's (testing/scripted_cluster/, scripted kubelet) or the emulated cluster's
(testing/emulated_cluster/, real nodes), and what it prints watched.

:func:`cluster_on` gives one test a :class:`Cluster` in a namespace of its own: the backend's
run on a thread (``start``/``started``), its CI log (:class:`CiLog`, waited on line by line), its
ManualClock (the backend's own timers), the scenario of a job (``job(name)``) and what the
namespace holds (``leftovers``). The backend talks to kube-apiserver through the test's
:class:`~testing.scripted_cluster.faults.FaultProxy` (``cluster.api``): it counts the backend's
requests and watches and injects faults."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypedDict

import kubernetes.client
from typing_extensions import Unpack

from ci_runner.backends.kubernetes.backend import KubernetesBackend
from ci_runner.backends.kubernetes.kueue import QueueInfo
from ci_runner.backends.kubernetes.options import JobOptions
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import RunResult
from ci_runner.clock import ManualClock
from ci_runner.config.types import KubernetesOptions, OnPreemption
from ci_runner.console import Console
from ci_runner.http_policy import RetryPolicy
from ci_runner.masking import SecretMasker
from ci_runner.plan.run_plan import JobSecret, secret_name
from testing.ci_log import CiLog
from testing.control_plane import accounts
from testing.control_plane.run import ControlPlane
from testing.kube_api import ApiFailure, Informer
from testing.mpijob_manifests import GIT_TOKEN, JOB, mpijob_manifest, plan_facts
from testing.scripted_cluster.cluster import ScriptedCluster
from testing.scripted_cluster.faults import FaultProxy
from testing.scripted_cluster.kubelet import ScriptedKubelet
from testing.scripted_cluster.scenarios import MPIJOBS, JobScenario
from testing.torchrun_jobs import (
    IndexedJobScenario,
    indexed_job_manifest,
    job_facts,
    service_manifest,
)
from testing.waiting import WAIT, wait_for

JSON = dict[str, Any]
# What a namespace holds from the start, and what leftovers() therefore ignores.
BASELINE = {("serviceaccounts", "default"), ("configmaps", "kube-root-ca.crt")}
KINDS = {
    "pods": "/api/v1/namespaces/{ns}/pods",
    "secrets": "/api/v1/namespaces/{ns}/secrets",
    "configmaps": "/api/v1/namespaces/{ns}/configmaps",
    "services": "/api/v1/namespaces/{ns}/services",
    "serviceaccounts": "/api/v1/namespaces/{ns}/serviceaccounts",
    "jobs.batch": "/apis/batch/v1/namespaces/{ns}/jobs",
    "mpijobs.kubeflow.org": MPIJOBS,
    "resourcequotas": "/api/v1/namespaces/{ns}/resourcequotas",
    "roles": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "rolebindings": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
}
WATCHED = ("mpijobs", "pods", "events")
_numbers = itertools.count(1)


class RunOptions(TypedDict, total=False):
    """How a test runs the backend, beside the manifest (as ``ci-runner train`` sets them)."""

    unschedulable_timeout: float  # 600 unless given
    token: str | None  # the rbac.yaml ServiceAccount's unless given
    on_preemption: OnPreemption
    keep_finished: float  # 0 unless given
    queue: QueueInfo  # kubernetes.local_queue as queue_check found it; none unless given


@contextmanager
def cluster_on(on: ControlPlane | ScriptedCluster, tmp_path: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` in a fresh namespace of ``on``: a scripted cluster (its scripted
    kubelet plays the nodes) or a control plane with real nodes; the namespace goes at the end."""
    if isinstance(on, ScriptedCluster):
        assert on.kubelet is not None, "the scripted cluster is not started"
        plane, kubelet = on.plane.plane, on.kubelet
    else:
        plane, kubelet = on, None
    cluster = Cluster(plane, kubelet, tmp_path, f"ml-{next(_numbers)}")
    try:
        yield cluster
    finally:
        cluster.close()


class Cluster:
    """One test's part of a cluster (its namespace ``self.namespace``)."""

    def __init__(
        self,
        plane: ControlPlane,
        kubelet: ScriptedKubelet | None,
        tmp_path: Path,
        namespace: str,
    ) -> None:
        self._kubelet = kubelet
        self.plane = plane
        self.admin = self.plane.admin_api()
        self.namespace = namespace
        self.tmp_path = tmp_path
        self.log = CiLog()
        self.clock = ManualClock()
        self.backend_under_test: KubernetesBackend | None = None
        self._thread: threading.Thread | None = None
        self._result: RunResult | None = None
        self._error: BaseException | None = None
        self._informers: list[Informer] = []
        accounts.create_namespace(self.admin, namespace)
        accounts.apply_rbac(self.admin, namespace)
        self._baseline = set(self._objects()) | BASELINE
        self.token = accounts.account_token(self.admin, namespace)
        self.api = FaultProxy(self.plane.url, self.plane.ca).start()

    @property
    def kubelet(self) -> ScriptedKubelet:
        """The scripted nodes (a scripted step on real nodes is a mistake of the test)."""
        assert self._kubelet is not None, "real nodes: no scripted kubelet"
        return self._kubelet

    def close(self) -> None:
        backend = self.backend_under_test
        if self._thread is not None and self._thread.is_alive() and backend:
            backend.cancel()
            self._thread.join(timeout=WAIT)
        self.api.stop()
        for informer in self._informers:
            informer.stop()
        with suppress(ApiFailure):
            self.admin.delete(f"/api/v1/namespaces/{self.namespace}")

    # -- the namespace ----------------------------------------------------------------------

    def _objects(self) -> list[tuple[str, str]]:
        found = []
        for key, path in KINDS.items():
            items, _ = self.admin.list(path.format(ns=self.namespace))
            found += [(key, str(item["metadata"]["name"])) for item in items]
        return sorted(found)

    def leftovers(self, settle: float = WAIT) -> list[tuple[str, str]]:
        """What the run left in the namespace (beside what it held before the test); waits
        up to ``settle`` seconds for the garbage collector to empty it."""
        deadline = time.monotonic() + settle
        while True:
            left = [o for o in self._objects() if o not in self._baseline]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def label_namespace(self, labels: dict[str, str]) -> None:
        self.admin.merge_patch(
            f"/api/v1/namespaces/{self.namespace}", {"metadata": {"labels": labels}}
        )

    def quota(self, name: str, hard: dict[str, str]) -> None:
        """A ResourceQuota, once the quota controller has counted it (admission refuses every
        pod of a namespace whose quota has no status yet)."""
        path = f"/api/v1/namespaces/{self.namespace}/resourcequotas"
        body = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": name},
            "spec": {"hard": hard},
        }
        self.admin.create(path, body)
        wait_for(
            f"ResourceQuota {name} counted",
            lambda: ((self.admin.get(f"{path}/{name}") or {}).get("status") or {}).get("hard"),
        )
        self._baseline.add(("resourcequotas", name))

    def forbid(self, verb: str, resource: str) -> None:
        """The backend's account may no longer ``verb`` ``resource`` ("mpijobs", "pods/log"):
        its Role without that verb (RBAC then refuses it with its own text)."""
        path = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{self.namespace}/roles"
        for role in self.admin.list(path)[0]:
            for rule in role["rules"]:
                if resource in rule.get("resources", []):
                    rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            role["rules"] = [rule for rule in role["rules"] if rule["verbs"]]
            self.admin.merge_patch(f"{path}/{role['metadata']['name']}", {"rules": role["rules"]})

    def forbid_mpijob_create(self) -> None:
        """The backend's account may no longer create MPIJobs."""
        self.forbid("create", "mpijobs")

    def mpijob_statuses(self) -> list[JSON]:
        """Every status the MPIJobs of the namespace get from now on (a watch of the test's)."""
        statuses: list[JSON] = []
        informer = Informer(
            self.admin,
            MPIJOBS.format(ns=self.namespace),
            {},
            lambda _kind, obj: statuses.append(obj.get("status") or {}),
            f"statuses-{self.namespace}",
        ).start()
        informer.synced.wait(WAIT)
        self._informers.append(informer)
        return statuses

    # -- the backend ------------------------------------------------------------------------

    def job(self, name: str = JOB) -> JobScenario:
        return JobScenario(self.admin, self._kubelet, name, self.namespace)

    def api_client(self, token: str | None = None) -> kubernetes.client.ApiClient:
        """A client through ``self.api`` with the examples/rbac.yaml ServiceAccount's token
        (ci-runner's rights), or ``token``."""
        configuration = kubernetes.client.Configuration()
        configuration.host = self.api.url
        configuration.api_key = {"authorization": f"Bearer {token or self.token}"}
        return kubernetes.client.ApiClient(configuration)

    def backend(self, manifest: JSON | None = None, **run: Unpack[RunOptions]) -> KubernetesBackend:
        unschedulable_timeout = run.get("unschedulable_timeout", 600)
        sink = LogSink(
            self.tmp_path / f"train-{time.monotonic_ns()}.log", self.log, SecretMasker([GIT_TOKEN])
        )
        manifest = manifest or mpijob_manifest()
        name = secret_name(manifest["metadata"]["name"])
        # An Indexed Job (distributed: torchrun) comes with its headless Service.
        indexed = manifest["kind"] == "Job"
        facts = (job_facts if indexed else plan_facts)(manifest, unschedulable_timeout)
        options = JobOptions(
            api_client=self.api_client(run.get("token")),
            namespace=self.namespace,
            manifest=manifest,
            secret=JobSecret(name, ("git-token",), {"git-token": GIT_TOKEN}),
            **facts,
            unschedulable_timeout=unschedulable_timeout,
            keep_finished=run.get("keep_finished", 0),
            on_preemption=run.get("on_preemption", KubernetesOptions.on_preemption),
            retry=RetryPolicy(attempts=6, base_delay=1.0, max_delay=30.0),
            # As train gives it: the pod scripts' ConfigMap (the scripted kubelet runs none).
            scripts={
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"{manifest['metadata']['name']}-scripts"},
                "data": {"sshd.sh": "exec sshd\n"},
            },
            service=service_manifest(manifest["metadata"]["name"]) if indexed else None,
            queue=run.get("queue"),
        )
        self.backend_under_test = KubernetesBackend(
            options, sink, Console(self.log, self.log), self.clock
        )
        return self.backend_under_test

    def start(self, manifest: JSON | None = None, **options: Unpack[RunOptions]) -> None:
        """``backend(...).run()`` on a thread."""
        backend = self.backend(manifest, **options)

        def run() -> None:
            try:
                self._result = backend.run()
            except BaseException as exc:
                self._error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def wait_watching(self) -> None:
        """Until the backend watches its MPIJob, pods and Events."""
        self.api.wait_until(lambda: set(WATCHED) <= self.api.watching())

    def watched(self) -> list[str]:
        """The backend's resources with a watch open now."""
        watching = self.api.watching()
        return [resource for resource in WATCHED if resource in watching]

    def wait_watching_pods_alone(self) -> None:
        """Until the backend watches only the pods (the job runs steadily)."""
        self.api.wait_until(lambda: self.watched() == ["pods"])

    def started(self, manifest: JSON | None = None, **run: Unpack[RunOptions]) -> JobScenario:
        """Start the backend, wait until it watches; the job's scenario."""
        self.start(manifest, **run)
        self.wait_watching()
        return self.job(str((manifest or mpijob_manifest())["metadata"]["name"]))

    def started_indexed(
        self, manifest: JSON | None = None, **run: Unpack[RunOptions]
    ) -> IndexedJobScenario:
        """Start the backend on an Indexed Job (``distributed: torchrun``), wait until it
        watches the Job, its pods and Events; the nodes' scenario."""
        manifest = manifest or indexed_job_manifest()
        self.start(manifest, **run)
        self.api.wait_until(lambda: {"jobs", "pods", "events"} <= self.api.watching())
        name = str(manifest["metadata"]["name"])
        return IndexedJobScenario(self.admin, self.kubelet, name, self.namespace)

    def result(self, timeout: float = WAIT) -> RunResult:
        """Wait for ``run()`` to return; its RunResult (or its exception, raised)."""
        assert self._thread is not None
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            raise AssertionError(f"run() did not return; the CI log so far: {self.log.lines}")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    def error(self, timeout: float = WAIT) -> BaseException:
        """Wait for ``run()`` to raise; the exception."""
        assert self._thread is not None
        self._thread.join(timeout=timeout)
        assert self._error is not None, f"run() did not raise: {self._result}"
        return self._error


def submitted(cluster: Cluster, name: str = JOB) -> str:
    """What ci-runner logs once it has created MPIJob ``name`` in the test's namespace."""
    return cluster.job(name).submitted


def succeeded(name: str = JOB) -> list[str]:
    """What ci-runner logs last for MPIJob ``name`` that succeeded (kept for no time)."""
    return [
        f"[ci-runner] MPIJob {name} succeeded",
        f"[ci-runner] deleted MPIJob {name}, its pods and its Secret",
    ]
