"""``ci-runner train --local`` tracked in a real MLflow server (testing/mlflow_server.py): the
experiment, the run and its status, every step of every metric, tags, params, all from the log
while the ranks hold no MLflow variable and no token; with ``tracking.ranks_log`` rank 0 logs to
the run itself with the ranks' own token; with the server down, the job's result is unchanged
and one warning names MLflow."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from testing.cli_runs import environ, run_cli
from testing.mlflow_server import BearerGate, MlflowServer
from testing.ports import free_port

# A real MLflow server takes 10-20 s to start: with the end-to-end tests, not `make unit`.
pytestmark = pytest.mark.slow
GitRepo = Callable[..., tuple[Path, str]]

TRAIN_YAML = """\
name: {name}
image: horovod/horovod:0.28.1
command: python train.py
workers: 2
env: {{EPOCHS: 3}}
outputs: file:///unused/
metrics:
  loss: {{pattern: 'loss (?P<value>[0-9.]+) step (?P<step>\\d+)', goal: min}}
tracking: {{per_rank: true}}
"""
TRAIN_PY = """\
import os
rank = int(os.environ["HOROVOD_RANK"])
for step in range(3):
    print(f"loss {(3 - step) * (rank + 1)} step {step}", flush=True)
if rank == 0:
    print("run " + os.environ.get("MLFLOW_RUN_ID", "none"), flush=True)
    print("experiment " + os.environ.get("MLFLOW_EXPERIMENT_ID", "none"), flush=True)
    print("uri " + os.environ.get("MLFLOW_TRACKING_URI", "none"), flush=True)
    print("token " + os.environ.get("MLFLOW_TRACKING_TOKEN", "none"), flush=True)
raise SystemExit(int(os.environ.get("EXIT", "0")))
"""
# Rank 0 joins the run with MLflow's own client, as the README tells users to.
JOIN_PY = """\
import os
import mlflow
if os.environ["HOROVOD_RANK"] == "0":
    with mlflow.start_run():
        mlflow.log_metric("from_rank_0", 7.0, step=1)
        mlflow.log_param("batch_size", "32")
print("loss 1 step 0", flush=True)
"""
# The server's tokens (testing.mlflow_server.BearerGate): ci-runner's own, and the ranks'.
CI_RUNNER_TOKEN = "mlflow-token-of-ci-runner-3Fq8"
RANK_TOKEN = "mlflow-token-of-the-ranks-7Kp2"
# Rank 0 logs params named like train.yaml's fields, as training code does (MLflow refuses to
# change a param's value once logged: a name of ci-runner's must not be one of these).
OWN_PARAMS_PY = """\
import os
import mlflow
if os.environ["HOROVOD_RANK"] == "0":
    with mlflow.start_run():
        mlflow.log_params({"workers": "4 data loaders", "data": "s3://mine/", "image": "cats"})
print("loss 1 step 0", flush=True)
"""
SHA_RE = r"[0-9a-f]{40}"
CI = {
    "GITLAB_CI": "true",
    "CI_JOB_ID": "4242",
    "CI_JOB_NAME": "train-toy",
    "CI_JOB_URL": "https://gitlab.example.com/g/p/-/jobs/4242",
    "CI_PROJECT_PATH": "g/p",
    "CI_PROJECT_URL": "https://gitlab.example.com/g/p",
    "CI_PIPELINE_ID": "77",
    "CI_COMMIT_REF_NAME": "feature",
    "CI_REPOSITORY_URL": "https://gitlab-ci-token:secret-job-token@gitlab.example.com/g/p.git",
}


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    with MlflowServer(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


def _train(
    git_repo: GitRepo, tmp_path: Path, name: str, extra: dict[str, str], script: str = TRAIN_PY
) -> tuple[int, str, str, str]:
    repo, sha = git_repo({"train.yaml": TRAIN_YAML.format(name=name), "train.py": script})
    code, out, err = _run(repo, sha, tmp_path, extra)
    return code, out, err, sha


def _run(repo: Path, sha: str, tmp_path: Path, extra: dict[str, str]) -> tuple[int, str, str]:
    env = {**environ(tmp_path), **extra}
    if "GITLAB_CI" in env:
        env["CI_COMMIT_SHA"] = sha
    return run_cli(["train", "--local", "--output-dir", "ci"], repo, env)


def _history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def _only_run(client: Any, experiment: str) -> Any:
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id])
    assert len(runs) == 1
    return runs[0]


def test_a_ci_job_is_one_finished_run_with_every_step(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, mlflow_server: MlflowServer
) -> None:
    with BearerGate(mlflow_server.url, {CI_RUNNER_TOKEN}) as gate:
        env = {**CI, "MLFLOW_TRACKING_URI": gate.url, "MLFLOW_TRACKING_TOKEN": CI_RUNNER_TOKEN,
               "CI_RUNNER_MLFLOW_TOKEN": RANK_TOKEN}  # fmt: skip
        code, out, err, sha = _train(git_repo, tmp_path, "tracked", env)

    assert code == 0, err
    client = mlflow_server.client()
    run = _only_run(client, "tracked")
    info, data = run.info, run.data
    url = f"{gate.url}/#/experiments/{info.experiment_id}/runs/{info.run_id}"
    assert (info.status, info.run_name) == ("FINISHED", "train-toy")
    # Everything below came from the log: the ranks had no MLflow variable and no token.
    for name in ("run", "experiment", "uri", "token"):
        assert f"[0]<stdout>:{name} none\n" in out
    assert {r.token for r in gate.requests} == {CI_RUNNER_TOKEN}
    assert 401 not in {r.status for r in gate.requests}
    assert _history(client, info.run_id, "loss") == [(0, 4.5), (1, 3.0), (2, 1.5)]
    assert _history(client, info.run_id, "loss/rank_0") == [(0, 3.0), (1, 2.0), (2, 1.0)]
    assert _history(client, info.run_id, "loss/rank_1") == [(0, 6.0), (1, 4.0), (2, 2.0)]
    mpijob = data.tags["ci_runner.mpijob"]
    assert re.fullmatch(r"tracked-[0-9a-f]{8}-4242", mpijob)
    assert {k: v for k, v in data.tags.items() if not k.startswith("mlflow.user")} == {
        "mlflow.runName": "train-toy",
        "mlflow.source.git.commit": sha,
        "mlflow.source.name": "https://gitlab.example.com/g/p.git",
        "mlflow.source.type": "JOB",
        "mlflow.source.git.branch": "feature",
        "mlflow.source.git.repoURL": "https://gitlab.example.com/g/p.git",
        # no gitlab.CI_JOB_ID: only the GitLab the job runs on knows the job
        "ci_runner.job_url": "https://gitlab.example.com/g/p/-/jobs/4242",
        "ci_runner.pipeline_url": "https://gitlab.example.com/g/p/-/pipelines/77",
        "ci_runner.branch_url": "https://gitlab.example.com/g/p/-/tree/feature",
        "ci_runner.config": "train.yaml",
        "ci_runner.mpijob": mpijob,
        "ci_runner.outputs": "file:///unused/",  # nothing there: no output files listed
    }
    assert data.params == {
        "ci_runner.workers": "2",
        "ci_runner.slots_per_worker": "1",
        "ci_runner.ranks": "2",
        "ci_runner.gpus_per_worker": "0",
        "ci_runner.image": "horovod/horovod:0.28.1",
        "ci_runner.command": "python train.py",
        "ci_runner.outputs": "file:///unused/",
        "ci_runner.env.EPOCHS": "3",
    }
    lines = err.splitlines()
    assert f"[ci-runner] MLflow run: {url}" in lines
    assert f"[ci-runner] MLflow run FINISHED, 9 metric points: {url}" in lines
    assert not [line for line in lines if "warning" in line]
    annotations = json.loads((tmp_path / "repo" / "ci" / "annotations.json").read_text())
    assert annotations == {"ci-runner": [{"external_link": {"label": "MLflow run", "url": url}}]}
    assert f"[MLflow run]({url})" in (tmp_path / "repo" / "ci" / "report.md").read_text()


def test_a_failed_training_is_a_failed_run_and_exits_as_before(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, mlflow_server: MlflowServer
) -> None:
    code, _, err, _ = _train(
        git_repo, tmp_path, "failing", {"MLFLOW_TRACKING_URI": mlflow_server.url, "EXIT": "3"}
    )

    assert code == 1
    run = _only_run(mlflow_server.client(), "failing")
    assert run.info.status == "FAILED"
    assert run.data.tags["mlflow.source.type"] == "LOCAL"
    assert "[ci-runner] reason: horovodrun exited with code 3" in err.splitlines()


def test_with_ranks_log_rank_0_logs_into_the_same_run_with_its_own_token(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, mlflow_server: MlflowServer
) -> None:
    yaml = TRAIN_YAML.format(name="joined").replace("per_rank: true", "ranks_log: true")
    repo, sha = git_repo({"train.yaml": yaml, "train.py": JOIN_PY})
    with BearerGate(mlflow_server.url, {CI_RUNNER_TOKEN, RANK_TOKEN}) as gate:
        env = {"MLFLOW_TRACKING_URI": gate.url, "MLFLOW_TRACKING_TOKEN": CI_RUNNER_TOKEN,
               "CI_RUNNER_MLFLOW_TOKEN": RANK_TOKEN}  # fmt: skip
        code, _, err = _run(repo, sha, tmp_path, env)

    assert code == 0, err
    client = mlflow_server.client()
    run = _only_run(client, "joined")
    assert run.info.status == "FINISHED"
    assert _history(client, run.info.run_id, "from_rank_0") == [(1, 7.0)]
    assert _history(client, run.info.run_id, "loss") == [(0, 1.0)]
    assert run.data.params["batch_size"] == "32"
    # Rank 0 logged with the ranks' token, ci-runner with its own, and nothing was refused.
    by_path = gate.tokens_by_path()
    assert by_path["runs/log-parameter"] == by_path["runs/log-metric"] == {RANK_TOKEN}
    assert by_path["runs/create"] == {CI_RUNNER_TOKEN}
    assert 401 not in {r.status for r in gate.requests}


def test_a_rank_logs_params_named_like_ours_and_the_run_ends_fine(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, mlflow_server: MlflowServer
) -> None:
    yaml = TRAIN_YAML.format(name="own-params").replace("per_rank: true", "ranks_log: true")
    repo, sha = git_repo({"train.yaml": yaml, "train.py": OWN_PARAMS_PY})
    with BearerGate(mlflow_server.url, {CI_RUNNER_TOKEN, RANK_TOKEN}) as gate:
        env = {**CI, "MLFLOW_TRACKING_URI": gate.url, "MLFLOW_TRACKING_TOKEN": CI_RUNNER_TOKEN,
               "CI_RUNNER_MLFLOW_TOKEN": RANK_TOKEN}  # fmt: skip
        code, _, err = _run(repo, sha, tmp_path, env)

    assert code == 0, err
    assert gate.tokens_by_path()["runs/log-batch"] >= {RANK_TOKEN}  # rank 0's log_params
    run = _only_run(mlflow_server.client(), "own-params")
    assert run.info.status == "FINISHED"
    params = run.data.params
    assert {k: params[k] for k in ("workers", "data", "image")} == {
        "workers": "4 data loaders",
        "data": "s3://mine/",
        "image": "cats",
    }
    assert (params["ci_runner.workers"], params["ci_runner.image"]) == (
        "2",
        "horovod/horovod:0.28.1",
    )
    assert not [line for line in err.splitlines() if "warning" in line]


def test_with_the_server_down_the_job_ends_as_it_would_have_with_one_warning(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    repo, sha = git_repo({"train.yaml": TRAIN_YAML.format(name="down"), "train.py": TRAIN_PY})
    untracked = _run(repo, sha, tmp_path, {})
    started = time.monotonic()
    tracked = _run(repo, sha, tmp_path, {"MLFLOW_TRACKING_URI": down})

    assert time.monotonic() - started < 30
    assert tracked[0] == untracked[0] == 0
    # The ranks saw the same: no MLflow variable either way.
    # (each rank's lines in their order: the fake horovodrun's ranks interleave as they run)
    assert _by_rank(tracked[1]) == _by_rank(untracked[1])
    only_tracked = [line for line in tracked[2].splitlines() if "MLflow" in line]
    assert only_tracked == [
        "[ci-runner] warning: not tracking this run in MLflow: cannot find the experiment: "
        f"MLflow at {down} did not answer (ConnectionError, after retries); fix: check "
        "MLFLOW_TRACKING_URI and the runner's network, then retry the job once the tracking "
        "server answers again"
    ]
    assert not [line for line in untracked[2].splitlines() if "MLflow" in line]
    assert not (repo / "ci" / "annotations.json").exists()


def test_on_the_default_branch_a_model_version_points_at_the_outputs(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, mlflow_server: MlflowServer
) -> None:
    yaml = (
        TRAIN_YAML.format(name="registered")
        .replace("tracking: {per_rank: true}", "tracking: {model: registered-model}")
        .replace("file:///unused/", "s3://models/{sha}/")
    )
    repo, sha = git_repo({"train.yaml": yaml, "train.py": TRAIN_PY})
    env = {
        **CI,
        "CI_COMMIT_REF_NAME": "main",
        "CI_DEFAULT_BRANCH": "main",
        "MLFLOW_TRACKING_URI": mlflow_server.url,
    }

    code, _, err = _run(repo, sha, tmp_path, env)

    assert code == 0, err
    client = mlflow_server.client()
    run = _only_run(client, "registered")
    (version,) = client.search_model_versions("name='registered-model'")
    outputs = f"s3://models/{sha}/"
    assert (version.version, version.source, version.run_id) == ("1", outputs, run.info.run_id)
    assert version.tags == {"ci_runner.outputs": outputs}
    assert version.description == (
        f"Outputs of commit {sha} at {outputs} (MLflow run {run.info.run_id}, ci-runner)"
    )
    assert "[ci-runner] model registered-model version 1 registered" in err.splitlines()


def _by_rank(stdout: str) -> list[str]:
    """The lines of ``stdout``, each rank's (``[N]<stdout>:``) together, in their own order."""
    return sorted(stdout.splitlines(), key=lambda line: line.split(">", 1)[0])
