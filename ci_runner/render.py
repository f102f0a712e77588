"""A run plan → the MPIJob manifest (kubeflow.org/v2beta1) that runs it on Kubernetes.

Pure functions: the same plan always gives the same manifest. The manifest comes
from ``templates/mpijob.yaml.j2``; the shell scripts the pods run are ``templates/scripts/*.sh``,
beside ``venv_layer.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from ci_runner import kueue_names, uv_install, variables, venv_layer
from ci_runner.config.scalars import MAX_DURATION
from ci_runner.config.setup_env import FETCH_CODE, INSTALL_REQUIREMENTS, PIP_SETTINGS, SETUP_ENV
from ci_runner.config.types import LAUNCHER_DISK, NOBODY_UID, ContainerResources, TrainConfig
from ci_runner.config.yamlsource import shorten
from ci_runner.context import CIContext, repo_url_problem
from ci_runner.errors import ConfigError, EnvironmentSetupError, GitError, Problem
from ci_runner.kube_yaml import manifest_yaml
from ci_runner.masking import MASK
from ci_runner.plan.run_plan import Hosts, RankLocation, RunPlan
from ci_runner.policy import SETUP_IMAGE_VARIABLE
from ci_runner.templating import environment, templates_dir

CODE_DIR: Final = "/ci-runner/code"
# The pod scripts (templates/scripts/), mounted read-only from the job's ConfigMap.
SCRIPTS_DIR: Final = "/ci-runner-scripts"
# The job Secret's git keys as files, mounted in the fetch-code container only (0400: its user's),
# never on the /ci-runner volume the ranks read; fetch-code.sh's credential helper reads them.
GIT_CREDENTIALS_DIR: Final = "/ci-runner-git"
GIT_CREDENTIAL_FILES: Final = (("GIT_USERNAME", "username"), ("GIT_PASSWORD", "password"))
GIT_CREDENTIALS_MODE: Final = 0o400
# The pip cache claim's directory for protected refs, and for every other: a pod mounts only its
# own (subPath), so no unprotected branch writes what a protected one runs (GitLab keeps its own
# caches apart the same way).
CACHE_SUBPATHS: Final = {True: "protected", False: "unprotected"}
PIP_CACHE_DIR: Final = "/ci-runner-cache/pip"
VENV_CACHE_DIR: Final = "/ci-runner-cache/venvs"
# The operator's mount of the job's ssh keys (sshAuthMountPath): no user's ~/.ssh, so its files
# keep mode 0644 and a non-root sshd or ssh reads them (mpi_job_controller.go setupSSHOnPod).
SSH_AUTH_DIR: Final = "/ci-runner-ssh"
# What the workers' root sshd keeps of root's capabilities (PodSecurity baseline allows them all;
# OpenSSH sshd-session.c, session.c, sshpty.c): its privilege separation chroots (SYS_CHROOT) and
# drops to the sshd user (SETUID, SETGID), and its grace alarm signals that child (KILL); a
# session's pty is chowned to its user (CHOWN); PAM writes audit records (AUDIT_WRITE); port 22
# (NET_BIND_SERVICE). The ranks run as root too, in the checkout the setup containers' user made:
# DAC_OVERRIDE and FOWNER let them write there as root expects to.
SSHD_CAPABILITIES: Final = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
    "SYS_CHROOT",
)
HOSTFILE: Final = "/etc/mpi/hostfile"
DISCOVER_HOSTS: Final = "/etc/mpi/discover_hosts.sh"
# Where the ranks run in the pods, and how the launcher finds them (files the operator mounts).
# The requirements need no PYTHONPATH: install-requirements.sh installs them into a virtualenv in
# /ci-runner/venv, whose bin launch.sh puts first on the PATH mpirun gives every rank.
POD_LOCATION: Final = RankLocation(code_dir=CODE_DIR, dependency_path="")
POD_HOSTS: Final = Hosts(fixed=("--hostfile", HOSTFILE), discovery_script=DISCOVER_HOSTS)
LABEL_PREFIX: Final = "ci-runner"
# Added to each pod's own deadline: the launcher Job's creation, pod starts, mpirun's teardown.
POD_DEADLINE_MARGIN: Final = 600
# kube-apiserver refuses a request body above 3 MiB (apiserver's MaxRequestBodyBytes) and etcd a
# value above 1.5 MiB (--max-request-bytes); an MPIJob applied with kubectl carries itself again
# in its last-applied annotation: measured, 1.5 MiB less 64 KiB of metadata is what always passes.
MPIJOB_MAX_BYTES: Final = 3 * 1024 * 1024 // 2 - 64 * 1024
# A Secret's data may hold at most 1 MiB (pkg/apis/core/validation, MaxSecretSize).
SECRET_MAX_BYTES: Final = 1024 * 1024
# Annotation values are capped so a pathological branch name cannot push the object past the
# API server's 256 KiB annotation limit.
MAX_ANNOTATION_CHARS: Final = 4096

_LABEL_VALUE_BAD: Final = re.compile(r"[^A-Za-z0-9_.-]+")
# A `$` the kubelet's expansion would read as an operator: before `$` or `(` (kubelet_literal).
_EXPANDED_DOLLAR: Final = re.compile(r"\$(?=[$(])")
# libyaml's safe loader when PyYAML has it: ten times faster on the ~17 KB manifest.
_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCRIPTS: Final = {
    "fetch": "fetch-code.sh",
    "install": "install-requirements.sh",
    "ready": "ready.sh",
    "launch": "launch.sh",
    "sshd": "sshd.sh",
}
# torchrun's node entry point, in the ConfigMap of a torchrun job only (torchrun_job.py).
TORCHRUN_SCRIPT: Final = "torchrun.sh"


def render_mpijob(plan: RunPlan) -> dict[str, Any]:
    """The MPIJob that runs ``plan`` at its commit, as a plain dict."""
    check_pod_inputs(plan)
    text = environment().get_template("mpijob.yaml.j2").render(template_values(plan))
    manifest: dict[str, Any] = yaml.load(text, Loader=_LOADER)  # a safe loader
    for replica in manifest["spec"]["mpiReplicaSpecs"].values():
        literal_for_kubelet(replica["template"]["spec"])
    check_sizes(plan, manifest)
    return manifest


def check_pod_inputs(plan: RunPlan) -> None:
    """Refuse a plan whose pods could not fetch the code: no repository URL, or one the pods may
    not use, or no setup image (or one with an unexpanded variable) for the git fetch."""
    if not plan.context.repo_url:
        raise GitError(
            "no repository URL for the pods to fetch the code from; fix: pass --repo-url "
            "https://<gitlab>/<group>/<project>.git, add an 'origin' remote, or run in GitLab CI"
        )
    wrong = repo_url_problem(
        plan.context.repo_url, credential=plan.git_credential, git_protocol=plan.git_protocol
    )
    if wrong is not None:
        source = plan.context.repo_url_from
        raise GitError(
            f"the repository URL {shorten(plan.context.repo_url)}"
            f"{f' (from {source})' if source else ''} {wrong}"
        )
    if not plan.policy.setup_image:
        raise EnvironmentSetupError(
            "no image for the pods' git fetch, which ci-runner never runs in train.yaml's image "
            "(that image would get the git token); fix: pass --setup-image with an image that "
            f"has git and that the project trusts (ci-runner's own), or set {SETUP_IMAGE_VARIABLE}"
        )
    if "$" in plan.policy.setup_image:
        # GitLab Runner expands a variable in another's value; an older one may not in this one.
        # Checked here, where the image is used: cancel, which needs none, must not stop on it.
        raise EnvironmentSetupError(
            f"the setup image {plan.policy.setup_image!r} holds an unexpanded variable; fix: set "
            f"{SETUP_IMAGE_VARIABLE} (the component's input setup_image) to the image itself"
        )


def check_sizes(plan: RunPlan, manifest: Mapping[str, Any], kind: str = "MPIJob") -> None:
    """Refuse (ConfigError, before anything is submitted) a job (an MPIJob, or ``kind``) above
    :data:`MPIJOB_MAX_BYTES` or a Secret whose values are above :data:`SECRET_MAX_BYTES`, naming
    the largest fields."""
    config = plan.config
    size = len(json.dumps(manifest, separators=(",", ":")).encode())
    fields = [(f"env.{name}", value) for name, value in config.env]
    fields += [(f"command[{i}]", word) for i, word in enumerate(config.command)]
    if size > MPIJOB_MAX_BYTES:
        raise ConfigError(
            [
                Problem(
                    config.source_file,
                    "",
                    None,
                    f"the {kind} would be {_size(size)}, more than the {_size(MPIJOB_MAX_BYTES)} "
                    f"the API server stores (largest: {_largest(fields)})",
                    "keep large data in a file of the repository or under `data`, not in env or "
                    "the command",
                )
            ]
        )
    values = dict(plan.secret.data or {})
    total = sum(len(value.encode()) for value in values.values())
    if total > SECRET_MAX_BYTES:
        named = [(f"secrets: {name}", value) for name, value in values.items()]
        raise ConfigError(
            [
                Problem(
                    config.source_file,
                    "secrets",
                    None,
                    f"the job's Secret would hold {total} bytes, more than the "
                    f"{SECRET_MAX_BYTES} (1 MiB) a Secret may (largest: {_largest(named)})",
                    "pass large values another way (a file of the repository, or storage the "
                    "ranks read with a smaller credential)",
                )
            ]
        )


def _size(amount: int) -> str:
    if amount >= 1024 * 1024:
        return f"{amount / 1024 / 1024:.2f} MiB"
    return f"{amount / 1024:.1f} KiB" if amount >= 1024 else f"{amount} bytes"


def _largest(fields: Sequence[tuple[str, str]]) -> str:
    """The three largest fields as the request carries them (JSON-escaped, $ doubled)."""
    sized = [(path, len(json.dumps(kubelet_literal(value)).encode())) for path, value in fields]
    ranked = sorted(sized, key=lambda field: -field[1])[:3]
    return ", ".join(f"{path} {_size(amount)}" for path, amount in ranked)


def scripts_name(mpijob_name: str) -> str:
    """The name of the job's ConfigMap of pod scripts."""
    return f"{mpijob_name}-scripts"


def render_scripts(plan: RunPlan) -> dict[str, Any]:
    """The ConfigMap of the pod scripts the MPIJob of ``plan`` runs (``train`` makes the MPIJob
    its owner, so that it goes with the job)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_metadata(plan, scripts_name(plan.mpijob_name)),
        "data": pod_scripts(torchrun=plan.config.distributed == "torchrun"),
    }


def object_metadata(plan: RunPlan, name: str) -> dict[str, Any]:
    """The metadata of an object of the job's named ``name``: its namespace, the job's labels."""
    metadata: dict[str, Any] = {"name": name}
    if plan.config.kubernetes.namespace:
        metadata["namespace"] = plan.config.kubernetes.namespace
    metadata["labels"] = dict(_labels(plan.config, plan.context, plan.mpijob_name))
    return metadata


def pod_scripts(*, torchrun: bool = False) -> dict[str, str]:
    """The ConfigMap's files: ``templates/scripts/`` and the modules install-requirements.sh runs
    with the image's Python (:mod:`.venv_layer`, :mod:`.uv_install`); ``torchrun``: with
    :data:`TORCHRUN_SCRIPT` too."""
    names = [*_SCRIPTS.values(), *([TORCHRUN_SCRIPT] if torchrun else [])]
    files = {
        file: (templates_dir() / "scripts" / file).read_text(encoding="utf-8") for file in names
    }
    for module in (Path(venv_layer.__file__), Path(uv_install.__file__)):
        files[module.name] = module.read_text(encoding="utf-8")
    return files


def render_secret(plan: RunPlan) -> dict[str, Any]:
    """The job's Secret as ``train`` creates it (owned by the MPIJob), every value masked."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_metadata(plan, plan.secret.name),
        "type": "Opaque",
        "stringData": dict.fromkeys(plan.secret.keys, MASK),
    }


def objects_yaml(objects: Sequence[Mapping[str, Any]]) -> str:
    """``objects`` as one YAML stream (``---`` between them), each as :func:`manifest_yaml`."""
    return "---\n".join(manifest_yaml(obj) for obj in objects)


def kubelet_literal(text: str) -> str:
    """``text`` written so that the kubelet's expansion gives it back exactly.

    The kubelet expands ``$(NAME)`` to the value of the container's variable NAME, and reads
    ``$$`` as one ``$``, in every env value (kubelet_pods.go makeEnvironmentVariables), in command
    and args (kuberuntime_container.go, container/helpers.go ExpandContainerCommandAndArgs) and in
    an exec probe's command (prober.go, ExpandContainerCommandOnlyStatic); any other ``$`` stays
    (third_party/forked/golang/expansion/expand.go, Kubernetes v1.35.4). Doubling each ``$`` that
    precedes a ``$`` or a ``(`` leaves nothing it reads as a reference: ``$(GIT_PASSWORD)`` in
    train.yaml stays those 15 characters in the pod, as it does with ``--local``."""
    return _EXPANDED_DOLLAR.sub("$$", text)


def literal_for_kubelet(pod: dict[str, Any]) -> None:
    """Every string the kubelet expands in each container of ``pod`` (a pod spec), written with
    :func:`kubelet_literal`."""
    for container in [*pod.get("initContainers", []), *pod["containers"]]:
        _literal_for_kubelet(container)


def _literal_for_kubelet(container: dict[str, Any]) -> None:
    """Every string the kubelet expands in ``container``, written with :func:`kubelet_literal`."""
    for key in ("command", "args"):
        if key in container:
            container[key] = [kubelet_literal(str(arg)) for arg in container[key]]
    for var in container.get("env") or []:
        if "value" in var:
            var["value"] = kubelet_literal(str(var["value"]))
    probe = (container.get("readinessProbe") or {}).get("exec")
    if probe:
        probe["command"] = [kubelet_literal(str(arg)) for arg in probe["command"]]


def template_values(plan: RunPlan) -> dict[str, Any]:
    config, ctx, name = plan.config, plan.context, plan.mpijob_name
    k8s = config.kubernetes
    return {
        "name": name,
        "namespace": k8s.namespace,
        "labels": _labels(config, ctx, name) + _kueue_labels(config),
        # Kueue starts a job in its LocalQueue by resuming it: created suspended, as it expects.
        "suspend": k8s.local_queue is not None,
        # The pods' labels: the MPIJob's own carry the rest.
        "pod_labels": _labels(config, ctx, name)[:2],
        "annotations": _annotations(config, ctx),
        "slots_per_worker": config.slots_per_worker,
        "workers": config.workers,
        "ttl_seconds_after_finished": k8s.ttl_seconds_after_finished,
        "backoff_limit": k8s.backoff_limit,
        "active_deadline_seconds": plan.deadline_seconds,
        "pod_deadlines": pod_deadlines(plan.deadline_seconds, config),
        "image": config.image,
        "setup_image": plan.policy.setup_image,
        "secret_name": plan.secret.name,
        "pip_cache_pvc": k8s.pip_cache_pvc,
        "cache_subpath": CACHE_SUBPATHS[plan.policy.ref_protected],
        "cluster_domain": k8s.cluster_domain,
        "ssh_port": k8s.ssh_port,
        "sha": ctx.sha,
        "ssh_auth_dir": SSH_AUTH_DIR,
        "security": {
            "uid": NOBODY_UID if k8s.run_as_user is None else k8s.run_as_user,
            "uid_given": k8s.run_as_user is not None,
            "sshd_capabilities": SSHD_CAPABILITIES,
        },
        "scripts": {key: f"{SCRIPTS_DIR}/{file}" for key, file in _SCRIPTS.items()},
        "scripts_dir": SCRIPTS_DIR,
        "scripts_name": scripts_name(name),
        **_placement_values(config),
        **_setup_values(plan),
        "rank_env": plan.rank_environment(POD_LOCATION),
        "secret_env": [(s, plan.secret.name, s) for s in plan.secret_names],
        "launcher_args": launcher_argv(plan),
        "elastic": plan.config.elastic is not None,
        **_resource_values(config),
    }


def _placement_values(config: TrainConfig) -> dict[str, Any]:
    """Where the pods may run and how they are scheduled: the workers' and the launcher's
    nodes, tolerations and affinity, DNS, the service account, priority and gang queue."""
    k8s = config.kubernetes
    scheduling = None
    if k8s.queue:
        # The gang is the workers only. With WaitForWorkersReady the launcher pod is created
        # after every worker is ready; a gang of workers + launcher would hold the workers back
        # until a launcher exists, which waits for the workers (kubeflow/mpi-operator#608).
        scheduling = {
            "min_available": config.workers,
            "queue": k8s.queue,
            "priority_class": k8s.priority_class,
        }
    return {
        "scheduling": scheduling,
        "service_account": k8s.service_account,
        "priority_class": k8s.priority_class,
        "image_pull_secrets": k8s.image_pull_secrets,
        "node_selector": k8s.node_selector,
        "tolerations": k8s.tolerations,
        "launcher_placement": {
            "node_selector": k8s.launcher.node_selector,
            "tolerations": k8s.launcher.tolerations,
            "affinity": json.loads(k8s.launcher.affinity) if k8s.launcher.affinity else None,
        },
        "dns_config": k8s.dns_config,
    }


def _resource_values(config: TrainConfig) -> dict[str, Any]:
    """What each container requests and is limited to, and the size of each pod's disks."""
    disk = config.resources.disk
    worker = container_resources(
        ContainerResources(config.resources.cpu, config.resources.memory), disk
    )
    if config.resources.gpu:
        # An extended resource is set as a limit; the API server copies it into the requests.
        worker["limits"].append(("nvidia.com/gpu", config.resources.gpu))
    return {
        "worker_resources": worker,
        "shm_size": config.resources.shm_size,
        # The setup containers fill the worker's emptyDirs: they may write as much as it.
        "setup_resources": container_resources(config.resources.setup, disk),
        "launcher_resources": container_resources(config.resources.launcher, LAUNCHER_DISK),
        "disk": disk,
        "launcher_disk": LAUNCHER_DISK,
    }


def _setup_values(plan: RunPlan) -> dict[str, Any]:
    """The setup containers' environments: :data:`SETUP_ENV`'s variables of ci-runner's, and in
    install-requirements the :data:`PIP_SETTINGS` train.yaml's ``env`` and ``secrets`` name."""
    config = plan.config
    ours = {
        variables.CI_RUNNER_REPO_URL: plan.context.repo_url,
        variables.CI_RUNNER_SHA: plan.context.sha,
        variables.CI_RUNNER_GIT_CREDENTIALS: GIT_CREDENTIALS_DIR,
        variables.CI_RUNNER_REQUIREMENTS: config.requirements or "",
        "PIP_CACHE_DIR": PIP_CACHE_DIR,
        variables.CI_RUNNER_VENV_CACHE: VENV_CACHE_DIR if config.kubernetes.pip_cache_pvc else None,
    }
    env = {
        container: [(name, ours[name]) for name in names if ours[name] is not None]
        for container, names in SETUP_ENV.items()
    }
    env[INSTALL_REQUIREMENTS] += [(k, v) for k, v in config.env if k in PIP_SETTINGS]
    return {
        "fetch_env": env[FETCH_CODE],
        "install_env": env[INSTALL_REQUIREMENTS],
        "install_secret_env": [
            (name, plan.secret.name, name) for name in config.secrets if name in PIP_SETTINGS
        ],
        "git_credentials": {
            "dir": GIT_CREDENTIALS_DIR,
            "files": GIT_CREDENTIAL_FILES,
            "mode": GIT_CREDENTIALS_MODE,
        },
    }


def launcher_argv(plan: RunPlan) -> list[str]:
    """The launcher's command: ``mpirun`` with the operator's hostfile for a fixed-size job (no
    horovodrun start-up and ssh check of every host before it: 1.6-1.9 s on the emulated
    cluster); an elastic job needs horovodrun's elastic driver."""
    if plan.config.elastic:
        return plan.horovodrun_argv(POD_HOSTS)
    return plan.mpirun_argv(POD_HOSTS)


def pod_deadlines(training_deadline: int | None, config: TrainConfig) -> dict[str, int]:
    """Each pod's own ``activeDeadlineSeconds`` (counted from its start, so not the time it
    waits for a node), so that no pod outlives its job when the CI job that follows it is killed:
    the run policy's deadline reaches only the launcher Job, which exists only once every worker
    is Ready (mpi_job_controller.go). A worker may set up (``setup_timeout``), wait for the
    launcher's node (``unschedulable_timeout``) and train (the training's deadline, else the 7
    days a timeout may be at most); the launcher only trains. Both get
    :data:`POD_DEADLINE_MARGIN` more. ``training_deadline`` is the MPIJob's (the plan's:
    train.yaml's ``timeout``, else what the CI job's timeout leaves)."""
    training = training_deadline if training_deadline is not None else MAX_DURATION
    k8s = config.kubernetes
    return {
        "launcher": training + POD_DEADLINE_MARGIN,
        "worker": k8s.setup_timeout + k8s.unschedulable_timeout + training + POD_DEADLINE_MARGIN,
    }


def container_resources(
    resources: ContainerResources, disk: str
) -> dict[str, list[tuple[str, str | int]]]:
    """A container's ``requests`` and ``limits`` (both the same amounts): what a ResourceQuota
    that counts cpu or memory requires of every container (pkg/quota/v1/evaluator/core/pods.go,
    ``Constraints``), and its ``ephemeral-storage``, ``disk``. What is None is left out, for the
    namespace's LimitRange to fill in."""
    amounts: list[tuple[str, str | int]] = [
        (name, value)
        for name, value in (
            ("cpu", resources.cpu),
            ("memory", resources.memory),
            ("ephemeral-storage", disk),
        )
        if value is not None
    ]
    return {"requests": list(amounts), "limits": list(amounts)}


def to_label_value(text: str) -> str:
    """``text`` as a valid label value: other characters become ``-``, at most 63, may be ""."""
    value = _LABEL_VALUE_BAD.sub("-", text)[:63]
    return value.strip("-_.")


def _labels(config: TrainConfig, ctx: CIContext, name: str) -> list[tuple[str, str]]:
    candidates = [
        ("app.kubernetes.io/managed-by", "ci-runner"),
        (f"{LABEL_PREFIX}/job", name),
        (f"{LABEL_PREFIX}/config-name", config.name),
        (f"{LABEL_PREFIX}/project", ctx.project_path),
        (f"{LABEL_PREFIX}/sha", ctx.sha),
        (f"{LABEL_PREFIX}/pipeline", ctx.pipeline_id),
        (f"{LABEL_PREFIX}/ci-job", ctx.job_id),
        (f"{LABEL_PREFIX}/merge-request", ctx.mr_iid),
    ]
    labels = [(key, to_label_value(value)) for key, value in candidates if value]
    return [(key, value) for key, value in labels if value]


def _kueue_labels(config: TrainConfig) -> list[tuple[str, str]]:
    """The job's LocalQueue and WorkloadPriorityClass, for Kueue (on the job's object only)."""
    k8s = config.kubernetes
    candidates = [
        (kueue_names.QUEUE_NAME_LABEL, k8s.local_queue),
        (kueue_names.PRIORITY_CLASS_LABEL, k8s.workload_priority_class),
    ]
    return [(key, value) for key, value in candidates if value]


def _annotations(config: TrainConfig, ctx: CIContext) -> list[tuple[str, str]]:
    candidates = [
        (f"{LABEL_PREFIX}/project", ctx.project_path),
        (f"{LABEL_PREFIX}/project-url", ctx.project_url),
        (f"{LABEL_PREFIX}/sha", ctx.sha),
        (f"{LABEL_PREFIX}/ref", ctx.ref_name),
        (f"{LABEL_PREFIX}/pipeline-id", ctx.pipeline_id),
        (f"{LABEL_PREFIX}/pipeline-source", ctx.pipeline_source),
        (f"{LABEL_PREFIX}/ci-job-id", ctx.job_id),
        (f"{LABEL_PREFIX}/ci-job-url", ctx.job_url),
        (f"{LABEL_PREFIX}/merge-request-iid", ctx.mr_iid),
        (f"{LABEL_PREFIX}/config", config.source_file),
    ]
    return [(key, value[:MAX_ANNOTATION_CHARS]) for key, value in candidates if value]
