"""A tracked plan: every rank joins the MLflow run, the token only through the job's Secret."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ci_runner.backends.local.backend import rank_environment
from ci_runner.plan.run_plan import build_plan
from ci_runner.plan.tracking import RankTracking, with_tracking
from ci_runner.render import manifest_yaml, render_mpijob
from testing.plan_cases import CONFIG, CONTEXT, ENV, pod_environment

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
    plan = with_tracking(build_plan(config, CONTEXT, env, read_secrets=True), TRACKING)
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
    local = rank_environment(plan, env, tmp_path, [])
    assert (local["MLFLOW_RUN_ID"], local["MLFLOW_TRACKING_TOKEN"]) == ("0a1b2c3d", TOKEN)


def test_an_untracked_plan_sets_no_mlflow_variable() -> None:
    plan = build_plan(CONFIG, CONTEXT, ENV, read_secrets=True)
    launcher = render_mpijob(plan)["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    pod = pod_environment(launcher["containers"][0], dict(plan.secret.values()))
    assert [k for k in pod if k.startswith("MLFLOW_")] == []
