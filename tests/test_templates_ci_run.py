"""The component's train job executed by gitlab-ci-local with the shell executor, `ci-runner` on
PATH, against the fake GitLab and the scripted cluster (the real control plane) of
testing/mr_pipeline.py: the job trains,
comments on its merge request, and on failure runs `after_script` (which cancels nothing: only a
cancelled job deletes its MPIJob there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testing.ci_log import CiLog
from testing.git import run_git
from testing.gitlab_ci_local import gitlab_ci_local
from testing.mr_pipeline import LOG, Pipeline, upload_model
from testing.paths import REPO_ROOT
from testing.scripted_cluster.scenarios import JobScenario

pytestmark = [pytest.mark.slow, pytest.mark.control_plane]
START_WAIT = 120.0  # real seconds for gitlab-ci-local to start the job (never reached when green)
BIN = Path(sys.executable).parent
# gitlab-ci-local sets these itself; the job must see the pipeline's.
PREDEFINED = [
    "CI_SERVER_URL", "CI_PROJECT_ID", "CI_PROJECT_PATH", "CI_PROJECT_URL", "CI_REPOSITORY_URL",
    "CI_COMMIT_SHA", "CI_COMMIT_REF_NAME", "CI_DEFAULT_BRANCH", "CI_PIPELINE_ID",
    "CI_PIPELINE_SOURCE", "CI_JOB_ID", "CI_JOB_NAME", "CI_JOB_URL", "CI_JOB_TOKEN",
    "CI_MERGE_REQUEST_IID", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME", "CI_MERGE_REQUEST_PROJECT_ID",
    "CI_MERGE_REQUEST_SOURCE_PROJECT_ID", "CI", "GITLAB_CI",
]  # fmt: skip


def start_job(pipe: Pipeline) -> tuple[subprocess.Popen[str], CiLog]:
    """The repository with a .gitlab-ci.yml that includes the job as the README says for a copy
    (ci/train.yml, ``include: local:``), run as an MR pipeline by gitlab-ci-local."""
    repo = pipe.repo
    (repo / "ci").mkdir()
    shutil.copy(REPO_ROOT / "templates" / "project" / "train.yml", repo / "ci" / "train.yml")
    ci = {
        "include": [
            {
                "local": "ci/train.yml",
                "inputs": {"image": "registry.example.com/ci-runner:0.1.0"},
            }
        ]
    }
    (repo / ".gitlab-ci.yml").write_text(yaml.safe_dump(ci))
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "CI"], repo)
    args = [*gitlab_ci_local(), "--force-shell-executor", "train"]
    for name, value in pipe.env.items():
        # CI_JOB_STATUS is the runner's to set: "failed" in a failed job's after_script.
        if name not in ("PATH", "HOME", "PYTHONPATH", "CI_JOB_STATUS"):
            args += ["--variable", f"{name}={value}"]
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": pipe.env["HOME"],
        "PYTHONPATH": str(REPO_ROOT),
        "GCL_IGNORE_PREDEFINED_VARS": ",".join(PREDEFINED),
    }
    process = subprocess.Popen(
        args, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    return process, CiLog.reading(process.stdout, prefix="train > ", timeout=120)


def run_to_the_launcher(pipe: Pipeline) -> tuple[subprocess.Popen[str], CiLog, JobScenario]:
    process, log = start_job(pipe)
    job = pipe.submitted_job(log, timeout=START_WAIT)  # gitlab-ci-local takes seconds to start
    log.wait_for(job.submitted)
    job.to_the_launcher(log, *LOG)
    return process, log, job


def test_the_train_job_trains_and_comments(pipeline: Pipeline) -> None:
    """Scripted: what is tested is the component's job under gitlab-ci-local; the node only
    stands in (real training on real nodes:
    test_the_example_trains_on_two_workers_over_ssh_between_pods)."""
    process, log, job = run_to_the_launcher(pipeline)
    upload_model(pipeline, job)
    job.launcher_exits(0)

    assert process.wait(timeout=120) == 0, "\n".join(log.lines)
    log.join()
    assert f"train > [ci-runner] MPIJob {job.name} succeeded" in log.lines
    comment, reply = pipeline.notes()
    assert comment.startswith("<!-- ci-runner:simple-ml -->\n### ✅ Training succeeded")
    # the component's notify_result (default true) reached ci-runner: the end is a new note
    assert "\n✅ **Training succeeded**: `simple-ml` · " in reply
    assert (pipeline.repo / "ci-runner-out" / "report.md").is_file()


def test_a_failed_train_job_runs_after_script_and_cancels_nothing(
    pipeline: Pipeline,
) -> None:
    """Scripted: what is tested is the component's after_script under gitlab-ci-local; the
    launcher's exit 1 only stands in (on real nodes:
    test_a_training_command_that_exits_non_zero)."""
    process, log, job = run_to_the_launcher(pipeline)
    job.launcher_exits(1)

    assert process.wait(timeout=120) == 1, "\n".join(log.lines)
    log.join()
    assert "train Running after script..." in log.lines
    start = log.lines.index("train Running after script...")
    after = [line for line in log.lines[start:] if line.startswith("train ")]
    assert after[1].startswith(
        'train $ case "$CI_JOB_STATUS" in canceled|timedout) ci-runner cancel'
    )
    assert [line for line in after if line.startswith("train > ")] == []  # it printed nothing
    comment, reply = pipeline.notes()  # train replied; after_script posted nothing more
    assert "Training failed" in comment
    assert "\n❌ **Training failed**: `simple-ml` · " in reply
