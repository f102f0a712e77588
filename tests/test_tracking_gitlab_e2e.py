"""``tracking: gitlab``: ``ci-runner train --local`` in a GitLab job logs its run in the fake
GitLab's MLflow routes (testing/fake_gitlab/mlflow.py) with CI_RUNNER_GITLAB_TOKEN, linked to
the job, and the MR comment links to the experiment; the ranks get no MLflow variable and no
token unless ``tracking.ranks_log`` gives them CI_RUNNER_MLFLOW_TOKEN."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from testing.agent_kubeconfig import JOB_TOKEN, gitlab_kubeconfig
from testing.cli_runs import TRAIN_YAML as COMMAND_TRAIN_YAML
from testing.cli_runs import environ, run_cli
from testing.fake_gitlab.accounts import GITLAB_TOKEN
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.model import User
from testing.fake_gitlab.server import FakeGitLab
from testing.fake_kube.server import FakeKubeServer

GitRepo = Callable[..., tuple[Path, str]]

TRAIN_YAML = (
    COMMAND_TRAIN_YAML.replace("requirements: requirements.txt\n", "").replace(
        "s3://models/{project}/{sha}/{job}/", "file:///unused/"
    )
    + "tracking: gitlab\n"
)
TRAIN_PY = """\
import os
rank = int(os.environ["HOROVOD_RANK"])
for step in range(3):
    print(f"loss {(3 - step) * (rank + 1)} step {step}", flush=True)
if rank == 0:
    for name in ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN"):
        print(name + " " + os.environ.get(name, "none"), flush=True)
"""


@pytest.fixture
def project(gitlab_bot: User, gitlab_fake_project: FakeProject) -> FakeProject:
    """``group/proj``, where the bot (whose token is CI_RUNNER_GITLAB_TOKEN) is a Developer."""
    return gitlab_fake_project


def _ci(server: FakeGitLab, project: FakeProject, sha: str, job_id: int) -> dict[str, str]:
    url = f"{server.url}/{project.path}"
    return {
        "GITLAB_CI": "true",
        "CI_SERVER_URL": server.url,
        "CI_API_V4_URL": f"{server.url}/api/v4",
        "CI_PROJECT_ID": str(project.id),
        "CI_PROJECT_PATH": project.path,
        "CI_PROJECT_URL": url,
        "CI_COMMIT_SHA": sha,
        "CI_COMMIT_REF_NAME": "feature",
        "CI_DEFAULT_BRANCH": "main",
        "CI_PIPELINE_ID": "9",
        "CI_JOB_ID": str(job_id),
        "CI_JOB_NAME": "train-toy",
        "CI_JOB_URL": f"{url}/-/jobs/{job_id}",
        "CI_MERGE_REQUEST_IID": "3",
        "CI_MERGE_REQUEST_PROJECT_ID": str(project.id),
        "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": str(project.id),
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
        "CI_RUNNER_GITLAB_TOKEN": GITLAB_TOKEN,
    }


def _setup(
    git_repo: GitRepo, server: FakeGitLab, project: FakeProject, train_yaml: str = TRAIN_YAML
) -> tuple[Path, str, int]:
    repo, sha = git_repo({"train.yaml": train_yaml, "train.py": TRAIN_PY})
    server.add_commit(project, sha)
    server.add_merge_request(project, 3, sha=sha)
    job = server.add_pipeline(project, "feature", status="running", sha=sha, jobs={"train": {}})
    return repo, sha, job.jobs[0].id


def test_tracking_gitlab_logs_the_run_in_the_projects_model_experiments(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, gitlab_server: FakeGitLab,
    project: FakeProject,
) -> None:  # fmt: skip
    repo, sha, job_id = _setup(git_repo, gitlab_server, project)
    env = {**environ(tmp_path), **_ci(gitlab_server, project, sha, job_id)}

    code, out, err = run_cli(["train", "--local", "--output-dir", "ci"], repo, env)

    assert code == 0, err
    state = gitlab_server.mlflow.of(project.id)
    assert [e.name for e in state.experiments] == ["toy"]
    (run,) = state.experiments[0].runs
    assert (run.name, run.status, run.ci_job_id) == ("train-toy", "FINISHED", str(job_id))
    assert run.end_time is not None and run.end_time >= run.start_time > 0
    assert run.tags["mlflow.source.git.commit"] == sha
    assert (
        run.tags["ci_runner.merge_request_url"]
        == f"{gitlab_server.url}/group/proj/-/merge_requests/3"
    )
    assert run.params["ci_runner.workers"] == "2"
    loss = sorted((m.step, m.value) for m in run.metrics if m.key == "loss")
    assert loss == [(0, 4.5), (1, 3.0), (2, 1.5)]
    assert {m.key for m in run.metrics} == {"loss"}  # per_rank is off
    # All of it came from the log: the ranks had no MLflow variable and no token.
    for name in ("MLFLOW_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN"):
        assert f"[0]<stdout>:{name} none\n" in out
    page = f"{gitlab_server.url}/group/proj/-/ml/experiments/1"
    lines = err.splitlines()
    assert f"[ci-runner] MLflow run: {page}" in lines
    assert f"[ci-runner] MLflow run FINISHED, 3 metric points: {page}" in lines
    note, reply = gitlab_server.notes(project, 3)
    assert f"[MLflow run]({page})" in note.body
    assert reply.body.startswith(f"<!-- ci-runner-result:job-{job_id} -->\n✅ ")
    # Every MLflow request went with the token as MLflow's client sends it.
    sent = [r for r in gitlab_server.requests if "/ml/mlflow/" in r.path]
    assert {r.headers.get("authorization") for r in sent} == {f"Bearer {GITLAB_TOKEN}"}
    assert [(r.method, r.path.rsplit("mlflow/", 1)[1], r.status) for r in sent] == [
        ("GET", "experiments/get-by-name", 404),
        ("POST", "experiments/create", 200),
        ("POST", "runs/create", 200),
        ("POST", "runs/log-batch", 200),
        ("POST", "runs/update", 200),
        ("POST", "runs/log-batch", 200),
    ]


RANK_TOKEN = "glpat-ranks-own-token-8Wd3"
# Rank 0 joins the run with MLflow's own client, as the README's ranks_log tells users to.
JOIN_PY = """\
import os
import mlflow
if os.environ["HOROVOD_RANK"] == "0":
    print("token " + os.environ["MLFLOW_TRACKING_TOKEN"], flush=True)
    with mlflow.start_run():
        mlflow.log_param("batch_size", "32")
print("loss 1 step 0", flush=True)
"""


def test_with_ranks_log_rank_0_logs_into_the_run_with_the_ranks_own_token(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, gitlab_server: FakeGitLab,
    project: FakeProject,
) -> None:  # fmt: skip
    gitlab_server.add_token(RANK_TOKEN, gitlab_server.add_user("ranks"))
    yaml = TRAIN_YAML.replace("tracking: gitlab", "tracking: {server: gitlab, ranks_log: true}")
    repo, sha = git_repo({"train.yaml": yaml, "train.py": JOIN_PY})
    job = gitlab_server.add_pipeline(project, "feature", sha=sha, jobs={"train": {}}).jobs[0]
    env = {**environ(tmp_path), **_ci(gitlab_server, project, sha, job.id),
           "CI_RUNNER_MLFLOW_TOKEN": RANK_TOKEN}  # fmt: skip

    code, out, err = run_cli(["train", "--local", "--output-dir", "ci"], repo, env)

    assert code == 0, err
    (run,) = gitlab_server.mlflow.of(project.id).experiments[0].runs
    assert run.status == "FINISHED"
    assert run.params["batch_size"] == "32"
    assert "[0]<stdout>:token [MASKED]\n" in out
    sent = [r for r in gitlab_server.requests if "/ml/mlflow/" in r.path]
    by_token: dict[str | None, set[str]] = {}
    for r in sent:
        by_token.setdefault(r.headers.get("authorization"), set()).add(r.path.rsplit("/", 1)[1])
    assert "log-parameter" in by_token[f"Bearer {RANK_TOKEN}"]
    assert "log-parameter" not in by_token[f"Bearer {GITLAB_TOKEN}"]
    assert "create" in by_token[f"Bearer {GITLAB_TOKEN}"]
    assert {r.status for r in sent} <= {200, 404}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {},
            "the ranks log to GitLab's MLflow API themselves and need a token of their own, but "
            "CI_RUNNER_MLFLOW_TOKEN is not set; fix: store a project access token made for the "
            "ranks (the api scope and the Developer role) in the masked CI/CD variable "
            "CI_RUNNER_MLFLOW_TOKEN, not the comment token CI_RUNNER_GITLAB_TOKEN, or remove "
            "ranks_log",
        ),
        (
            {"CI_RUNNER_MLFLOW_TOKEN": GITLAB_TOKEN},
            "CI_RUNNER_MLFLOW_TOKEN holds the same token as CI_RUNNER_GITLAB_TOKEN, which "
            "ci-runner comments with, and every rank and every package it imports would hold "
            "it; fix: store a token made for the ranks alone in the masked CI/CD variable "
            "CI_RUNNER_MLFLOW_TOKEN, or remove ranks_log",
        ),
    ],
)
def test_ranks_log_without_a_token_of_the_ranks_own_starts_nothing(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, gitlab_server: FakeGitLab,
    project: FakeProject, extra: dict[str, str], message: str,
) -> None:  # fmt: skip
    yaml = TRAIN_YAML.replace("tracking: gitlab", "tracking:\n  server: gitlab\n  ranks_log: true")
    repo, sha = git_repo({"train.yaml": yaml, "train.py": TRAIN_PY})
    gitlab_server.add_merge_request(project, 3, sha=sha)
    env = {**environ(tmp_path), **_ci(gitlab_server, project, sha, 1), **extra}
    line = yaml.splitlines().index("  ranks_log: true") + 1

    code, out, err = run_cli(["train", "--local", "--output-dir", "ci"], repo, env)

    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"ci-runner: error: train.yaml:{line}: tracking.ranks_log: {message}"
    ]
    assert [r.path for r in gitlab_server.requests] == []  # no run, no comment
    assert not (repo / "ci" / "train.log").exists()


@pytest.mark.parametrize(
    ("role", "known_job", "refusal"),
    [
        (
            "reporter",
            True,
            "cannot create the experiment: {uri} rejected the access token (401 Unauthorized); "
            "fix: give the token in CI_RUNNER_GITLAB_TOKEN the api scope and at least the "
            "Developer role in the project",
        ),
        (
            "developer",
            False,  # gitlab.CI_JOB_ID must name a job GitLab knows
            "cannot create the run: {uri} answered 500 Internal Server Error; fix: retry the "
            "job once the tracking server answers again",
        ),
    ],
)
def test_a_refusing_gitlab_leaves_the_run_untracked_with_one_warning(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, gitlab_server: FakeGitLab,
    project: FakeProject, role: str, known_job: bool, refusal: str,
) -> None:  # fmt: skip
    (bot,) = gitlab_server.users()
    gitlab_server.mlflow.set_role(project.id, bot.id, role)
    repo, sha, job_id = _setup(git_repo, gitlab_server, project)
    env = {**environ(tmp_path), **_ci(gitlab_server, project, sha, job_id + (not known_job))}
    uri = f"{gitlab_server.url}/api/v4/projects/{project.id}/ml/mlflow"

    code, _, err = run_cli(["train", "--local", "--output-dir", "ci"], repo, env)

    assert code == 0, err
    assert [line for line in err.splitlines() if "MLflow" in line] == [
        "[ci-runner] warning: not tracking this run in MLflow: "
        + refusal.format(uri=f"GitLab's MLflow API at {uri}")
    ]
    runs = [r for e in gitlab_server.mlflow.of(project.id).experiments for r in e.runs]
    assert [r.status for r in runs] == ([] if known_job else ["RUNNING"])  # as GitLab keeps it


def test_each_default_branch_run_is_the_next_semantic_version_of_the_model(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, gitlab_server: FakeGitLab,
    project: FakeProject,
) -> None:  # fmt: skip
    # named like the experiment: GitLab keeps the model's runs in "[model]toy"
    yaml = TRAIN_YAML.replace(
        "tracking: gitlab", "tracking: {server: gitlab, experiment: toy, model: toy}"
    ).replace("file:///unused/", "s3://models/{sha}/")
    repo, sha = git_repo({"train.yaml": yaml, "train.py": TRAIN_PY})
    job = gitlab_server.add_pipeline(project, "main", sha=sha, jobs={"train": {}}).jobs[0]
    env = {**environ(tmp_path), **_ci(gitlab_server, project, sha, job.id)}
    env["CI_COMMIT_REF_NAME"] = "main"
    for name in [n for n in env if n.startswith("CI_MERGE_REQUEST_")]:
        del env[name]

    lines = []
    for _ in range(2):
        code, _, err = run_cli(["train", "--local", "--output-dir", "ci"], repo, env)
        assert code == 0, err
        lines += [line for line in err.splitlines() if "model toy " in line]

    assert lines == [
        "[ci-runner] model toy version 1.0.0 registered",
        "[ci-runner] model toy version 1.0.1 registered",
    ]
    state = gitlab_server.mlflow.of(project.id)
    (model,) = state.models
    assert [(v["version"], v["tags"]) for v in model.versions] == [
        ("1.0.0", {"ci_runner.outputs": f"s3://models/{sha}/"}),
        ("1.0.1", {"ci_runner.outputs": f"s3://models/{sha}/"}),
    ]
    assert [e.name for e in state.experiments] == ["toy", "[model]toy"]


def test_a_job_that_fails_before_training_ends_its_run_failed(
    git_repo: GitRepo, tmp_path: Path, gitlab_server: FakeGitLab, project: FakeProject
) -> None:
    # On a cluster the outputs are S3's (file:// is for --local).
    on_s3 = TRAIN_YAML.replace("file:///unused/", "s3://models/unused/")
    repo, sha, job_id = _setup(git_repo, gitlab_server, project, on_s3)
    env = {**environ(tmp_path), **_ci(gitlab_server, project, sha, job_id)}

    code, _, err = run_cli(["train", "--output-dir", "ci"], repo, env)  # no cluster here

    assert code == 1
    assert err.splitlines()[-1].startswith("ci-runner: error: no Kubernetes cluster to run on")
    (run,) = gitlab_server.mlflow.of(project.id).experiments[0].runs
    assert run.status == "FAILED"


def test_cancel_ends_the_run_train_started_killed_with_the_saved_metrics(
    git_repo: GitRepo, tmp_path: Path, gitlab_server: FakeGitLab, project: FakeProject
) -> None:
    repo, sha, job_id = _setup(git_repo, gitlab_server, project)
    env = {**environ(tmp_path), **_ci(gitlab_server, project, sha, job_id)}
    state = gitlab_server.mlflow.of(project.id)
    (bot,) = gitlab_server.users()
    # What `train` left behind when GitLab killed it: the run, its ids and the saved log.
    _, made = gitlab_server.mlflow.route(
        "POST", project.id, bot.id, ["api", "2.0", "mlflow", "experiments", "create"], {},
        b'{"name": "toy"}',
    )  # fmt: skip
    body = json.dumps({"experiment_id": made["experiment_id"], "run_name": "train-toy"})
    _, run = gitlab_server.mlflow.route(
        "POST", project.id, bot.id, ["api", "2.0", "mlflow", "runs", "create"], {}, body.encode()
    )
    run_id = run["run"]["info"]["run_id"]
    out = repo / "ci"
    out.mkdir()
    (out / "mlflow-run.json").write_text(json.dumps({"run_id": run_id, "experiment_id": "1",
                                                     "url": "https://page"}))  # fmt: skip
    (out / "train.log").write_text("[0]<stdout>:loss 3 step 0\n[1]<stdout>:loss 5 step 0\n")

    # The agent's cluster: the in-process fake API server, no controllers (cancel finds no
    # MPIJob to delete here; only the run's end is under test).
    with FakeKubeServer(token=f"ci:12:{JOB_TOKEN}") as kas:
        env["KUBECONFIG"] = str(gitlab_kubeconfig(tmp_path, kas.url))
        args = ["cancel", "--output-dir", "ci", "--kube-context", "ml/k8s-agents:gpu-cluster"]
        code, _, err = run_cli(args, repo, env)

    assert code == 0, err
    (tracked,) = state.experiments[0].runs
    assert tracked.status == "KILLED"
    assert [(m.key, m.step, m.value) for m in tracked.metrics] == [("loss", 0, 4.0)]
    assert "[ci-runner] MLflow run KILLED, 1 metric point: https://page" in err.splitlines()
