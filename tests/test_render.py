"""Rendering train.yaml + CI context into the MPIJob, and the Secret it reads."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ci_runner.config.schema import RESERVED_ENV, RESERVED_ENV_PREFIX, load_config
from ci_runner.config.setup_env import PIP_SETTINGS, SETUP_ENV
from ci_runner.config.types import DnsConfig, Toleration, TrainConfig
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, EnvironmentSetupError, GitError
from ci_runner.kube_yaml import manifest_yaml
from ci_runner.plan.run_plan import build_plan, secret_name
from ci_runner.render import (
    POD_HOSTS,
    POD_LOCATION,
    kubelet_literal,
    objects_yaml,
    render_mpijob,
    render_scripts,
    to_label_value,
)
from ci_runner.render_job import render_objects
from ci_runner.settings import read_settings
from ci_runner.templating import templates_dir, yaml_quote
from testing.config_cases import BASE, RESERVED, problems
from testing.fake_kube.crd import validate_mpijob
from testing.golden import Golden
from testing.kubelet_expansion import container_view, expand
from testing.paths import REPO_ROOT, example_configs
from testing.plan_cases import SETUP_IMAGE, trusted_plan
from testing.render_cases import (
    CASES,
    ELASTIC,
    GANG,
    LOCAL,
    MINIMAL,
    MR_PIPELINE,
    SEED_LIKE,
    SHA,
    TRICKY,
    with_tricky_text,
)

TOKEN = "glcbt-canary-secret-9d2e"


def _specs(manifest: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    specs = manifest["spec"]["mpiReplicaSpecs"]
    return specs["Launcher"]["template"]["spec"], specs["Worker"]["template"]["spec"]


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (found,) = [
        c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == name
    ]
    return dict(found)


def _script(container: dict[str, Any]) -> str:
    """The pod script ``container`` runs (``/bin/sh <the ConfigMap's file>``)."""
    shell, path = (str(word) for word in container["command"])
    assert (shell, path.rpartition("/")[0]) == ("/bin/sh", "/ci-runner-scripts")
    return (templates_dir() / "scripts" / path.rpartition("/")[2]).read_text(encoding="utf-8")


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_manifest(case: str, golden: Golden) -> None:
    config, ctx = CASES[case]
    text = manifest_yaml(render_mpijob(trusted_plan(config, ctx)))
    golden.check(f"{case}.yaml", text)
    assert yaml.safe_load(text) == render_mpijob(trusted_plan(config, ctx))


def test_the_examples_mpijob_reads_in_about_200_lines() -> None:
    # The pod scripts are in the job's ConfigMap; short lists and named items take one line.
    example = REPO_ROOT / "examples" / "simple_ml" / "train.yaml"
    config = load_config(example.read_text(encoding="utf-8"), "examples/simple_ml/train.yaml")
    text = manifest_yaml(render_mpijob(trusted_plan(config, MR_PIPELINE)))
    assert len(text.splitlines()) <= 210
    assert "#!/bin/sh" not in text


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_case_is_accepted_by_the_crd_and_the_controller(case: str) -> None:
    assert validate_mpijob(render_mpijob(trusted_plan(*CASES[case]))) == []


def test_every_example_renders_an_accepted_manifest() -> None:
    """Each example's job as train submits it: an MPIJob the CRD accepts, or (train-ddp.yaml,
    distributed: torchrun) the Indexed Job of workers nodes with its headless Service
    (tests/test_render_torchrun.py checks what its pods hold)."""
    kinds = {}
    for path in example_configs():
        config = load_config(path.read_text(encoding="utf-8"), str(path.relative_to(REPO_ROOT)))
        plan = trusted_plan(config, MR_PIPELINE)
        objects = render_objects(plan)
        job = objects[0]
        kinds[path.relative_to(REPO_ROOT).as_posix()] = [o["kind"] for o in objects]
        assert list(yaml.safe_load_all(objects_yaml(objects))) == objects  # as kubectl reads it
        if job["kind"] == "MPIJob":
            assert validate_mpijob(job) == [], path
            continue
        spec = job["spec"]
        assert (spec["completionMode"], spec["completions"]) == ("Indexed", config.workers)
        assert spec["template"]["spec"]["subdomain"] == objects[1]["metadata"]["name"]
    assert kinds["examples/simple_ml/train.yaml"] == ["MPIJob", "ConfigMap", "Secret"]
    assert kinds["examples/simple_ml/train-ddp.yaml"] == ["Job", "Service", "ConfigMap", "Secret"]


def test_the_validator_rejects_what_the_cluster_would() -> None:
    manifest = render_mpijob(trusted_plan(MINIMAL, LOCAL))
    manifest["spec"]["runPolicy"]["cleanPodPolicy"] = "Sometimes"
    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = 0
    manifest["spec"]["mpiReplicaSpecs"]["Worker"]["restartPolicy"] = "Always"
    manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0][
        "comand"
    ] = ["x"]
    manifest["metadata"]["labels"]["ci-runner/ref"] = "feature/x"
    manifest["metadata"]["name"] = "a" * 50
    assert validate_mpijob(manifest) == [
        "schema: spec/mpiReplicaSpecs/Launcher/template/spec/containers/0: Additional properties "
        "are not allowed ('comand' was unexpected)",
        "metadata.labels.ci-runner/ref: 'feature/x' is not a valid label value",
        "spec.runPolicy.cleanPodPolicy: 'Sometimes' is not None, Running or All",
        "spec.mpiReplicaSpecs.Worker.replicas: must be at least 1",
        "spec.mpiReplicaSpecs.Worker.restartPolicy: 'Always' is not Never or OnFailure",
        f"metadata.name: '{'a' * 50}-launcher-xxxxx' is not a valid DNS-1035 label",
    ]


# What the manifest promises


def test_pinned_to_the_sha_with_credentials_from_the_secret_by_name() -> None:
    manifest = render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE))
    name = manifest["metadata"]["name"]
    assert name == "simple-ml-01234567-5005"
    launcher, worker = _specs(manifest)
    # mpirun starts the ranks in the workers' checkout: the launcher fetches no code, and no
    # git credential reaches its pod.
    assert "initContainers" not in launcher
    assert "GIT_PASSWORD" not in str(launcher) and "git-credentials" not in str(launcher)
    fetch = _container(worker, "fetch-code")
    assert fetch["env"] == [
        {"name": "CI_RUNNER_REPO_URL", "value": "https://gitlab.bdap.com/faraway/simple_ml.git"},
        {"name": "CI_RUNNER_SHA", "value": SHA},
        {"name": "CI_RUNNER_GIT_CREDENTIALS", "value": "/ci-runner-git"},
    ]
    assert fetch["command"] == ["/bin/sh", "/ci-runner-scripts/fetch-code.sh"]
    assert 'fetch --quiet --no-tags --depth 1 origin "$sha"' in _script(fetch)
    # The Secret's git keys as files, in the fetch-code container only, readable by its user.
    assert _git_credentials_volume(f"{name}-secrets") in worker["volumes"]
    assert fetch["volumeMounts"] == [
        {"name": "ci-runner", "mountPath": "/ci-runner"},
        {"name": "scripts", "mountPath": "/ci-runner-scripts", "readOnly": True},
        {"name": "git-credentials", "mountPath": "/ci-runner-git", "readOnly": True},
    ]
    containers = [*worker["initContainers"], *worker["containers"]]
    others = [c for c in containers if c["name"] != "fetch-code"]
    assert others and all("git-credentials" not in str(c) for c in others)


def _git_credentials_volume(secret: str) -> dict[str, Any]:
    return {
        "name": "git-credentials",
        "secret": {
            "secretName": secret,
            "defaultMode": 0o400,
            "items": [
                {"key": "GIT_USERNAME", "path": "username"},
                {"key": "GIT_PASSWORD", "path": "password"},
            ],
        },
    }


ATTACK_ENV = (
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
    ("GIT_CONFIG_VALUE_0", "printenv GIT_PASSWORD > /ci-runner/leak; false"),
    ("GIT_SSH_COMMAND", "sh -c 'cat /ci-runner-git/password > /ci-runner/leak'"),
    ("STOLEN", "$(GIT_PASSWORD)"),
    ("EPOCHS", "3"),
    ("PIP_INDEX_URL", "https://pypi.example.com/simple"),
    ("PIP_NO_COMPILE", "1"),
    ("PIP_TARGET", "/ci-runner-cache/venvs"),
    ("PIP_CONFIG_FILE", "/ci-runner/code/pip.conf"),
    ("PIP_LOG", "/ci-runner/pip.log"),
)


def test_setup_containers_get_only_the_allow_listed_variables() -> None:
    config = replace(SEED_LIKE, env=ATTACK_ENV, secrets=("WANDB_API_KEY", "PIP_EXTRA_INDEX_URL"))
    manifest = render_mpijob(trusted_plan(config, MR_PIPELINE))
    secret = f"{manifest['metadata']['name']}-secrets"
    _, worker = _specs(manifest)
    assert _env(_container(worker, "fetch-code")) == {
        "CI_RUNNER_REPO_URL": "https://gitlab.bdap.com/faraway/simple_ml.git",
        "CI_RUNNER_SHA": SHA,
        "CI_RUNNER_GIT_CREDENTIALS": "/ci-runner-git",
    }
    # Of train.yaml, pip's settings reach the container that runs pip, and nothing else does.
    assert _container(worker, "install-requirements")["env"] == [
        {"name": "CI_RUNNER_SHA", "value": SHA},
        {"name": "CI_RUNNER_REQUIREMENTS", "value": "requirements.txt"},
        {"name": "PIP_CACHE_DIR", "value": "/ci-runner-cache/pip"},
        {"name": "CI_RUNNER_VENV_CACHE", "value": "/ci-runner-cache/venvs"},
        {"name": "PIP_INDEX_URL", "value": "https://pypi.example.com/simple"},
        {"name": "PIP_NO_COMPILE", "value": "1"},
        {
            "name": "PIP_EXTRA_INDEX_URL",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": "PIP_EXTRA_INDEX_URL"}},
        },
    ]
    # The ranks (through the launcher's mpirun -x) still get all of env, as written.
    rank = _env(_container(_specs(manifest)[0], "launcher"))
    assert {k: rank[k] for k, _ in ATTACK_ENV} == {
        **dict(ATTACK_ENV),
        "STOLEN": "$$(GIT_PASSWORD)",  # the kubelet reads it as the literal $(GIT_PASSWORD)
    }


def test_an_elastic_launcher_fetches_with_the_same_allow_list() -> None:
    manifest = render_mpijob(trusted_plan(replace(ELASTIC, env=ATTACK_ENV), MR_PIPELINE))
    launcher, _ = _specs(manifest)
    fetch = _container(launcher, "fetch-code")
    assert [e["name"] for e in fetch["env"]] == list(SETUP_ENV["fetch-code"])
    assert _git_credentials_volume(f"{manifest['metadata']['name']}-secrets") in launcher["volumes"]
    assert "git-credentials" not in str(_container(launcher, "launcher"))


def test_the_allow_lists_are_documented() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    reference = (REPO_ROOT / "docs" / "train-yaml.md").read_text(encoding="utf-8")
    for name in PIP_SETTINGS:
        assert f"`{name}`" in reference, name
    for names in SETUP_ENV.values():
        for name in names:
            assert f"`{name}`" in readme, name
    assert not [n for n in PIP_SETTINGS if not n.startswith("PIP_") or n == "PIP_CACHE_DIR"]


# The kubelet's $(VAR) expansion: what the pod gets is what train.yaml says


@pytest.mark.parametrize(
    ("text", "expected"),
    [  # cases of expand_test.go (Kubernetes v1.35.4), with VAR_A=A, VAR_B=B
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
        ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
        ("$?_boo_$!", "$?_boo_$!"),
        ("$(VAR_DNE)", "$(VAR_DNE)"),
        ("$$$$$$$(VAR_A)", "$$$A"),
        ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
        ("$(VAR_B)_______$(A", "B_______$(A"),
        ("$(VAR_A)foobarzab$", "Afoobarzab$"),
        ("--$($($($($--", "--$($($($($--"),
        ("$(foo$$var)", "$(foo$$var)"),
        ("$é$(VAR_A)", "$éA"),
    ],
)
def test_the_tests_expand_as_the_kubelet_does(text: str, expected: str) -> None:
    assert expand(text, {"VAR_A": "A", "VAR_B": "B"}) == expected


@given(
    st.text(alphabet=st.sampled_from("$()AB_é x")),
    st.dictionaries(st.sampled_from(["A", "B", "", "A_B"]), st.text(max_size=3)),
)
def test_kubelet_literal_survives_the_kubelets_expansion(text: str, env: dict[str, str]) -> None:
    assert expand(kubelet_literal(text), env) == text


def test_every_container_gets_the_literal_text_of_env_command_and_args() -> None:
    plan = trusted_plan(with_tricky_text(SEED_LIKE), MR_PIPELINE)
    manifest = render_mpijob(plan)
    launcher, worker = _specs(manifest)
    secret = {"GIT_PASSWORD": TOKEN, "GIT_USERNAME": "u", "WANDB_API_KEY": "w"}

    def view(container: dict[str, Any]) -> dict[str, Any]:
        return container_view(container, lambda ref: secret[ref["secretKeyRef"]["key"]])

    rank_env = {**dict(plan.rank_environment(POD_LOCATION)), "WANDB_API_KEY": "w"}
    seen = view(_container(launcher, "launcher"))
    assert seen["env"].pop("CI_RUNNER_SSH_USER") == "root"  # launch.sh's own
    assert seen["env"] == {**rank_env, "CI_RUNNER_SSH_PORT": "22"}
    assert seen["env"]["TRICKY"] == TRICKY
    assert view(_container(launcher, "launcher"))["args"] == plan.mpirun_argv(POD_HOSTS)
    assert view(_container(launcher, "launcher"))["args"][-1] == TRICKY
    assert view(_container(worker, "install-requirements"))["env"]["PIP_INDEX_URL"] == TRICKY
    scripts = render_scripts(plan)["data"]
    for container, script in [
        (_container(worker, "fetch-code"), "fetch-code.sh"),
        (_container(worker, "install-requirements"), "install-requirements.sh"),
        (_container(worker, "worker"), "sshd.sh"),
        (_container(launcher, "launcher"), "launch.sh"),
    ]:
        assert view(container)["command"] == ["/bin/sh", f"/ci-runner-scripts/{script}"]
        assert scripts[script] == (templates_dir() / "scripts" / script).read_text()
    probe = view(_container(worker, "worker"))["probe"]
    assert probe == ["/bin/sh", "/ci-runner-scripts/ready.sh"]


def test_an_elastic_launcher_fetches_the_code_horovodrun_runs_from() -> None:
    launcher, _ = _specs(render_mpijob(trusted_plan(ELASTIC, MR_PIPELINE)))
    assert [c["name"] for c in launcher["initContainers"]] == ["fetch-code"]


def test_workers_run_sshd_and_are_ready_only_after_setup() -> None:
    manifest = render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE))
    _, worker = _specs(manifest)
    assert [c["name"] for c in worker["initContainers"]] == ["fetch-code", "install-requirements"]
    main = _container(worker, "worker")
    assert main["command"] == ["/bin/sh", "/ci-runner-scripts/sshd.sh"] and "args" not in main
    assert "-o StrictModes=no" in _script(main)
    assert main["readinessProbe"]["exec"]["command"] == ["/bin/sh", "/ci-runner-scripts/ready.sh"]
    assert manifest["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    # No fixed wait (the seed's `sleep 1m`): only short polls, ready.sh's for sshd's port and
    # launch.sh's for the workers' names in the cluster DNS.
    scripts = "".join(render_scripts(trusted_plan(SEED_LIKE, MR_PIPELINE))["data"].values())
    assert [float(s) for s in re.findall(r"\bsleep +(\S+)", scripts)] == [
        0.1,
        0.1,
    ]
    install = _container(worker, "install-requirements")
    assert _env(install)["CI_RUNNER_REQUIREMENTS"] == "requirements.txt"
    assert {"name": "pip-cache", "persistentVolumeClaim": {"claimName": "pip-cache"}} in worker[
        "volumes"
    ]
    assert {"name": "pip-cache", "emptyDir": {"sizeLimit": "20Gi"}} in _specs(
        render_mpijob(trusted_plan(MINIMAL, LOCAL))
    )[1]["volumes"]
    assert main["resources"]["limits"] == {
        "cpu": "8",
        "memory": "32Gi",
        "ephemeral-storage": "20Gi",
        "nvidia.com/gpu": 2,
    }


def test_a_pip_cache_claim_also_keeps_virtualenvs_the_worker_runs() -> None:
    _, worker = _specs(render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE)))
    assert _env(_container(worker, "install-requirements"))["CI_RUNNER_VENV_CACHE"] == (
        "/ci-runner-cache/venvs"
    )
    assert {
        "name": "pip-cache",
        "mountPath": "/ci-runner-cache",
        "subPath": "unprotected",
    } in _container(worker, "worker")["volumeMounts"]
    # Without a claim each pod's cache is its own emptyDir: a virtualenv kept there helps no one.
    _, worker = _specs(render_mpijob(trusted_plan(MINIMAL, LOCAL)))
    assert "CI_RUNNER_VENV_CACHE" not in _env(_container(worker, "install-requirements"))
    assert all(m["name"] != "pip-cache" for m in _container(worker, "worker")["volumeMounts"])


def test_every_rank_sees_the_environment_contract() -> None:
    manifest = render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE))
    name = manifest["metadata"]["name"]
    launcher, worker = _specs(manifest)
    expected = {
        "CI_RUNNER_SHA": SHA,
        "CI_RUNNER_JOB": name,
        "CI_RUNNER_PROJECT": "faraway/simple_ml",
        "CI_RUNNER_CODE_DIR": "/ci-runner/code",
        "DATA_URI": "s3://datasets/diabetes/",
        "OUTPUT_URI": f"s3://models/faraway/simple_ml/{SHA}/{name}/",
        "PYTHONPATH": "src",
        "PYTHONUNBUFFERED": "1",
        "OMPI_MCA_mpi_yield_when_idle": "1",
        "LOG_LEVEL": "debug",
        "WANDB_API_KEY": {"secretKeyRef": {"name": f"{name}-secrets", "key": "WANDB_API_KEY"}},
        "CI_RUNNER_SSH_PORT": "22",
    }
    assert _env(_container(launcher, "launcher")) == {**expected, "CI_RUNNER_SSH_USER": "root"}
    # sshd's container: what sshd.sh and the readiness probe read, no rank's and no Secret's.
    assert _env(_container(worker, "worker")) == {"CI_RUNNER_SHA": SHA, "CI_RUNNER_SSH_PORT": "22"}


def test_launcher_runs_mpirun_from_the_code_directory() -> None:
    launcher, _ = _specs(render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE)))
    main = _container(launcher, "launcher")
    # What horovodrun 0.28.1 would run (runner/mpi_run.py); launch.sh adds the interface and -x.
    assert main["args"] == [
        *("mpirun", "--allow-run-as-root", "--tag-output", "-np", "4"),
        *("--hostfile", "/etc/mpi/hostfile", "-bind-to", "none", "-map-by", "slot"),
        *("-mca", "pml", "ob1", "-mca", "btl", "^openib"),
        "--",  # the end of mpirun's options: the job's command is never one of them
        *("python", "main_with_horovod.py", "--epochs", "20"),
    ]
    assert 'cd "$code_dir"' in _script(main)


def test_an_elastic_launcher_runs_horovodrun() -> None:
    launcher, _ = _specs(render_mpijob(trusted_plan(ELASTIC, MR_PIPELINE)))
    assert _container(launcher, "launcher")["args"][0] == "horovodrun"
    with pytest.raises(ValueError, match="elastic driver"):
        trusted_plan(ELASTIC, MR_PIPELINE).mpirun_argv(POD_HOSTS)


def test_mpirun_is_refused_for_ranks_that_talk_gloo() -> None:
    gloo = replace(POD_HOSTS, controller=("--gloo",))
    with pytest.raises(ValueError) as raised:
        trusted_plan(MINIMAL, MR_PIPELINE).mpirun_argv(gloo)
    assert str(raised.value) == "mpirun starts MPI ranks; --gloo needs horovodrun"


def test_elastic_launcher_discovers_hosts() -> None:
    plan = trusted_plan(replace(ELASTIC, slots_per_worker=2), MR_PIPELINE)
    assert plan.horovodrun_argv(POD_HOSTS) == [
        "horovodrun",
        "-np",
        "4",
        "--min-np",
        "4",
        "--max-np",
        "8",
        "--slots",
        "2",
        "--host-discovery-script",
        "/etc/mpi/discover_hosts.sh",
        "python",
        "train.py",
    ]


def test_run_policy() -> None:
    assert render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE))["spec"]["runPolicy"] == {
        "cleanPodPolicy": "Running",
        "ttlSecondsAfterFinished": 600,
        "backoffLimit": 1,
        "activeDeadlineSeconds": 7200,
    }
    assert (
        "activeDeadlineSeconds"
        not in render_mpijob(trusted_plan(MINIMAL, LOCAL))["spec"]["runPolicy"]
    )


@pytest.mark.parametrize(("case", "size"), [("minimal", "1Gi"), ("seed-like", "16Gi")])
def test_the_ranks_get_a_memory_backed_dev_shm(case: str, size: str) -> None:
    launcher, worker = _specs(render_mpijob(trusted_plan(*CASES[case])))
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}} in worker["volumes"]
    assert {"name": "shm", "mountPath": "/dev/shm"} in _container(worker, "worker")["volumeMounts"]
    # The launcher runs mpirun (or horovodrun's driver), no rank.
    assert all(v["name"] != "shm" for v in launcher["volumes"])


def test_every_container_declares_cpu_and_memory() -> None:
    # What a cpu/memory ResourceQuota requires of every container, init containers included
    # (the real admission on it: tests/test_backends_kubernetes_scenarios_policies.py). The API
    # server sets the requests to the limits (pkg/apis/core/v1/defaults.go) before admission.
    launcher, worker = _specs(render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE)))
    disk = {"ephemeral-storage": "20Gi"}
    setup = {"limits": {"cpu": "1", "memory": "2Gi", **disk}}
    assert _container(worker, "fetch-code")["resources"] == setup
    assert _container(worker, "install-requirements")["resources"] == setup
    assert _container(launcher, "launcher")["resources"] == {
        "limits": {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "2Gi"}
    }
    assert _container(worker, "worker")["resources"] == {
        "limits": {"cpu": "8", "memory": "32Gi", **disk, "nvidia.com/gpu": 2},
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_emptydir_has_a_size_limit_and_every_container_asks_for_disk(case: str) -> None:
    for pod in _specs(render_mpijob(trusted_plan(*CASES[case]))):
        for volume in pod["volumes"]:
            assert "sizeLimit" in volume.get("emptyDir", {"sizeLimit": "-"}), volume
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            assert "ephemeral-storage" in container["resources"]["limits"], container["name"]


def test_resources_none_leaves_the_container_to_the_limit_range() -> None:
    config = load_config(
        "name: minimal\nimage: horovod/horovod:0.28.1\ncommand: python train.py\n"
        "resources: {cpu: 2, memory: 4Gi, setup: none, launcher: {memory: 256Mi}}\n"
    )
    launcher, worker = _specs(render_mpijob(trusted_plan(config, LOCAL)))
    disk = {"limits": {"ephemeral-storage": "20Gi"}}  # not the LimitRange's
    assert _container(worker, "fetch-code")["resources"] == disk
    assert _container(worker, "install-requirements")["resources"] == disk
    assert _container(launcher, "launcher")["resources"] == {
        "limits": {"cpu": "500m", "memory": "256Mi", "ephemeral-storage": "2Gi"}
    }


def test_no_pod_outlives_its_job() -> None:
    # SEED_LIKE: timeout 2h, setup_timeout 30m, unschedulable_timeout 10m (the defaults).
    launcher, worker = _specs(render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE)))
    assert launcher["activeDeadlineSeconds"] == 7200 + 600
    assert worker["activeDeadlineSeconds"] == 1800 + 600 + 7200 + 600
    # Without a timeout, the 7 days a timeout may be at most.
    launcher, worker = _specs(render_mpijob(trusted_plan(MINIMAL, LOCAL)))
    assert launcher["activeDeadlineSeconds"] == 604800 + 600
    assert worker["activeDeadlineSeconds"] == 1800 + 600 + 604800 + 600


def test_gang_scheduling_counts_only_the_workers() -> None:
    # WaitForWorkersReady creates the launcher after the workers are ready: a gang of
    # workers + launcher would wait for a pod that is never created (mpi-operator#608).
    policy = render_mpijob(trusted_plan(GANG, MR_PIPELINE))["spec"]["runPolicy"]["schedulingPolicy"]
    assert policy == {"minAvailable": 4, "queue": "research", "priorityClass": "batch"}


def test_pod_settings_on_launcher_and_workers() -> None:
    launcher, worker = _specs(render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE)))
    # The launcher takes no slot on a GPU node: none of the workers' selectors or tolerations.
    assert {"nodeSelector", "tolerations", "affinity"} & set(launcher) == set()
    for pod in (launcher, worker):
        assert pod["dnsPolicy"] == "None"
        assert pod["serviceAccountName"] == "trainer"
    for pod in (worker,):
        assert pod["tolerations"] == [
            {"operator": "Exists", "key": "gpu", "effect": "NoSchedule"},
            {
                "operator": "Equal",
                "key": "spot",
                "value": "true",
                "effect": "NoExecute",
                "tolerationSeconds": 60,
            },
        ]
        assert pod["nodeSelector"] == {"accelerator": "nvidia-v100", "pool": "training"}
        assert pod["dnsPolicy"] == "None"
        assert pod["dnsConfig"] == {
            "nameservers": ["10.105.222.6"],
            "searches": ["svc.cluster.local", "cluster.local", "bdap.com"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
        }
        assert pod["serviceAccountName"] == "trainer"
        assert pod["priorityClassName"] == "high"
        assert pod["imagePullSecrets"] == [{"name": "harbor"}]


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_pod_mounts_a_service_account_token(case: str) -> None:
    for pod in _specs(render_mpijob(trusted_plan(*CASES[case]))):
        assert pod["automountServiceAccountToken"] is False


def _security(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        c["name"]: c["securityContext"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]
    }


RESTRICTED = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _pod_security(uid: int) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "fsGroup": uid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_setup_and_launcher_are_restricted_and_root_workers_keep_what_sshd_needs(
    case: str,
) -> None:
    manifest = render_mpijob(trusted_plan(*CASES[case]))
    assert manifest["spec"]["sshAuthMountPath"] == "/ci-runner-ssh"
    launcher, worker = _specs(manifest)
    for pod in (launcher, worker):
        assert pod["securityContext"] == _pod_security(65534)
    assert all(context == RESTRICTED for context in _security(launcher).values())
    contexts = _security(worker)
    assert contexts.pop("worker") == {
        "runAsNonRoot": False,
        "runAsUser": 0,
        "allowPrivilegeEscalation": False,
        "capabilities": {
            "drop": ["ALL"],
            "add": [
                *("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL"),
                *("NET_BIND_SERVICE", "SETGID", "SETUID", "SYS_CHROOT"),
            ],
        },
    }
    assert contexts == {"fetch-code": RESTRICTED, "install-requirements": RESTRICTED}


def test_a_non_root_image_runs_every_container_restricted_as_its_user() -> None:
    k8s = replace(MINIMAL.kubernetes, run_as_user=1000, ssh_port=2222)
    for config in (replace(MINIMAL, kubernetes=k8s), replace(ELASTIC, kubernetes=k8s)):
        manifest = render_mpijob(trusted_plan(config, LOCAL))
        for pod in _specs(manifest):
            assert pod["securityContext"] == _pod_security(1000)
            assert set(_security(pod)) == {
                c["name"] for c in [*pod.get("initContainers", []), *pod["containers"]]
            }
            assert all(context == RESTRICTED for context in _security(pod).values())
        launcher = _container(_specs(manifest)[0], "launcher")
        assert "--allow-run-as-root" not in launcher["args"]
        assert "CI_RUNNER_SSH_USER" not in _env(launcher)  # the launcher's own user logs in
    launcher = _container(_specs(render_mpijob(trusted_plan(MINIMAL, LOCAL)))[0], "launcher")
    assert launcher["args"][:2] == ["mpirun", "--allow-run-as-root"]


def test_labels_and_annotations_link_back() -> None:
    metadata = render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE))["metadata"]
    assert metadata["namespace"] == "mpi-operator"
    assert metadata["labels"] == {
        "app.kubernetes.io/managed-by": "ci-runner",
        "ci-runner/job": "simple-ml-01234567-5005",
        "ci-runner/config-name": "simple-ml",
        "ci-runner/project": "faraway-simple_ml",
        "ci-runner/sha": SHA,
        "ci-runner/pipeline": "1001",
        "ci-runner/ci-job": "5005",
        "ci-runner/merge-request": "7",
    }
    assert metadata["annotations"] == {
        "ci-runner/project": "faraway/simple_ml",
        "ci-runner/project-url": "https://gitlab.bdap.com/faraway/simple_ml",
        "ci-runner/sha": SHA,
        "ci-runner/ref": "feature/faster-training",
        "ci-runner/pipeline-id": "1001",
        "ci-runner/pipeline-source": "merge_request_event",
        "ci-runner/ci-job-id": "5005",
        "ci-runner/ci-job-url": "https://gitlab.bdap.com/faraway/simple_ml/-/jobs/5005",
        "ci-runner/merge-request-iid": "7",
        "ci-runner/config": "simple_ml/train.yaml",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("group/sub/project", "group-sub-project"),
        ("-x-", "x"),
        ("ü" * 80, ""),
        ("a" * 80, "a" * 63),
    ],
)
def test_label_value(text: str, expected: str) -> None:
    assert to_label_value(text) == expected


def test_no_repository_url_is_a_clear_error() -> None:
    with pytest.raises(GitError) as raised:
        render_mpijob(trusted_plan(MINIMAL, replace(LOCAL, repo_url=None)))
    assert str(raised.value) == (
        "no repository URL for the pods to fetch the code from; fix: pass --repo-url "
        "https://<gitlab>/<group>/<project>.git, add an 'origin' remote, or run in GitLab CI"
    )


@pytest.mark.parametrize("name", [*RESERVED_ENV, f"{RESERVED_ENV_PREFIX}SHA"])
def test_names_ci_runner_sets_cannot_be_reused(name: str) -> None:
    # The config is the one owner of this rule: no train.yaml that reuses a name ci-runner sets
    # for every rank, as a variable or a secret, loads, so none reaches a plan or a manifest.
    fix = f"fix: choose another name ({RESERVED} are reserved)"
    assert problems(BASE + f"env: {{{name}: x}}") == [
        f"train.yaml:4: env.{name}: {name} is set by ci-runner for every rank; {fix}"
    ]
    assert problems(BASE + f"secrets: [{name}]") == [
        f"train.yaml:4: secrets[0]: {name} is set by ci-runner for every rank; {fix}"
    ]


def test_a_secret_cannot_also_be_in_env() -> None:
    assert problems(BASE + "env: {TOKEN: x}\nsecrets: [TOKEN]") == [
        "train.yaml:5: secrets[0]: TOKEN is also set in env; fix: keep it in one place: secrets "
        "for CI variables, env for plain values"
    ]


def test_ssh_port_and_cluster_domain_reach_both_pods() -> None:
    k8s = replace(SEED_LIKE.kubernetes, ssh_port=2222, cluster_domain="k8s.example.com")
    manifest = render_mpijob(trusted_plan(replace(SEED_LIKE, kubernetes=k8s), MR_PIPELINE))
    assert validate_mpijob(manifest) == []
    launcher, worker = _specs(manifest)
    for pod, container in ((launcher, "launcher"), (worker, "worker")):
        assert _env(_container(pod, container))["CI_RUNNER_SSH_PORT"] == "2222"
        assert pod["dnsConfig"]["searches"] == [
            "svc.k8s.example.com",
            "k8s.example.com",
            "bdap.com",
        ]
    # Without nameservers the pods keep the cluster's DNS (ClusterFirst) and its searches.
    own = replace(k8s, dns_config=DnsConfig(searches=("bdap.com",)))
    launcher, worker = _specs(
        render_mpijob(trusted_plan(replace(SEED_LIKE, kubernetes=own), MR_PIPELINE))
    )
    assert ("dnsPolicy" in worker, worker["dnsConfig"]) == (False, {"searches": ["bdap.com"]})


def test_python_variables_the_user_sets_are_merged_not_duplicated() -> None:
    user = (("PYTHONPATH", "lib"), ("PYTHONUNBUFFERED", "0"), ("OMPI_MCA_mpi_yield_when_idle", "0"))
    manifest = render_mpijob(trusted_plan(replace(MINIMAL, env=user), LOCAL))
    assert validate_mpijob(manifest) == []
    env = _env(_container(_specs(manifest)[0], "launcher"))
    names = [e["name"] for e in _container(_specs(manifest)[0], "launcher")["env"]]
    assert (env["PYTHONPATH"], env["PYTHONUNBUFFERED"], env["OMPI_MCA_mpi_yield_when_idle"]) == (
        "lib",
        "0",
        "0",
    )
    assert len(names) == len(set(names))


# The Secret


def test_an_mpijob_over_what_the_api_server_stores_is_refused_naming_the_largest_fields() -> None:
    # A control character is six in JSON: 300 KB of them is a 1.7 MiB request.
    config = replace(MINIMAL, env=(("BIG", "\x01" * 300_000), ("SMALL", "y" * 2000)))
    with pytest.raises(ConfigError) as caught:
        render_mpijob(trusted_plan(config, LOCAL))
    assert caught.value.lines() == [
        "train.yaml: the MPIJob would be 1.72 MiB, more than the 1.44 MiB the API server stores "
        "(largest: env.BIG 1.72 MiB, env.SMALL 2.0 KiB, command[1] 10 bytes); fix: keep large "
        "data in a file of the repository or under `data`, not in env or the command"
    ]
    render_mpijob(trusted_plan(replace(config, env=(("BIG", "x" * 1_000_000),)), LOCAL))


def test_a_secret_over_a_mib_is_refused_before_anything_is_submitted() -> None:
    env = {"CI_JOB_TOKEN": TOKEN, "WANDB_API_KEY": "w" * (1024 * 1024)}
    with pytest.raises(ConfigError) as caught:
        render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE, env, read_secrets=True))
    assert caught.value.lines() == [
        "simple_ml/train.yaml: secrets: the job's Secret would hold 1048615 bytes, more than the "
        "1048576 (1 MiB) a Secret may (largest: secrets: WANDB_API_KEY 1.00 MiB, secrets: "
        "GIT_PASSWORD 26 bytes, secrets: GIT_USERNAME 17 bytes); fix: pass large values another "
        "way (a file of the repository, or storage the ranks read with a smaller credential)"
    ]


def test_secret_data_with_the_job_token() -> None:
    env = {"CI_JOB_TOKEN": TOKEN, "WANDB_API_KEY": "wandb-value"}
    assert trusted_plan(SEED_LIKE, MR_PIPELINE, env, read_secrets=True).secret.data == {
        "GIT_USERNAME": "gitlab-ci-token",
        "GIT_PASSWORD": TOKEN,
        "WANDB_API_KEY": "wandb-value",
    }
    assert secret_name("simple-ml-01234567-5005") == "simple-ml-01234567-5005-secrets"


def test_secret_data_prefers_a_git_token() -> None:
    env = {"CI_JOB_TOKEN": "job", "CI_RUNNER_GIT_TOKEN": "glpat-x"}
    data = trusted_plan(MINIMAL, LOCAL, env, read_secrets=True).secret.data
    assert data == {"GIT_USERNAME": "oauth2", "GIT_PASSWORD": "glpat-x"}


def test_secret_data_names_every_missing_variable() -> None:
    config = replace(SEED_LIKE, secrets=("WANDB_API_KEY", "HF_TOKEN"))
    with pytest.raises(ConfigError) as raised:
        trusted_plan(
            config, MR_PIPELINE, {"CI_JOB_TOKEN": TOKEN, "HF_TOKEN": ""}, read_secrets=True
        )
    assert raised.value.lines() == [
        f"simple_ml/train.yaml: secrets: CI variable {name} is not set; fix: define {name} as a "
        "masked variable in the project's Settings > CI/CD > Variables (or export it when "
        "running outside CI)"
        for name in ("WANDB_API_KEY", "HF_TOKEN")
    ]


def test_no_secret_value_is_in_the_manifest() -> None:
    text = manifest_yaml(render_mpijob(trusted_plan(SEED_LIKE, MR_PIPELINE)))
    env = {"CI_JOB_TOKEN": TOKEN, "WANDB_API_KEY": "w" * 20}
    data = trusted_plan(SEED_LIKE, MR_PIPELINE, env, read_secrets=True).secret.values()
    assert TOKEN not in text
    assert data["WANDB_API_KEY"] not in text


# Injection: a value can never add or change a key

NASTY = [
    'x"\n  evil: 1',
    "x'\n- evil",
    "{{ 7 * 7 }}{% raw %}",
    "&anchor a\n*anchor",
    "key: value # comment",
    "--- !!python/object:os.system\n...",
    "null",
    "0x1F",
    "\\u0041\\",
    "tab\there\u2028line\u0085sep\ufeff",
    "\U0001f600 ünïcödé",
    "x" * 5000,
]


def _substituted(value: Any, old: str, new: str) -> Any:
    """``value`` with ``old`` replaced by ``new`` in every string and key; labels left out."""
    if isinstance(value, dict):
        return {
            _substituted(key, old, new): _substituted(item, old, new)
            for key, item in value.items()
            if key != "labels"  # sanitized, so not the value itself: checked separately
        }
    if isinstance(value, list):
        return [_substituted(item, old, new) for item in value]
    return value.replace(old, new) if isinstance(value, str) else value


def _config_with(value: str) -> TrainConfig:
    return replace(
        SEED_LIKE,
        image=value,
        command=(value, value),
        requirements=value,
        env=(("LOG_LEVEL", value),),
        data=value,
        outputs=value.replace("{", "{{").replace("}", "}}"),
        kubernetes=replace(
            SEED_LIKE.kubernetes,
            namespace=value,
            tolerations=(
                Toleration(key=value, operator="Equal", value=value, effect="NoSchedule"),
            ),
            node_selector=((value, value),),
            dns_config=DnsConfig(
                nameservers=(value,), searches=(value,), options=((value, value),)
            ),
            service_account=value,
            priority_class=value,
            image_pull_secrets=(value,),
            queue=value,
            pip_cache_pvc=value,
        ),
        source_file=value,
    )


def _context_with(value: str) -> CIContext:
    return replace(
        MR_PIPELINE,
        project_path=value,
        project_url=value,
        pipeline_id=value,
        pipeline_source=value,
        job_url=value,
        ref_name=value,
        mr_iid=value,
        # Kept: a repository URL is checked before rendering (test_context's repo_url_problem).
    )


@pytest.mark.parametrize("value", NASTY, ids=range(len(NASTY)))
def test_user_values_stay_single_values(value: str) -> None:
    """Each value lands exactly where "benign" does, as that one scalar, and nothing else moves."""
    benign = render_mpijob(trusted_plan(_config_with("benign"), _context_with("benign")))
    nasty = render_mpijob(trusted_plan(_config_with(value), _context_with(value)))
    expected = _substituted(benign, "benign", value)
    annotations = expected["metadata"]["annotations"]
    expected["metadata"]["annotations"] = {k: v[:4096] for k, v in annotations.items()}
    assert _substituted(nasty, "benign", "benign") == expected
    assert yaml.safe_load(manifest_yaml(nasty)) == nasty


@pytest.mark.parametrize("value", NASTY, ids=range(len(NASTY)))
def test_hostile_ci_context_still_gives_an_accepted_manifest(value: str) -> None:
    manifest = render_mpijob(trusted_plan(SEED_LIKE, replace(_context_with(value), job_id=value)))
    assert validate_mpijob(manifest) == []
    assert manifest["metadata"]["annotations"]["ci-runner/ref"] == value[:4096]


def test_label_values_from_a_hostile_branch_name_are_valid() -> None:
    labels = render_mpijob(trusted_plan(MINIMAL, replace(LOCAL, project_path='x"\n  evil: 1')))[
        "metadata"
    ]["labels"]
    assert labels["ci-runner/project"] == "x-evil-1"
    assert all(
        re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", v) for v in labels.values()
    )


@given(st.text())
def test_yaml_quote_round_trips_any_text(text: str) -> None:
    assert yaml.safe_load(yaml_quote(text)) == text
    document = f"a:\n  b: {yaml_quote(text)}\n  c: 1\n"
    assert yaml.safe_load(document) == {"a": {"b": text, "c": 1}}


@given(
    st.one_of(
        st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False, allow_infinity=False)
    )
)
def test_yaml_quote_keeps_scalar_types(value: object) -> None:
    assert yaml.safe_load(yaml_quote(value)) == value


def test_git_fetches_in_the_project_s_setup_image_and_only_there() -> None:
    for config in (SEED_LIKE, ELASTIC):
        launcher, worker = _specs(render_mpijob(trusted_plan(config, MR_PIPELINE)))
        images = {
            c["name"]: c["image"]
            for pod in (launcher, worker)
            for c in [*pod.get("initContainers", []), *pod["containers"]]
        }
        assert images.pop("fetch-code") == SETUP_IMAGE
        assert set(images.values()) == {config.image}, config.name


def test_without_a_setup_image_nothing_is_rendered() -> None:
    with pytest.raises(EnvironmentSetupError) as raised:
        render_mpijob(build_plan(SEED_LIKE, MR_PIPELINE, read_settings({})))
    assert str(raised.value) == (
        "no image for the pods' git fetch, which ci-runner never runs in train.yaml's image (that "
        "image would get the git token); fix: pass --setup-image with an image that has git and "
        "that the project trusts (ci-runner's own), or set CI_RUNNER_SETUP_IMAGE"
    )


@pytest.mark.parametrize(("protected", "half"), [("true", "protected"), ("false", "unprotected")])
def test_a_pod_mounts_only_its_ref_s_half_of_the_pip_cache_claim(protected: str, half: str) -> None:
    plan = trusted_plan(SEED_LIKE, MR_PIPELINE, {"CI_COMMIT_REF_PROTECTED": protected})
    _, worker = _specs(render_mpijob(plan))
    mounts = [
        (container["name"], mount.get("subPath"))
        for container in [*worker["initContainers"], *worker["containers"]]
        for mount in container["volumeMounts"]
        if mount["name"] == "pip-cache"
    ]
    assert mounts == [("install-requirements", half), ("worker", half)]
    assert {"name": "pip-cache", "persistentVolumeClaim": {"claimName": "pip-cache"}} in worker[
        "volumes"
    ]


def test_without_a_claim_the_pip_cache_is_the_pod_s_own_and_whole() -> None:
    _, worker = _specs(render_mpijob(trusted_plan(MINIMAL, LOCAL)))
    mounts = [
        m for c in worker["initContainers"] for m in c["volumeMounts"] if m["name"] == "pip-cache"
    ]
    assert mounts == [{"name": "pip-cache", "mountPath": "/ci-runner-cache"}]


def test_a_setup_image_with_an_unexpanded_variable_is_refused() -> None:
    plan = trusted_plan(SEED_LIKE, MR_PIPELINE, {"CI_RUNNER_SETUP_IMAGE": "$RELEASED_IMAGE"})
    with pytest.raises(EnvironmentSetupError) as raised:
        render_mpijob(plan)
    assert str(raised.value) == (
        "the setup image '$RELEASED_IMAGE' holds an unexpanded variable; fix: set "
        "CI_RUNNER_SETUP_IMAGE (the component's input setup_image) to the image itself"
    )
