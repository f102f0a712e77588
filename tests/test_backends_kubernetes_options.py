"""options: what the backend is built from, taken from the plan, agrees with the manifest."""

from __future__ import annotations

from dataclasses import replace

import kubernetes.client
import pytest

from ci_runner.backends.kubernetes.connect import ClusterClient, Connection
from ci_runner.backends.kubernetes.options import job_options, pods_lifetime
from ci_runner.config.types import Elastic, KubernetesOptions, TrainConfig
from ci_runner.render import render_mpijob, render_scripts
from ci_runner.render_job import render_objects
from testing.mpijob_manifests import plan_facts
from testing.plan_cases import CONFIG, CONTEXT, trusted_plan
from testing.render_cases import TORCHRUN

CONNECTION = Connection(ClusterClient(kubernetes.client.Configuration()), "ml", "service account")
KUBERNETES = KubernetesOptions(
    setup_timeout=900,
    unschedulable_timeout=300,
    keep_finished=3600,
    on_preemption="fail",
)


@pytest.mark.parametrize(
    "config",
    [
        CONFIG,
        replace(CONFIG, timeout=7200, kubernetes=KUBERNETES),
        replace(CONFIG, workers=2, elastic=Elastic(2, 4)),
    ],
    ids=["defaults", "timeout-and-kubernetes", "elastic"],
)
def test_the_plan_holds_what_the_manifest_says(config: TrainConfig) -> None:
    plan = trusted_plan(config, CONTEXT)
    manifest = render_mpijob(plan)
    scripts = render_scripts(plan)
    options = job_options(plan, CONNECTION, manifest, scripts)
    k8s = config.kubernetes
    # What the backend once read from its own manifest.
    facts = plan_facts(manifest, k8s.unschedulable_timeout)
    assert {key: getattr(options, key) for key in facts} == facts
    assert (options.api_client, options.namespace) == (CONNECTION.client, "ml")
    assert (options.manifest, options.scripts, options.secret) == (manifest, scripts, plan.secret)
    assert (options.setup_timeout, options.keep_finished, options.on_preemption) == (
        k8s.setup_timeout,
        k8s.keep_finished,
        k8s.on_preemption,
    )
    assert options.unschedulable_timeout == k8s.unschedulable_timeout


def test_the_pods_live_their_wait_for_a_node_and_a_workers_deadline() -> None:
    assert pods_lifetime(300, 4000) == 4300
    assert pods_lifetime(300, None) is None


def test_a_torchrun_job_says_its_ranks_a_node_and_the_checkout() -> None:
    """What the Indexed Job's failing rank is read with: torchrun's --nproc-per-node (a node's
    ranks) and the pods' checkout, as rendered; an MPIJob needs neither."""
    plan = trusted_plan(TORCHRUN, CONTEXT)
    objects = render_objects(plan)
    options = job_options(plan, CONNECTION, objects[0], objects[2], objects[1])
    assert (options.launcher_container, options.workers) == ("torchrun", 2)
    assert (options.ranks_per_node, options.code_dir) == (2, "/ci-runner/code")
    torchrun = objects[0]["spec"]["template"]["spec"]["containers"][0]
    args = [*torchrun.get("command", []), *torchrun.get("args", [])]
    assert args[args.index("--nproc-per-node") + 1] == "2"
    assert {"name": "CI_RUNNER_CODE_DIR", "value": "/ci-runner/code"} in torchrun["env"]
