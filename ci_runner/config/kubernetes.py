"""train.yaml's ``kubernetes``: where and how the pods run (the namespace, the nodes they may
run on and the taints they tolerate, DNS, the launcher's placement, the pip cache's claim, the
user, sshd's port, what is kept after the run and each phase's timeout), as the schema's data."""

from __future__ import annotations

from typing import Final

from ci_runner.config.affinity import Affinity
from ci_runner.config.builders import (
    build_dns,
    build_dns_option,
    build_kubernetes,
    build_launcher,
    build_toleration,
)
from ci_runner.config.engine import Field, ListOf, MapOf, Record, shown_default
from ci_runner.config.names import ip_address, k8s_name, label_key, label_value
from ci_runner.config.scalars import Duration, Int, OneOf, Str
from ci_runner.config.types import (
    Effect,
    KubernetesOptions,
    OnPreemption,
    Operator,
    PvcAccessMode,
    Toleration,
)

_K8S_NAME: Final = Str(rule=k8s_name("object", subdomain=True))

_TOLERATION: Final = Record(
    Field("key", Str(rule=label_key), "The taint's key.", "gpu"),
    Field(
        "operator",
        OneOf[Operator]("Exists", "Equal"),
        "Exists matches any value.",
        "Exists",
        shown_default(Toleration, "operator"),
    ),
    Field(
        "value",
        Str(scalars=True, empty=True, rule=label_value),
        "The taint's value (only with operator Equal).",
        "a100",
    ),
    Field(
        "effect",
        OneOf[Effect]("NoSchedule", "PreferNoSchedule", "NoExecute"),
        "The taint effect to tolerate; every effect when omitted.",
        "NoSchedule",
    ),
    Field(
        "toleration_seconds",
        Int(0),
        "How long a NoExecute taint is tolerated before eviction.",
        "300",
    ),
    build=build_toleration,
)

_DNS_OPTION: Final = Record(
    Field("name", Str(spaces=False), "Resolver option name.", "ndots", required=True),
    Field("value", Str(scalars=True, spaces=False), "Resolver option value.", '"2"'),
    build=build_dns_option,
)

_DNS: Final = Record(
    Field(
        "nameservers",
        ListOf(Str(rule=ip_address), doc="list of IP addresses", limit=3),
        "DNS servers for every pod (at most 3).",
        "[10.96.0.10]",
    ),
    Field(
        "searches",
        ListOf(Str(spaces=False), doc="list of domains", limit=32),
        "DNS search domains.",
        "[svc.cluster.local]",
    ),
    Field(
        "options",
        ListOf(_DNS_OPTION, doc="list of mappings"),
        "Resolver options.",
        '[{name: ndots, value: "2"}]',
    ),
    build=build_dns,
)

_NODE_SELECTOR: Final = MapOf(
    label_key, Str(scalars=True, empty=True, rule=label_value), doc="mapping"
)

_LAUNCHER: Final = Record(
    Field(
        "node_selector",
        _NODE_SELECTOR,
        "Node labels the launcher pod must run on.",
        "{pool: cpu}",
    ),
    Field(
        "tolerations",
        ListOf(_TOLERATION, doc="list of mappings"),
        "Taints the launcher pod tolerates.",
        "[{key: spot, operator: Exists}]",
    ),
    Field(
        "affinity",
        Affinity(),
        "The launcher pod's affinity, as Kubernetes writes it (`nodeAffinity`, `podAffinity`, "
        "`podAntiAffinity`).",
        "{nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [...]}}",
    ),
    build=build_launcher,
)

KUBERNETES: Final = Record(
    Field(
        "context",
        Str(spaces=False),
        "The kubeconfig context to use; for the GitLab agent for Kubernetes "
        "`<agent configuration project path>:<agent name>`. The CI/CD variable KUBE_CONTEXT "
        "and `--kube-context` override it; when none is given, the kubeconfig's current "
        "context (or its only one).",
        "my-group/k8s-agents:gpu-cluster",
    ),
    Field(
        "namespace",
        Str(rule=k8s_name("namespace", subdomain=False)),
        "Namespace to run in; when omitted, the kubeconfig context's namespace, else the "
        "pod's service account's, else `default`.",
        "ml-training",
    ),
    Field(
        "tolerations",
        ListOf(_TOLERATION, doc="list of mappings"),
        "Taints the workers tolerate (e.g. of GPU nodes); the launcher's are "
        "`launcher.tolerations`.",
        "[{key: gpu, operator: Exists, effect: NoSchedule}]",
    ),
    Field(
        "node_selector",
        _NODE_SELECTOR,
        "Node labels the workers must run on (the launcher: `launcher.node_selector`).",
        "{gpu-type: a100}",
    ),
    Field(
        "launcher",
        _LAUNCHER,
        "Where the launcher pod (mpirun: 500m of CPU, no GPU) may run. It gets none of the "
        "workers' `node_selector` and `tolerations`, so that it takes no slot on a GPU node.",
        "{node_selector: {pool: cpu}}",
        "none: any node without a taint",
    ),
    Field("dns_config", _DNS, "The pods' DNS settings (dnsConfig).", "{nameservers: [10.96.0.10]}"),
    Field("service_account", _K8S_NAME, "Service account of the pods.", "trainer"),
    Field("priority_class", _K8S_NAME, "Priority class of the pods.", "high-priority"),
    Field(
        "image_pull_secrets",
        ListOf(_K8S_NAME, doc="list of names", unique=True),
        "Secrets for pulling a private image.",
        "[registry-credentials]",
    ),
    Field(
        "queue",
        _K8S_NAME,
        "Gang-scheduling queue of Volcano or scheduler-plugins (the MPIJob's "
        "`schedulingPolicy.queue`); all pods start together. Not with `distributed: torchrun`. "
        "Kueue's queue is `local_queue`.",
        "training",
    ),
    Field(
        "local_queue",
        Str(rule=k8s_name("LocalQueue", subdomain=False)),
        "Kueue's LocalQueue in the job's namespace: the job is labelled "
        "`kueue.x-k8s.io/queue-name` and created suspended, and Kueue starts it when its "
        "ClusterQueue has quota for all its pods. The CI log says why it waits (Kueue's own "
        "words), and neither `setup_timeout` nor `unschedulable_timeout` runs meanwhile. A "
        "LocalQueue that does not exist or is stopped ends the run at once. For Horovod and "
        "torchrun alike; not with `queue`, which is Volcano's or scheduler-plugins'. The project "
        "may allow only some LocalQueues (the component's input `allowed_local_queues`).",
        "team-a",
    ),
    Field(
        "workload_priority_class",
        Str(rule=k8s_name("WorkloadPriorityClass", subdomain=False)),
        "Kueue's WorkloadPriorityClass for the job (`kueue.x-k8s.io/priority-class`): the "
        "order in its queue, and which workloads it may preempt or be preempted by. Only with "
        "`local_queue`. The project may allow only some classes (the component's input "
        "`allowed_workload_priority_classes`).",
        "low-priority",
    ),
    Field(
        "queue_timeout",
        Duration(),
        "How long the job may wait in `local_queue` before it starts (each time it is queued, "
        "and again after a preemption); it then fails, saying why Kueue kept it. Without it the "
        "job waits until the CI job's own time runs out. Only with `local_queue`.",
        "1h",
        "none: the CI job's time limit",
    ),
    Field(
        "pip_cache_pvc",
        _K8S_NAME,
        "PersistentVolumeClaim holding pip's cache and the virtualenvs installed with it, "
        "mounted by every worker; an emptyDir per worker when omitted. A later start whose "
        "requirements files (and those they include), image and `PIP_*` settings are the same "
        "runs no pip: an unpinned requirement stays at the version first installed until one "
        "of them changes. Requirements that name a local path are never kept; a virtualenv no "
        "start used for 14 days is removed. More than one worker needs a ReadWriteMany claim "
        "(`pip_cache_access_mode`). Protected branches and tags use its `protected/` directory, "
        "every other ref its `unprotected/`, and a pod mounts only its own; the project may "
        "allow only some claims (the component's input `allowed_pip_cache_claims`).",
        "pip-cache",
    ),
    Field(
        "pip_cache_access_mode",
        OneOf[PvcAccessMode]("ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"),
        "The access mode of the `pip_cache_pvc` claim. Only a ReadWriteMany claim is shared "
        "by every worker; with another mode `pip_cache_pvc` is refused for more than one "
        "worker (the second worker could never mount it).",
        "ReadWriteMany",
        shown_default(KubernetesOptions, "pip_cache_access_mode"),
    ),
    Field(
        "cluster_domain",
        Str(rule=k8s_name("cluster domain", subdomain=True)),
        "The cluster's DNS domain. With `dns_config.nameservers` (dnsPolicy None) the pods "
        "search `svc.<domain>` and `<domain>`, so the launcher resolves the workers' names.",
        "cluster.local",
        shown_default(KubernetesOptions, "cluster_domain"),
    ),
    Field(
        "ssh_port",
        Int(1, 65535),
        "The port the workers' sshd listens on and the launcher connects to (images built "
        "on mpioperator/base use 2222).",
        "2222",
        shown_default(KubernetesOptions, "ssh_port"),
    ),
    Field(
        "run_as_user",
        Int(1, 2**31 - 1),
        "A non-root user of the image (its numeric uid) that every container runs as, sshd "
        "included, on `ssh_port` (1024 or more): the workers then meet PodSecurity "
        "`restricted`. Without it the workers run the image's sshd as root (`baseline`), and "
        "the launcher and the setup containers run as 65534 (`nobody`). The user needs a home "
        "and a login shell; sshd runs without PAM (`UsePAM no`, as in MPI Operator's base "
        "images), whose account check cannot read `/etc/shadow` without privilege escalation.",
        "1000",
    ),
    Field(
        "ttl_seconds_after_finished",
        Int(0),
        "Seconds the launcher Job and its pod stay after they finish, while the MPIJob is kept "
        "(`keep_finished`); without it everything goes once the log is saved.",
        "3600",
        shown_default(KubernetesOptions, "ttl_seconds_after_finished"),
    ),
    Field(
        "backoff_limit",
        Int(0),
        "Launcher retries before the job fails. With `distributed: torchrun` a failed node "
        "fails the job at once, whatever this says (no node can rejoin a started run).",
        "0",
        shown_default(KubernetesOptions, "backoff_limit"),
    ),
    Field(
        "keep_finished",
        Duration(),
        "How long the finished MPIJob (its pods, their logs, its Secret) is kept for inspection "
        "with kubectl; by default ci-runner deletes it as soon as the log is saved. A kept job is "
        "marked with the annotation `ci-runner/delete-after`; the first `ci-runner train` or "
        "`ci-runner cancel` in the namespace after that time deletes it (`ci-runner cancel` of "
        "its own CI job at once). Every job is stamped so at submission too, "
        "`unschedulable_timeout` after its workers' deadline (see `timeout`): what a killed CI "
        "job leaves is deleted the same way.",
        "2h",
        "none: deleted at once",
    ),
    Field(
        "setup_timeout",
        Duration(),
        "How long the pods may take to get ready before the launcher starts: image pulls, the "
        "code fetch and the requirements install. When it passes, the job fails naming the "
        "worker that is not Ready and what it waits for; time spent unschedulable does not count "
        "(`unschedulable_timeout` covers it), nor time spent suspended by a queue. A job the "
        "queue resumes sets up again with the full time, and one whose workers are all Ready "
        "but whose launcher does not start fails when it passes, saying why.",
        "45m",
        shown_default(KubernetesOptions, "setup_timeout", duration=True),
    ),
    Field(
        "unschedulable_timeout",
        Duration(),
        "How long pods may stay unschedulable before the job fails.",
        "10m",
        shown_default(KubernetesOptions, "unschedulable_timeout", duration=True),
    ),
    Field(
        "on_preemption",
        OneOf[OnPreemption]("wait", "fail"),
        "What ci-runner does when a queue (Kueue, or another that sets the MPIJob's "
        "`runPolicy.suspend`) suspends the job after it started: `wait` keeps the CI job "
        "waiting until the queue resumes it, and the job then sets up and trains again from the "
        "start; `fail` ends the run at once as a failure and deletes the MPIJob, so the queue "
        "does not resume it later. A job that is queued before it starts waits either way.",
        "fail",
        shown_default(KubernetesOptions, "on_preemption"),
    ),
    build=build_kubernetes,
)
