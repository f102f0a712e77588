"""A tracked plan: by default no rank gets an MLflow variable or token; with
``tracking.ranks_log`` every rank joins the MLflow run, its token only through the job's Secret."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ci_runner.backends.local.backend import rank_environment
from ci_runner.clock import ManualClock
from ci_runner.config.types import TrackingSpec, TrainConfig
from ci_runner.gitlab.transport import BoundedSession, Budget
from ci_runner.kube_yaml import manifest_yaml
from ci_runner.plan.run_plan import RunPlan, with_tracking
from ci_runner.plan.tracking import RankTracking
from ci_runner.render import render_mpijob
from ci_runner.settings import ProcessEnvironment, read_settings
from ci_runner.tracking.client import MlflowApi
from ci_runner.tracking.stage import TrackedRun, ranks_join
from ci_runner.tracking.target import Target, rank_sign_in
from testing.plan_cases import CONFIG, CONTEXT, ENV, pod_environment, trusted_plan

TOKEN = "mlflow-token-CANARY-51"
TRACKING = RankTracking(
    uri="https://mlflow.example.com",
    run_id="0a1b2c3d",
    experiment_id="7",
    credentials={"MLFLOW_TRACKING_TOKEN": TOKEN},
)


def test_every_rank_joins_the_run_and_the_token_stays_in_the_secret(tmp_path: Path) -> None:
    config = replace(
        CONFIG,
        env=(*CONFIG.env, ("MLFLOW_RUN_ID", "mine")),
        secrets=(*CONFIG.secrets, "MLFLOW_TRACKING_TOKEN"),
    )
    env = {**ENV, "MLFLOW_TRACKING_TOKEN": "user-own-token"}
    plan = with_tracking(trusted_plan(config, CONTEXT, env, read_secrets=True), TRACKING)
    manifest = render_mpijob(plan)
    secret = dict(plan.secret.values())
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    pod = pod_environment(launcher["containers"][0], secret)

    assert {k: v for k, v in pod.items() if k.startswith("MLFLOW_")} == {
        "MLFLOW_TRACKING_URI": "https://mlflow.example.com",
        "MLFLOW_RUN_ID": "0a1b2c3d",
        "MLFLOW_EXPERIMENT_ID": "7",
        "MLFLOW_TRACKING_TOKEN": TOKEN,
    }
    assert plan.secret.keys == ("GIT_USERNAME", "GIT_PASSWORD", "WANDB_API_KEY",
                                "MLFLOW_TRACKING_TOKEN")  # fmt: skip
    assert TOKEN not in manifest_yaml(manifest)
    assert plan.masker.mask(f"x {TOKEN} y") == "x [MASKED] y"
    local = rank_environment(plan, ProcessEnvironment(env), tmp_path, [])
    assert (local["MLFLOW_RUN_ID"], local["MLFLOW_TRACKING_TOKEN"]) == ("0a1b2c3d", TOKEN)


def test_a_secret_ci_runner_sets_for_the_ranks_gives_way_in_the_secret_as_in_the_pods() -> None:
    """One rule (plan.tracking.give_way) for the Secret's keys and the ranks' secret variables: a
    train.yaml secret MLflow's run sets is in neither, even when the run's credentials do not
    include it."""
    config = replace(CONFIG, secrets=(*CONFIG.secrets, "MLFLOW_TRACKING_PASSWORD"))
    env = {**ENV, "MLFLOW_TRACKING_PASSWORD": "user-own-password"}
    plan = with_tracking(trusted_plan(config, CONTEXT, env, read_secrets=True), TRACKING)
    expected = ("WANDB_API_KEY", "MLFLOW_TRACKING_TOKEN")
    assert plan.secret.keys == ("GIT_USERNAME", "GIT_PASSWORD", *expected)
    assert tuple(plan.secret.values()) == plan.secret.keys
    assert plan.secret_names == expected


def test_an_untracked_plan_sets_no_mlflow_variable() -> None:
    plan = trusted_plan(CONFIG, CONTEXT, ENV, read_secrets=True)
    launcher = render_mpijob(plan)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    pod = pod_environment(launcher["containers"][0], dict(plan.secret.values()))
    assert [k for k in pod if k.startswith("MLFLOW_")] == []


# ---------------------------------------------------------------------------------------------
# What `train` does with the run it created (ci_runner.tracking.stage.ranks_join).

COMMENT_TOKEN = "glpat-comment-CANARY-token"
RANK_TOKEN = "glpat-ranks-CANARY-token"
GITLAB = Target("gitlab", "https://g.example.com/api/v4/projects/1/ml/mlflow", COMMENT_TOKEN)
TRACKED_ENV = {
    **ENV,
    "CI_RUNNER_GITLAB_TOKEN": COMMENT_TOKEN,
    "CI_RUNNER_MLFLOW_TOKEN": RANK_TOKEN,
    "MLFLOW_TRACKING_URI": "https://m.example.com",
    "MLFLOW_TRACKING_TOKEN": "mlflow-CANARY-token",
}


def joined(config: TrainConfig) -> RunPlan:
    """The plan ``train`` runs once it created the run at GitLab."""
    plan = trusted_plan(config, CONTEXT, TRACKED_ENV, read_secrets=True)
    api = MlflowApi(GITLAB, BoundedSession(Budget(ManualClock(), 1)))
    run = TrackedRun(
        api,
        "7",
        "0a1b",
        "https://page",
        1,
        rank_sign_in(config, GITLAB, read_settings(TRACKED_ENV)),
    )
    return ranks_join(plan, run)


def mlflow_of(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("MLFLOW_") or "TOKEN" in k}


def test_by_default_no_rank_and_no_secret_gets_an_mlflow_variable_or_a_token(
    tmp_path: Path,
) -> None:
    plan = joined(replace(CONFIG, tracking=TrackingSpec("gitlab")))
    secret = dict(plan.secret.values())
    manifest = render_mpijob(plan)
    specs = manifest["spec"]["mpiReplicaSpecs"]
    for spec in (specs["Launcher"], specs["Worker"]):
        for container in spec["template"]["spec"]["containers"]:
            assert mlflow_of(pod_environment(container, secret)) == {}
    assert plan.secret.keys == ("GIT_USERNAME", "GIT_PASSWORD", "WANDB_API_KEY")
    assert plan.tracking is None
    # On this machine too: ci-runner's own MLflow variables and both tokens stay out.
    local = rank_environment(plan, ProcessEnvironment(TRACKED_ENV), tmp_path, [])
    assert mlflow_of(local) == {}


def test_with_ranks_log_every_rank_joins_with_the_ranks_token_alone(tmp_path: Path) -> None:
    plan = joined(replace(CONFIG, tracking=TrackingSpec("gitlab", ranks_log=True)))
    secret = dict(plan.secret.values())
    launcher = render_mpijob(plan)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    expected = {
        "MLFLOW_TRACKING_URI": GITLAB.uri,
        "MLFLOW_RUN_ID": "0a1b",
        "MLFLOW_EXPERIMENT_ID": "7",
        "MLFLOW_TRACKING_TOKEN": RANK_TOKEN,
    }
    assert mlflow_of(pod_environment(launcher["containers"][0], secret)) == expected
    assert COMMENT_TOKEN not in secret.values()
    assert (
        mlflow_of(rank_environment(plan, ProcessEnvironment(TRACKED_ENV), tmp_path, [])) == expected
    )
