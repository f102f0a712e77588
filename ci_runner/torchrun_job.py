"""A run plan with ``distributed: torchrun`` → the Indexed Job (batch/v1) that runs it, and the
headless Service its nodes find node 0 through.

One pod a node, ``workers`` of them, each running torchrun (``torch.distributed.run``) with
``slots_per_worker`` processes: no launcher pod, no operator, no sshd. The pods are the MPIJob
workers' (``templates/pod.yaml.j2``: the same init containers, volumes, placement and security)
with torchrun in place of sshd, every container PodSecurity ``restricted`` as its user (no sshd
needs root). The manifest comes from ``templates/torchrun-job.yaml.j2``; the node's entry point
is ``templates/scripts/torchrun.sh``, which adds the node's rank and node 0's address
(``<job>-0.<job>.<namespace>.svc``) to :meth:`RunPlan.torchrun_argv`'s options.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from ci_runner import variables
from ci_runner.config.types import TrainConfig
from ci_runner.plan.run_plan import TORCHRUN_PORT, RunPlan
from ci_runner.render import (
    LABEL_PREFIX,
    SCRIPTS_DIR,
    TORCHRUN_SCRIPT,
    check_pod_inputs,
    check_sizes,
    literal_for_kubelet,
    object_metadata,
    pod_deadlines,
    template_values,
    to_label_value,
)
from ci_runner.templating import environment
from ci_runner.torchrun_output import TORCHRUN_ENVIRONMENT

JOB_TEMPLATE: Final = "torchrun-job.yaml.j2"
# The Service's port for node 0's rendezvous (torchrun's TCPStore), by its name.
RENDEZVOUS_PORT_NAME: Final = "c10d"
# libyaml's safe loader when PyYAML has it (as render's).
_LOADER: Final[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def job_deadline(training_deadline: int | None, config: TrainConfig) -> int:
    """The Indexed Job's ``activeDeadlineSeconds``, and each of its pods' own.

    The Job's counts from its start (its creation), not from the training's: it has to cover a
    node's wait for a place (``unschedulable_timeout``, after which ci-runner fails the job), its
    setup (``setup_timeout``: image pulls, the code's fetch, pip) and the training (the plan's
    deadline: train.yaml's ``timeout``, else what the CI job's timeout leaves; 7 days, the
    longest ``timeout``, without one), with render's margin for torchrun's start and teardown:
    an MPIJob worker's own deadline (``render.pod_deadlines``). It is always set, so that the
    cluster ends the pods even when ci-runner is SIGKILLed. A pod's own deadline (counted from
    its start, after its wait for a node) is the same: no pod outlives its job, even one whose
    Job is gone without it."""
    return pod_deadlines(training_deadline, config)["worker"]


def render_torchrun_job(plan: RunPlan) -> dict[str, Any]:
    """The Indexed Job that runs ``plan`` (``distributed: torchrun``) at its commit, a dict."""
    if plan.config.distributed != "torchrun":
        raise ValueError(f"{plan.mpijob_name} is a {plan.config.distributed} job, not torchrun's")
    check_pod_inputs(plan)
    values = template_values(plan)
    deadline = job_deadline(plan.deadline_seconds, plan.config)
    values["scripts"] = {**values["scripts"], "torchrun": f"{SCRIPTS_DIR}/{TORCHRUN_SCRIPT}"}
    values["torchrun"] = {
        "args": plan.torchrun_argv(),
        "job_deadline": deadline,
        "pod_deadline": deadline,
        "namespace_variable": variables.POD_NAMESPACE,
        "environment": TORCHRUN_ENVIRONMENT,
    }
    text = environment().get_template(JOB_TEMPLATE).render(values)
    manifest: dict[str, Any] = yaml.load(text, Loader=_LOADER)  # a safe loader
    literal_for_kubelet(manifest["spec"]["template"]["spec"])
    check_sizes(plan, manifest, "Job")
    return manifest


def render_service(plan: RunPlan) -> dict[str, Any]:
    """The headless Service of the job's name: the pods' subdomain, so that node 0 is
    ``<job>-0.<job>.<namespace>.svc`` as soon as it has an address (not ready yet: its
    torchrun is what the others wait for)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(plan, plan.mpijob_name),
        "spec": {
            "clusterIP": "None",
            "selector": {f"{LABEL_PREFIX}/job": to_label_value(plan.mpijob_name)},
            "publishNotReadyAddresses": True,
            "ports": [{"name": RENDEZVOUS_PORT_NAME, "port": TORCHRUN_PORT, "protocol": "TCP"}],
        },
    }
