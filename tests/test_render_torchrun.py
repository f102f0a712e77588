"""``distributed: torchrun``: the Indexed Job, its headless Service and its ConfigMap; the
MPIJob's objects unchanged (tests/test_render.py's goldens)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
import yaml

from ci_runner.config.scalars import MAX_DURATION
from ci_runner.config.types import KubernetesOptions
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, GitError
from ci_runner.kube_yaml import manifest_yaml
from ci_runner.plan.deadline import CIJobTime
from ci_runner.render import (
    POD_LOCATION,
    objects_yaml,
    pod_scripts,
    render_mpijob,
    render_scripts,
    render_secret,
)
from ci_runner.render_job import render_job, render_objects
from ci_runner.torchrun_job import job_deadline, render_service, render_torchrun_job
from testing.golden import Golden
from testing.kubelet_expansion import container_view
from testing.plan_cases import trusted_plan
from testing.render_cases import (
    CASES,
    LOCAL,
    MINIMAL,
    MR_PIPELINE,
    SMALL,
    TORCHRUN,
    TRICKY,
    with_tricky_text,
)

TOKEN = "glcbt-canary-secret-9d2e"
RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# PodSecurity "restricted" (Kubernetes v1.35, pod-security-admission's policy/ checks): the
# volume types it allows.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def _restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What PodSecurity "restricted" refuses in ``pod``: the checks of pod-security-admission's
    restricted level (runAsNonRoot, runAsUser, seccomp, privilege escalation, capabilities,
    volume types) and baseline's (privileged, host namespaces, host ports, hostPath)."""
    found = []
    security = pod.get("securityContext") or {}
    if any(pod.get(key) for key in ("hostNetwork", "hostPID", "hostIPC")):
        found.append("host namespaces")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {sorted(kinds)}")
    for container in _containers(pod):
        name, context = container["name"], container.get("securityContext") or {}
        if not context.get("runAsNonRoot", security.get("runAsNonRoot")):
            found.append(f"{name}: runAsNonRoot")
        if context.get("runAsUser", security.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = context.get("seccompProfile", security.get("seccompProfile")) or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities.drop")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities.add")
        if context.get("privileged") or any(p.get("hostPort") for p in container.get("ports", [])):
            found.append(f"{name}: privileged or hostPort")
    return found


def test_golden_job_and_service(golden: Golden) -> None:
    plan = trusted_plan(TORCHRUN, MR_PIPELINE)
    text = objects_yaml([render_torchrun_job(plan), render_service(plan)])
    golden.check("torchrun.yaml", text)
    assert list(yaml.safe_load_all(text)) == [render_torchrun_job(plan), render_service(plan)]


def test_a_small_job_reads_as_the_contract_says() -> None:
    plan = trusted_plan(SMALL, LOCAL)
    job, service = render_torchrun_job(plan), render_service(plan)
    name = plan.mpijob_name
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"]) == ("batch/v1", "Job", name)
    spec = dict(job["spec"])
    template = spec.pop("template")
    deadline = 1800 + 600 + 3600 + 600
    assert spec == {
        "completionMode": "Indexed",
        "completions": 2,
        "parallelism": 2,
        "backoffLimitPerIndex": 0,
        "maxFailedIndexes": 0,
        "podReplacementPolicy": "Failed",
        "ttlSecondsAfterFinished": 3600,
        "activeDeadlineSeconds": deadline,
    }
    assert template["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "ci-runner",
        "ci-runner/job": name,
    }
    pod = template["spec"]
    assert (pod["subdomain"], pod["restartPolicy"], pod["activeDeadlineSeconds"]) == (
        name,
        "Never",
        deadline,
    )
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-code", "install-requirements"]
    (main,) = pod["containers"]
    assert main["name"] == "torchrun"
    assert main["command"] == ["/bin/sh", "/ci-runner-scripts/torchrun.sh"]
    assert main["args"] == [
        *("python", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"),
        *("--rdzv-backend", "static", "--rdzv-conf", "timeout=2400"),
        *("--master-port", "29500", "--tee", "3", "--no-python", "--"),
        *("python", "train.py"),
    ]
    assert main["env"][-1] == {
        "name": "POD_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": job["metadata"]["labels"]},
        "spec": {
            "clusterIP": "None",
            "selector": {"ci-runner/job": name},
            "publishNotReadyAddresses": True,
            "ports": [{"name": "c10d", "port": 29500, "protocol": "TCP"}],
        },
    }


def test_the_objects_are_the_job_its_service_configmap_and_secret() -> None:
    plan = trusted_plan(TORCHRUN, MR_PIPELINE)
    objects = render_objects(plan)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Job", plan.mpijob_name),
        ("Service", plan.mpijob_name),
        ("ConfigMap", f"{plan.mpijob_name}-scripts"),
        ("Secret", f"{plan.mpijob_name}-secrets"),
    ]
    assert objects[0] == render_job(plan)
    assert all(o["metadata"]["namespace"] == "mpi-operator" for o in objects)
    assert objects[2]["data"] == pod_scripts(torchrun=True)
    assert set(pod_scripts(torchrun=True)) - set(pod_scripts()) == {"torchrun.sh"}
    assert objects[3]["stringData"] == dict.fromkeys(plan.secret.keys, "[MASKED]")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_horovod_job_renders_as_before(case: str) -> None:
    plan = trusted_plan(*CASES[case])
    assert render_objects(plan) == [render_mpijob(plan), render_scripts(plan), render_secret(plan)]
    assert render_job(plan) == render_mpijob(plan)
    assert "torchrun.sh" not in render_scripts(plan)["data"]


def test_the_pods_are_the_mpijob_workers_with_torchrun_in_place_of_sshd() -> None:
    pod = _pod(render_torchrun_job(trusted_plan(TORCHRUN, MR_PIPELINE)))
    horovod = render_mpijob(trusted_plan(replace(TORCHRUN, distributed="horovod"), MR_PIPELINE))
    worker = horovod["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    for key in ("initContainers", "volumes", "nodeSelector", "tolerations", "dnsPolicy"):
        assert pod[key] == worker[key], key
    for key in ("dnsConfig", "serviceAccountName", "priorityClassName", "imagePullSecrets"):
        assert pod[key] == worker[key], key
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"] == worker["securityContext"]
    main, sshd = pod["containers"][0], worker["containers"][0]
    assert main["resources"] == sshd["resources"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert main["volumeMounts"] == sshd["volumeMounts"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in main["volumeMounts"]


@pytest.mark.parametrize("run_as_user", [None, 1000])
def test_every_container_meets_podsecurity_restricted(run_as_user: int | None) -> None:
    for config in (SMALL, TORCHRUN):
        k8s = replace(config.kubernetes, run_as_user=run_as_user, ssh_port=2222)
        pod = _pod(render_torchrun_job(trusted_plan(replace(config, kubernetes=k8s), LOCAL)))
        assert _restricted_violations(pod) == []
        assert pod["securityContext"]["runAsUser"] == (run_as_user or 65534)
        assert all(c["securityContext"] == RESTRICTED for c in _containers(pod))
    # The check finds what the MPIJob's root sshd needs (PodSecurity baseline).
    horovod = render_mpijob(trusted_plan(MINIMAL, LOCAL))
    worker = horovod["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert _restricted_violations(worker) == [
        "worker: runAsNonRoot",
        "worker: runAsUser 0",
        "worker: capabilities.add",
    ]


@pytest.mark.parametrize(
    ("timeout", "ci_job", "training"),
    [
        (3600, None, 3600),  # train.yaml's timeout
        (None, None, MAX_DURATION),  # none, outside CI: the longest timeout
        (
            None,
            CIJobTime(timeout_seconds=7200, spent_seconds=0),
            7200 - 300,
        ),  # what the CI job leaves
    ],
)
def test_the_job_and_its_pods_end_even_when_ci_runner_is_killed(
    timeout: int | None, ci_job: CIJobTime | None, training: int
) -> None:
    k8s = KubernetesOptions(setup_timeout=900, unschedulable_timeout=120)
    config = replace(SMALL, timeout=timeout, kubernetes=k8s)
    plan = trusted_plan(config, LOCAL, ci_job=ci_job)
    job = render_torchrun_job(plan)
    expected = 900 + 120 + training + 600
    assert job_deadline(plan.deadline_seconds, config) == expected
    assert job["spec"]["activeDeadlineSeconds"] == expected
    assert _pod(job)["activeDeadlineSeconds"] == expected


def test_every_container_gets_the_literal_text_of_env_command_and_args() -> None:
    plan = trusted_plan(with_tricky_text(TORCHRUN), MR_PIPELINE)
    pod = _pod(render_torchrun_job(plan))
    secret = {"GIT_PASSWORD": TOKEN, "GIT_USERNAME": "u", "WANDB_API_KEY": "w"}

    def view(container: dict[str, Any]) -> dict[str, Any]:
        def value_from(ref: Mapping[str, Any]) -> str:
            if "fieldRef" in ref:
                return "ns"
            return secret[ref["secretKeyRef"]["key"]]

        return container_view(container, value_from)

    fetch, install = (view(c) for c in pod["initContainers"])
    main = view(pod["containers"][0])
    rank_env = dict(plan.rank_environment(POD_LOCATION))
    assert main["env"] == {
        **rank_env,
        "WANDB_API_KEY": "w",
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]<std>:",
        "POD_NAMESPACE": "ns",
    }
    assert main["env"]["TRICKY"] == TRICKY
    assert main["args"] == plan.torchrun_argv()
    assert main["args"][-1] == TRICKY
    assert install["env"]["PIP_INDEX_URL"] == TRICKY
    assert fetch["command"] == ["/bin/sh", "/ci-runner-scripts/fetch-code.sh"]


def test_it_refuses_what_the_mpijob_refuses() -> None:
    no_url = replace(LOCAL, repo_url="")
    with pytest.raises(GitError, match="no repository URL for the pods"):
        render_torchrun_job(trusted_plan(SMALL, no_url))
    huge = replace(SMALL, env=(("BIG", "x" * 1_600_000),))
    with pytest.raises(ConfigError) as caught:
        render_torchrun_job(trusted_plan(huge, LOCAL))
    assert caught.value.lines()[0].startswith("train.yaml: the Job would be 1.53 MiB, more than")
    with pytest.raises(ValueError, match="is a horovod job, not torchrun's"):
        render_torchrun_job(trusted_plan(MINIMAL, LOCAL))


def test_a_job_in_ci_keeps_its_labels_and_annotations() -> None:
    context = CIContext(
        sha=MR_PIPELINE.sha,
        project_path="g/p",
        job_id="77",
        mr_iid="3",
        repo_url="https://gitlab.example.com/g/p.git",
    )
    plan = trusted_plan(SMALL, context)
    job, horovod = render_torchrun_job(plan), render_mpijob(trusted_plan(MINIMAL, context))
    assert job["metadata"]["labels"] == {
        **horovod["metadata"]["labels"],
        "ci-runner/job": plan.mpijob_name,
        "ci-runner/config-name": "ddp",
    }
    assert job["metadata"]["annotations"] == horovod["metadata"]["annotations"]
    assert manifest_yaml(job).count("ci-runner/merge-request: '3'") == 1
