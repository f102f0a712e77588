"""The run plan: built once, read by the manifest and the local backend alike."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from ci_runner.backends.local.backend import local_hosts, rank_environment
from ci_runner.config.types import Elastic, KubernetesOptions, TrainConfig
from ci_runner.console import Console
from ci_runner.errors import ConfigError
from ci_runner.plan.run_plan import LOCATION_DEPENDENT, OutputPaths
from ci_runner.render import CODE_DIR, POD_HOSTS, render_mpijob
from ci_runner.settings import ProcessEnvironment, read_settings
from testing.plan_cases import CONFIG, CONTEXT, ENV, SHA, pod_environment, trusted_plan


def test_both_backends_give_every_rank_the_same_environment(tmp_path: Path) -> None:
    plan = trusted_plan(CONFIG, CONTEXT, ENV, read_secrets=True)
    secret_data = dict(plan.secret.values())
    specs = render_mpijob(plan)["spec"]["mpiReplicaSpecs"]
    launcher = specs["Launcher"]["template"]["spec"]["containers"][0]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    pod = pod_environment(launcher, secret_data)
    assert pod.pop("CI_RUNNER_SSH_USER") == "root"  # launch.sh's own: ranks never see it
    # The ranks' environment is the launcher's (mpirun -x); sshd's container has none of it.
    assert pod_environment(worker, secret_data) == {
        "CI_RUNNER_SHA": SHA,
        "CI_RUNNER_SSH_PORT": "22",
    }
    assert pod.pop("CI_RUNNER_SSH_PORT") == "22"  # the workers' sshd: a pod's only
    code_dir = tmp_path / "worktree"
    local = rank_environment(plan, ProcessEnvironment(ENV), code_dir, [tmp_path / "layer" / "bin"])

    assert sorted(local) == sorted([*pod, "PATH"])  # PATH is the image's in a pod
    for name in sorted(pod):
        if name not in LOCATION_DEPENDENT:
            assert local[name] == pod[name], name
    assert (pod["CI_RUNNER_CODE_DIR"], local["CI_RUNNER_CODE_DIR"]) == (CODE_DIR, str(code_dir))
    assert (pod["PYTHONPATH"], local["PYTHONPATH"]) == ("src", "/opt/base:src")
    assert local["PATH"] == f"{tmp_path / 'layer' / 'bin'}:/usr/bin"
    assert pod["PYTHONUNBUFFERED"] == local["PYTHONUNBUFFERED"] == "1"
    assert pod["OMPI_MCA_mpi_yield_when_idle"] == local["OMPI_MCA_mpi_yield_when_idle"] == "1"
    assert pod["WANDB_API_KEY"] == "wandb-secret-value"
    assert pod["OUTPUT_URI"] == f"s3://models/group/project/{SHA}/{plan.mpijob_name}/"
    assert "CI_JOB_TOKEN" not in local  # GitLab's credentials stay with ci-runner


def test_train_yaml_env_wins_over_the_rank_defaults_on_both() -> None:
    user = (("PYTHONUNBUFFERED", "0"), ("OMPI_MCA_mpi_yield_when_idle", "0"))
    config = TrainConfig(name="t", image="i", command=("python", "t.py"), env=user)
    plan = trusted_plan(config, CONTEXT, ENV, read_secrets=True)
    local = rank_environment(plan, ProcessEnvironment({"PYTHONUNBUFFERED": "1"}), Path("/code"), [])
    container = render_mpijob(plan)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    pod = pod_environment(container["containers"][0], {})
    for name, value in user:
        assert local[name] == pod[name] == value, name


def test_the_host_part_is_the_only_difference_in_the_command_line(tmp_path: Path) -> None:
    config = TrainConfig(
        name="t",
        image="i",
        command=("python", "t.py"),
        workers=2,
        slots_per_worker=2,
        elastic=Elastic(min_workers=1, max_workers=3),
    )
    plan = trusted_plan(config, CONTEXT)
    script = tmp_path / "discover.sh"
    pod = plan.horovodrun_argv(POD_HOSTS)
    local = plan.horovodrun_argv(local_hosts(plan, script), "/venv/bin/horovodrun")
    common = ["-np", "4", "--min-np", "2", "--max-np", "6", "--slots", "2"]
    assert pod == [
        "horovodrun",
        *common,
        "--host-discovery-script",
        "/etc/mpi/discover_hosts.sh",
        "python",
        "t.py",
    ]
    assert local == [
        "/venv/bin/horovodrun",
        *common,
        "--host-discovery-script",
        str(script),
        "--gloo",
        "python",
        "t.py",
    ]
    with pytest.raises(ValueError):
        plan.horovodrun_argv(local_hosts(plan, None))


def test_a_missing_secret_is_one_config_error_whoever_runs() -> None:
    with pytest.raises(ConfigError) as raised:
        trusted_plan(CONFIG, CONTEXT, {"CI_JOB_TOKEN": "t"}, read_secrets=True)
    assert raised.value.lines() == [
        "train.yaml: secrets: CI variable WANDB_API_KEY is not set; fix: define WANDB_API_KEY as "
        "a masked variable in the project's Settings > CI/CD > Variables (or export it when "
        "running outside CI)"
    ]


def test_a_plan_without_secret_values_names_them_only() -> None:
    plan = trusted_plan(CONFIG, CONTEXT, ENV)
    assert plan.secret.name == f"{plan.mpijob_name}-secrets"
    assert plan.secret.keys == ("GIT_USERNAME", "GIT_PASSWORD", "WANDB_API_KEY")
    assert plan.secret.data is None
    with pytest.raises(ValueError):
        plan.secret.values()
    # The masker still knows every value: render and cancel print lines too.
    assert plan.masker.mask("key wandb-secret-value") == "key [MASKED]"


def test_secret_values_never_show_in_the_plan_repr() -> None:
    plan = trusted_plan(CONFIG, CONTEXT, ENV, read_secrets=True)
    assert "wandb-secret-value" not in repr(plan)
    assert "glcbt-job-token-value" not in repr(plan)


def test_overrides_are_taken_as_given_and_paths_kept(tmp_path: Path) -> None:
    outputs = OutputPaths(tmp_path / "out", "out")
    plan = trusted_plan(
        CONFIG, CONTEXT, data_uri="file:///d/", output_uri="file:///o/{job}", outputs=outputs
    )
    assert (plan.data_uri, plan.output_uri) == ("file:///d/", "file:///o/{job}")
    assert plan.outputs == outputs
    assert outputs.log_path == tmp_path / "out" / "train.log"


def test_a_command_passes_its_consoles_masker_and_the_plan_keeps_that_one() -> None:
    console = Console(io.StringIO(), io.StringIO(), read_settings(ENV).masker())
    console.add_secrets(ENV.get(name) for name in CONFIG.secrets)
    plan = trusted_plan(CONFIG, CONTEXT, ENV, masker=console.masker)
    assert plan.masker is console.masker
    # the same values a plan built alone masks: one masker, built once
    assert plan.masker.values == trusted_plan(CONFIG, CONTEXT, ENV).masker.values


def test_torchrun_runs_every_node_or_every_rank_here() -> None:
    config = TrainConfig(
        name="t",
        image="i",
        command=("python", "t.py", "--", "--lr", "$(X)"),
        distributed="torchrun",
        workers=3,
        slots_per_worker=2,
    )
    plan = trusted_plan(config, CONTEXT)
    output = ["--tee", "3", "--no-python", "--"]
    command = ["python", "t.py", "--", "--lr", "$(X)"]
    assert plan.torchrun_argv() == [
        *("python", "-m", "torch.distributed.run", "--nnodes", "3", "--nproc-per-node", "2"),
        *("--rdzv-backend", "static", "--rdzv-conf", "timeout=2400", "--master-port", "29500"),
        *output,
        *command,
    ]
    assert plan.torchrun_argv(standalone=True, python="/venv/bin/python", log_dir="/l") == [
        *("/venv/bin/python", "-m", "torch.distributed.run", "--standalone"),
        *("--nproc-per-node", "6", "--tee", "3", "--log-dir", "/l", "--no-python", "--"),
        *command,
    ]


def test_torchrun_waits_for_a_node_as_long_as_ci_runner_lets_it_set_up() -> None:
    """The static rendezvous' timeout: torch's 600 s, or setup_timeout + unschedulable_timeout
    when longer, so a node that sets up late is waited for."""
    config = TrainConfig(
        name="t",
        image="i",
        command=("python", "t.py"),
        distributed="torchrun",
        workers=2,
        kubernetes=KubernetesOptions(setup_timeout=1800, unschedulable_timeout=300),
    )
    argv = trusted_plan(config, CONTEXT).torchrun_argv()
    assert argv[argv.index("--rdzv-conf") + 1] == "timeout=2100"
