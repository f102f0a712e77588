"""``ci-runner validate`` and ``render`` of a train.yaml with ``distributed: torchrun``: the
Indexed Job, its Service, its ConfigMap and its Secret; a refusal in the same words as any."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from ci_runner.config.schema import load_config
from ci_runner.context import CIContext
from ci_runner.render import objects_yaml
from ci_runner.render_job import render_objects
from testing.cli_runs import TRAIN_YAML, environ, run_cli
from testing.git import run_git
from testing.plan_cases import trusted_plan

ORIGIN = "https://gitlab.example.com/group/demo.git"
TORCHRUN_YAML = TRAIN_YAML.replace("workers: 2\n", "distributed: torchrun\nworkers: 2\n") + (
    "slots_per_worker: 4\n"
)


def _project(git_repo: Callable[[dict[str, str]], tuple[Path, str]], text: str) -> tuple[Path, str]:
    repo, sha = git_repo({"train.yaml": text, "requirements.txt": "numpy\n"})
    run_git(["remote", "add", "origin", ORIGIN], repo)
    return repo, sha


def test_validate_names_the_job_its_service_and_the_nodes(
    git_repo: Callable[[dict[str, str]], tuple[Path, str]], tmp_path: Path
) -> None:
    repo, sha = _project(git_repo, TORCHRUN_YAML)
    code, out, err = run_cli(["validate"], repo, environ(tmp_path))
    job = out.split("Indexed Job ")[1].split(" ")[0]
    assert (code, err) == (0, "")
    assert out == (
        f"[ci-runner] train.yaml at {sha[:8]} is valid: Indexed Job {job} with Service {job}, "
        "2 nodes x 4 processes = 8 ranks\n"
    )
    assert job.startswith(f"toy-{sha[:8]}-l")


def test_render_prints_the_job_its_service_configmap_and_secret(
    git_repo: Callable[[dict[str, str]], tuple[Path, str]], tmp_path: Path
) -> None:
    repo, sha = _project(git_repo, TORCHRUN_YAML)
    env = {**environ(tmp_path), "GITLAB_CI": "true", "CI_COMMIT_SHA": sha, "CI_JOB_ID": "901"}
    env |= {"CI_PROJECT_PATH": "group/demo", "CI_COMMIT_REF_NAME": "main"}
    code, out, err = run_cli(["render"], repo, env)
    assert code == 0
    context = CIContext(
        sha=sha, project_path="group/demo", job_id="901", ref_name="main", repo_url=ORIGIN
    )
    plan = trusted_plan(load_config(TORCHRUN_YAML), context)
    assert out == objects_yaml(render_objects(plan))
    assert [o["kind"] for o in yaml.safe_load_all(out)] == ["Job", "Service", "ConfigMap", "Secret"]
    assert err == (
        f"[ci-runner] the Indexed Job reads Secret toy-{sha[:8]}-901-secrets (keys GIT_USERNAME, "
        "GIT_PASSWORD); `ci-runner train` creates it with the values masked here\n"
    )


def test_validate_refuses_what_torchrun_cannot_run(
    git_repo: Callable[[dict[str, str]], tuple[Path, str]], tmp_path: Path
) -> None:
    repo, _ = _project(git_repo, TORCHRUN_YAML + "env: {MASTER_PORT: 1234}\n")
    code, out, err = run_cli(["validate"], repo, environ(tmp_path))
    assert (code, out) == (1, "")
    assert "train.yaml:11: env.MASTER_PORT: MASTER_PORT is set by torchrun for every rank" in err
