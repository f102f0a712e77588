"""``ci-runner render`` is what kubectl reads: ``kubectl apply --dry-run=server -f -`` (kubectl
built from the control plane's own module) takes every object it prints, against the real
kube-apiserver with the real MPIJob CRD (the scripted cluster), with every value a string where a
YAML 1.2 reader would see a number or a boolean."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ci_runner.config.types import Distributed, KubernetesOptions
from ci_runner.render import objects_yaml
from ci_runner.render_job import render_objects
from testing.backend_harness import Cluster
from testing.control_plane.binaries import bin_dir
from testing.plan_cases import CONFIG, CONTEXT, trusted_plan

pytestmark = pytest.mark.control_plane

# What PyYAML (YAML 1.1) would leave unquoted and a YAML 1.2 reader (kubectl's) read as a number.
TRICKY = ("1e-4", "1e3", "0o17", "0x1", ".inf", "yes", "1_000")


# What ``render`` prints for each kind of job, in its order.
KINDS = {
    "horovod": ["MPIJob", "ConfigMap", "Secret"],
    "torchrun": ["Job", "Service", "ConfigMap", "Secret"],
}


@pytest.mark.parametrize("distributed", sorted(KINDS))
def test_kubectl_applies_every_object_render_prints(
    cluster: Cluster, tmp_path: Path, distributed: Distributed
) -> None:
    """Scripted: what is tested is kube-apiserver's server-side dry run against the MPIJob CRD and
    the batch/v1 Job's validation; no pod is made."""
    env = tuple((f"V{i}", value) for i, value in enumerate(TRICKY))
    config = replace(
        CONFIG,
        distributed=distributed,
        command=("python", "train.py", *TRICKY),
        env=env,
        kubernetes=KubernetesOptions(namespace=cluster.namespace),
    )
    text = objects_yaml(render_objects(trusted_plan(config, CONTEXT)))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(cluster.plane.admin_kubeconfig(cluster.namespace)))
    done = subprocess.run(
        [
            *(str(bin_dir() / "kubectl"), "--kubeconfig", str(kubeconfig)),
            *("apply", "--dry-run=server", "-o", "json", "-f", "-"),
        ],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    applied = json.loads(done.stdout)["items"]
    assert [obj["kind"] for obj in applied] == KINDS[distributed]
    # What the API server kept is what we rendered: every tricky value still the same string.
    spec = applied[0]["spec"]
    if distributed == "horovod":
        pod = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    else:
        pod = spec["template"]["spec"]
    main = pod["containers"][0]
    assert main["args"][-len(TRICKY) :] == list(TRICKY)
    values = {e["name"]: e.get("value") for e in main["env"]}
    assert {name: values[name] for name, _ in env} == dict(env)
    configmap = next(obj for obj in applied if obj["kind"] == "ConfigMap")
    rendered = next(obj for obj in yaml.safe_load_all(text) if obj["kind"] == "ConfigMap")
    assert configmap["data"] == rendered["data"]
