"""The objects MPI Operator v0.8.2 builds for an MPIJob, field by field.

Line numbers are ``pkg/controller/mpi_job_controller.go`` (and the files named) at v0.8.2
(release-0.8 commit b10758d, "Prepare v0.8.2"; the repository has no v0.8.2 tag).
"""

from __future__ import annotations

import copy
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from testing.fake_kube.control_plane.client import owner_reference

JSON = dict[str, Any]
OPERATOR_LABEL = "training.kubeflow.org/operator-name"
JOB_NAME = "training.kubeflow.org/job-name"
JOB_ROLE = "training.kubeflow.org/job-role"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
CONFIG_MOUNT = "/etc/mpi"  # :76 configMountPath
ROOT_SSH = "/root/.ssh"  # :80 rootSSHPath


def defaulted(mpijob: JSON) -> JSON:
    """pkg/apis/kubeflow/v2beta1/default.go SetDefaults_MPIJob (:60-80)."""
    job = copy.deepcopy(mpijob)
    spec = job.setdefault("spec", {})
    spec.setdefault("runPolicy", {}).setdefault("cleanPodPolicy", "None")  # :53-55
    spec.setdefault("slotsPerWorker", 1)  # :62-64
    if not spec.get("sshAuthMountPath"):
        spec["sshAuthMountPath"] = ROOT_SSH  # :65-67
    if not spec.get("mpiImplementation"):
        spec["mpiImplementation"] = "OpenMPI"  # :68-70
    if not spec.get("launcherCreationPolicy"):
        spec["launcherCreationPolicy"] = "AtStartup"  # :71-73
    specs = spec.setdefault("mpiReplicaSpecs", {})
    if specs.get("Launcher") is not None:  # :27-37 setDefaultsTypeLauncher
        specs["Launcher"].setdefault("restartPolicy", "OnFailure")
        specs["Launcher"].setdefault("replicas", 1)
    if specs.get("Worker") is not None:  # :40-50 setDefaultsTypeWorker
        specs["Worker"].setdefault("restartPolicy", "Never")
        specs["Worker"].setdefault("replicas", 0)
    return job


def default_labels(job: str, role: str) -> dict[str, str]:
    """:1772 defaultLabels."""
    return {OPERATOR_LABEL: "mpi-operator", JOB_NAME: job, JOB_ROLE: role}


def worker_replicas(mpijob: JSON) -> int:
    """:1785 workerReplicas."""
    worker = mpijob["spec"]["mpiReplicaSpecs"].get("Worker") or {}
    return int(worker.get("replicas") or 0)


def _host(mpijob: JSON, pod: str, cluster_domain: str) -> str:
    # :1338-1341 domainFormat "%s.%s.%s.svc" (+ ".<clusterDomain>" when the flag is set, empty
    # by default).
    meta = mpijob["metadata"]
    host = f"{pod}.{meta['name']}.{meta['namespace']}.svc"
    return f"{host}.{cluster_domain}" if cluster_domain else host


def new_config_map(mpijob: JSON, running_workers: list[str], cluster_domain: str = "") -> JSON:
    """:1335 newConfigMap (hostfile) and :1383 updateDiscoverHostsInConfigMap."""
    spec, name = mpijob["spec"], mpijob["metadata"]["name"]
    slots = spec["slotsPerWorker"]
    launcher_too = bool(spec.get("runLauncherAsWorker"))
    hosts = [f"{name}-launcher"] if launcher_too else []  # :1345 runLauncherAsWorker first
    hosts += [f"{name}-worker-{i}" for i in range(worker_replicas(mpijob))]
    if spec["mpiImplementation"] == "OpenMPI":  # :1355-1364 per implementation
        hostfile = "".join(f"{_host(mpijob, h, cluster_domain)} slots={slots}\n" for h in hosts)
    else:
        hostfile = "".join(f"{_host(mpijob, h, cluster_domain)}:{slots}\n" for h in hosts)
    # :1384-1405 one echo per running worker, sorted by pod name.
    discover = "#!/bin/sh\n"
    if launcher_too:
        discover += f"echo {_host(mpijob, f'{name}-launcher', cluster_domain)}\n"
    for pod in sorted(running_workers):
        discover += f"echo {_host(mpijob, pod, cluster_domain)}\n"
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{name}-config",  # :74 configSuffix
            "labels": {"app": name},
            "ownerReferences": [owner_reference(mpijob)],
        },
        "data": {"hostfile": hostfile, "discover_hosts.sh": discover},
    }


def new_service(mpijob: JSON) -> JSON:
    """:1410 newJobService / :1418 newService: headless, selecting every pod of the job."""
    name = mpijob["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "labels": {"app": name},
            "ownerReferences": [owner_reference(mpijob)],
        },
        "spec": {
            "clusterIP": "None",  # :1431
            "selector": {OPERATOR_LABEL: "mpi-operator", JOB_NAME: name},  # :1411-1414
            "publishNotReadyAddresses": bool(mpijob["spec"].get("runLauncherAsWorker")),  # :1435
        },
    }


def new_ssh_secret(mpijob: JSON) -> JSON:
    """:1442 newSSHAuthSecret: an ECDSA P-521 key, PEM private key and authorized_keys line."""
    name = mpijob["metadata"]["name"]
    key = ec.generate_private_key(ec.SECP521R1())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # "EC PRIVATE KEY" (:1452)
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{name}-ssh",  # :79 sshAuthSecretSuffix
            "labels": {"app": name},
            "ownerReferences": [owner_reference(mpijob)],
        },
        "type": "kubernetes.io/ssh-auth",  # :1471
        "stringData": {"ssh-privatekey": private.decode(), "ssh-publickey": public.decode() + "\n"},
    }


def _setup_ssh(pod_spec: JSON, mpijob: JSON) -> None:
    """:1793 setupSSHOnPod: the key Secret as a volume on the first container."""
    mount = mpijob["spec"]["sshAuthMountPath"]
    secret: JSON = {
        "secretName": f"{mpijob['metadata']['name']}-ssh",
        "items": [  # :142-155 sshVolumeItems
            {"key": "ssh-privatekey", "path": "id_rsa"},
            {"key": "ssh-publickey", "path": "id_rsa.pub"},
            {"key": "ssh-publickey", "path": "authorized_keys"},
        ],
    }
    if mount == ROOT_SSH:
        secret["defaultMode"] = 0o600  # :1795-1797
    pod_spec.setdefault("volumes", []).append({"name": "ssh-auth", "secret": secret})
    pod_spec["containers"][0].setdefault("volumeMounts", []).append(
        {"name": "ssh-auth", "mountPath": mount}  # :1812-1815
    )


def _restart_policy(replica: JSON) -> str:
    """:1722 setRestartPolicy: ExitCode becomes Never."""
    policy = str(replica.get("restartPolicy", ""))
    return "Never" if policy == "ExitCode" else policy


def new_worker(mpijob: JSON, index: int) -> JSON:
    """:1499 newWorker."""
    name, namespace = mpijob["metadata"]["name"], mpijob["metadata"]["namespace"]
    pod = f"{name}-worker-{index}"
    replica = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]
    template = copy.deepcopy(replica.get("template") or {})
    meta, spec = template.get("metadata") or {}, template.setdefault("spec", {})
    labels = {**(meta.get("labels") or {}), **default_labels(name, "worker")}  # :1504-1510
    launcher_too = bool(mpijob["spec"].get("runLauncherAsWorker"))
    labels[REPLICA_INDEX] = str(index + 1 if launcher_too else index)  # :1511, :1487-1494
    spec["hostname"], spec["subdomain"] = pod, name  # :1512-1513
    if spec.get("hostNetwork"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # :1514-1518
    search = f"{name}.{namespace}.svc.cluster.local"  # :1520-1525
    dns = spec.setdefault("dnsConfig", {})
    dns["searches"] = [*(dns.get("searches") or []), search]
    spec["restartPolicy"] = _restart_policy(replica)  # :1526
    container = spec["containers"][0]
    if not container.get("command") and not container.get("args"):
        container["command"] = ["/usr/sbin/sshd", "-De"]  # :1529-1531
    container["env"] = [
        *(container.get("env") or []),
        {"name": "K_MPI_JOB_ROLE", "value": "worker"},
    ]
    _setup_ssh(spec, mpijob)  # :1533
    metadata: JSON = {"name": pod, "labels": labels, "ownerReferences": [owner_reference(mpijob)]}
    if meta.get("annotations"):
        metadata["annotations"] = meta["annotations"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def new_launcher_template(mpijob: JSON) -> tuple[JSON, bool]:
    """:1585 newLauncherPodTemplate; also whether the template set a restartPolicy (the
    SetPodTemplateRestartPolicy warning, :1640-1644)."""
    name = mpijob["metadata"]["name"]
    mspec = mpijob["spec"]
    replica = mspec["mpiReplicaSpecs"]["Launcher"]
    template = copy.deepcopy(replica.get("template") or {})
    meta, spec = template.get("metadata") or {}, template.setdefault("spec", {})
    labels = {**(meta.get("labels") or {}), **default_labels(name, "launcher")}  # :1589-1595
    launcher_too = bool(mspec.get("runLauncherAsWorker"))
    if launcher_too:
        labels[REPLICA_INDEX] = "0"  # :1600-1602
    spec["hostname"], spec["subdomain"] = f"{name}-launcher", name  # :1603-1604
    if spec.get("hostNetwork"):
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    container = spec["containers"][0]
    env = [*(container.get("env") or []), {"name": "K_MPI_JOB_ROLE", "value": "launcher"}]
    slots = str(mspec["slotsPerWorker"])
    hostfile = f"{CONFIG_MOUNT}/hostfile"
    implementation = mspec["mpiImplementation"]
    if implementation == "OpenMPI":  # :1613-1619, ompiEnvVars :181-195
        env += [
            {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
            {"name": "OMPI_MCA_orte_default_hostfile", "value": hostfile},
            {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
            {"name": "OMPI_MCA_orte_set_default_slots", "value": slots},
        ]
    elif implementation == "Intel":  # :1620-1625, intelEnvVars :196-205
        env += [
            {"name": "I_MPI_HYDRA_HOST_FILE", "value": hostfile},
            {"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS", "value": "-o ConnectionAttempts=10"},
            {"name": "I_MPI_PERHOST", "value": slots},
        ]
    else:  # MPICH :1626-1627, mpichEnvVars :206-215
        env += [
            {"name": "HYDRA_HOST_FILE", "value": hostfile},
            {"name": "HYDRA_LAUNCH_EXTRA_ARGS", "value": "-o ConnectionAttempts=10"},
        ]
    if not launcher_too:  # :1629-1635 nvidiaDisableEnvVars (empty values)
        env += [{"name": "NVIDIA_VISIBLE_DEVICES"}, {"name": "NVIDIA_DRIVER_CAPABILITIES"}]
    container["env"] = env
    _setup_ssh(spec, mpijob)  # :1636
    warned = bool(spec.get("restartPolicy"))
    spec["restartPolicy"] = _restart_policy(replica)  # :1645
    spec.setdefault("volumes", []).append(  # :1647-1658 configVolumeItems :156-167
        {
            "name": "mpi-job-config",
            "configMap": {
                "name": f"{name}-config",
                "items": [
                    {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                ],
            },
        }
    )
    container.setdefault("volumeMounts", []).append(
        {"name": "mpi-job-config", "mountPath": CONFIG_MOUNT}  # :1659-1662
    )
    metadata: JSON = {"labels": labels, "ownerReferences": [owner_reference(mpijob)]}
    if meta.get("annotations"):
        metadata["annotations"] = meta["annotations"]
    return {"metadata": metadata, "spec": spec}, warned


def new_launcher_job(mpijob: JSON, template: JSON) -> JSON:
    """:1554 newLauncherJob: deadline, backoff and TTL of the run policy go to this Job only."""
    name = mpijob["metadata"]["name"]
    policy = mpijob["spec"]["runPolicy"]
    spec: JSON = {
        "template": template,
        "podReplacementPolicy": "Failed",  # :1573
    }
    for field in ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit"):
        if policy.get(field) is not None:  # :1567-1569
            spec[field] = policy[field]
    if policy.get("suspend"):
        spec["suspend"] = True  # :1576-1578
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{name}-launcher",  # :84 launcherSuffix
            "labels": {"app": name},
            "ownerReferences": [owner_reference(mpijob)],
        },
        "spec": spec,
    }
