"""``ci-runner cancel`` through ``cli.main``: it reaches the cluster the way ``train`` does, the
GitLab agent's context included.

The agent's cluster is the in-process fake API server (testing/fake_kube/server.py) with no
controllers: cancel only lists and deletes, so these stay fast and rootless in ``make unit``; the
fake answering only the ``ci:12:<job token>`` of the gpu-cluster agent stands for the agent server
routing by token. The same path on the real control plane, through a KAS-like proxy, is
tests/test_train_e2e.py's agent test."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ci_runner import cli
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.commands.cancel import why_stopped
from ci_runner.config.schema import load_config
from ci_runner.context import from_environment, job_time_variables
from ci_runner.plan.deadline import ci_job_time
from ci_runner.plan.mpijob_name import mpijob_name
from testing.agent_kubeconfig import CONTEXTS, JOB_TOKEN, gitlab_kubeconfig
from testing.fake_gitlab.accounts import GITLAB_TOKEN
from testing.fake_gitlab.model import User
from testing.fake_gitlab.server import FakeGitLab
from testing.fake_kube.server import FakeKubeServer
from testing.torchrun_jobs import indexed_job_manifest

GitRepo = Callable[..., tuple[Path, str]]
MPIJOBS = "mpijobs.kubeflow.org"
TRAIN_YAML = "name: toy\nimage: horovod/horovod:0.28.1\ncommand: python train.py\n"


def cancel(args: list[str], repo: Path, env: dict[str, str]) -> tuple[int, str]:
    err = io.StringIO()
    code = cli.main(
        ["cancel", "--output-dir", "out", *args],
        env=env,
        cwd=repo,
        stdout=io.StringIO(),
        stderr=err,
    )
    return code, err.getvalue()


def _agent_job(kas: FakeKubeServer, repo: Path, tmp_path: Path) -> tuple[dict[str, str], str]:
    """The CI job's environment (a GitLab agent's kubeconfig for ``kas``) and its MPIJob's
    name; that MPIJob is created in the agent's cluster."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "KUBECONFIG": str(gitlab_kubeconfig(tmp_path, kas.url)),
    }
    name = mpijob_name(load_config(TRAIN_YAML), from_environment(env, repo))
    kas.store.create(MPIJOBS, "ml-training", {"metadata": {"name": name}, "spec": {}})
    return env, name


def test_cancel_deletes_the_job_through_the_agent_context_it_is_given(
    git_repo: GitRepo, tmp_path: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML})
    # The agent's cluster accepts only the gpu-cluster agent's token: reaching it proves the
    # context (and its user) chosen.
    with FakeKubeServer(token=f"ci:12:{JOB_TOKEN}") as kas:
        env, name = _agent_job(kas, repo, tmp_path)

        code, err = cancel([], repo, env)
        assert (code, err) == (
            1,
            f"ci-runner: error: the kubeconfig {tmp_path / 'KUBECONFIG'} has 3 contexts and none "
            f"is current: {CONTEXTS}; fix: choose one with the CI/CD variable KUBE_CONTEXT, "
            "--kube-context or kubernetes.context in train.yaml, e.g. "
            "KUBE_CONTEXT=ml/k8s-agents:cpu-cluster\n",
        )
        assert kas.store.find(MPIJOBS, "ml-training", name) is not None

        code, err = cancel(["--kube-context", "ml/k8s-agents:gpu-cluster"], repo, env)
        assert code == 0, err
        assert f"[ci-runner] cancelled: MPIJob {name} and everything it owned deleted" in (
            err.splitlines()
        )
        # Foreground deletion: the API server marks the job and the garbage collector (not
        # running here) removes it once its dependents are gone.
        deleted = kas.store.find(MPIJOBS, "ml-training", name)
        assert deleted is not None
        assert deleted["metadata"]["deletionTimestamp"]
        assert deleted["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_a_timed_out_job_is_deleted_and_reported_timed_out_with_its_log_tail(
    git_repo: GitRepo, tmp_path: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML})
    (repo / "out").mkdir()
    (repo / "out" / "train.log").write_text("[0]<stdout>:epoch 1\n[0]<stdout>:epoch 2\n")
    started = datetime.now(timezone.utc) - timedelta(minutes=55, seconds=2)
    with FakeKubeServer(token=f"ci:12:{JOB_TOKEN}") as kas:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "KUBECONFIG": str(gitlab_kubeconfig(tmp_path, kas.url)),
            # what GitLab Runner gives after_script once RUNNER_SCRIPT_TIMEOUT stopped the
            # script (common/build.go: executeAfterScript, runtimeStateAndError)
            "CI_JOB_STATUS": "timedout",
            "CI_JOB_TIMEOUT": "3600",
            "RUNNER_SCRIPT_TIMEOUT": "55m",
            "RUNNER_AFTER_SCRIPT_TIMEOUT": "5m",
            "CI_JOB_STARTED_AT": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        name = mpijob_name(load_config(TRAIN_YAML), from_environment(env, repo))
        kas.store.create(MPIJOBS, "ml-training", {"metadata": {"name": name}, "spec": {}})

        code, err = cancel(["--kube-context", "ml/k8s-agents:gpu-cluster"], repo, env)

        assert code == 0, err
        assert f"[ci-runner] timed out: MPIJob {name} and everything it owned deleted" in (
            err.splitlines()
        )
        assert kas.store.get(MPIJOBS, "ml-training", name)["metadata"]["deletionTimestamp"]
    report = (repo / "out" / "report.md").read_text()
    assert report.splitlines()[:2] == ["<!-- ci-runner:toy -->", "### ❌ Training failed: `toy`"]
    reason = r"\*\*Reason:\*\* `the CI job timed out after 55m[23]s \(RUNNER_SCRIPT_TIMEOUT 55m\)`"
    assert re.search(reason + r" \(deadline\)\n", report), report
    assert "Training started" not in report
    assert "[0]<stdout>:epoch 1\n[0]<stdout>:epoch 2" in report


def test_why_stopped_names_the_limit_and_a_cancel_stays_a_cancel() -> None:
    now = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)
    env = {
        "CI_JOB_STATUS": "timedout",
        "CI_JOB_TIMEOUT": "3600",
        "CI_JOB_STARTED_AT": "2026-12-02T05:00:00Z",
    }
    job = ci_job_time(job_time_variables(env), now)
    assert why_stopped(env["CI_JOB_STATUS"], job) == (
        Outcome.FAILED,
        Failure(FailureKind.DEADLINE, "the CI job timed out after 1h (CI_JOB_TIMEOUT 1h)"),
    )
    assert why_stopped("canceled", job) == (
        Outcome.CANCELLED,
        Failure(FailureKind.CANCELLED, "the CI job was cancelled"),
    )


def test_cancel_also_deletes_the_jobs_whose_time_has_passed(
    git_repo: GitRepo, tmp_path: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML})
    with FakeKubeServer(token=f"ci:12:{JOB_TOKEN}") as kas:
        env, _ = _agent_job(kas, repo, tmp_path)
        for other, stamp in (
            ("left-1", "2020-01-01T00:00:00Z"),
            ("running", "2999-01-01T00:00:00Z"),
        ):
            metadata = {
                "name": other,
                "labels": {"app.kubernetes.io/managed-by": "ci-runner"},
                "annotations": {"ci-runner/delete-after": stamp},
            }
            kas.store.create(MPIJOBS, "ml-training", {"metadata": metadata, "spec": {}})

        code, err = cancel(["--kube-context", "ml/k8s-agents:gpu-cluster"], repo, env)
        assert code == 0, err
        assert (
            "[ci-runner] deleted MPIJob left-1: its time (ci-runner/delete-after) had passed; an "
            "earlier run kept it, or was stopped before it could delete it"
        ) in err.splitlines()
        assert kas.store.find(MPIJOBS, "ml-training", "left-1") is None
        assert kas.store.find(MPIJOBS, "ml-training", "running") is not None


def test_after_script_run_twice_replies_with_the_result_once(
    git_repo: GitRepo, tmp_path: Path, gitlab_server: FakeGitLab, gitlab_bot: User
) -> None:
    repo, sha = git_repo({"train.yaml": TRAIN_YAML})
    project = gitlab_server.add_project("group/proj")
    gitlab_server.add_merge_request(project, 4, sha=sha)
    with FakeKubeServer(token=f"ci:12:{JOB_TOKEN}") as kas:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "KUBECONFIG": str(gitlab_kubeconfig(tmp_path, kas.url)),
            "GITLAB_CI": "true",
            "CI_SERVER_URL": gitlab_server.url,
            "CI_PROJECT_PATH": "group/proj",
            "CI_PROJECT_URL": f"{gitlab_server.url}/group/proj",
            "CI_COMMIT_SHA": sha,
            "CI_JOB_ID": "901",
            "CI_JOB_URL": f"{gitlab_server.url}/group/proj/-/jobs/901",
            "CI_MERGE_REQUEST_IID": "4",
            "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
            "CI_RUNNER_GITLAB_TOKEN": GITLAB_TOKEN,
            "CI_JOB_STATUS": "canceled",
        }
        args = ["--kube-context", "ml/k8s-agents:gpu-cluster"]
        first = cancel(args, repo, env)
        again = cancel(args, repo, env)  # after_script run a second time, same CI job

    assert first[0] == again[0] == 0, (first, again)
    summary, reply = gitlab_server.notes(project, 4)
    page = f"{gitlab_server.url}/group/proj/-/merge_requests/4"
    assert reply.body == (
        "<!-- ci-runner-result:job-901 -->\n🚫 **Training cancelled**: `toy` · reason: `the CI "
        f"job was cancelled` · [job #901]({gitlab_server.url}/group/proj/-/jobs/901) · "
        f"[full report]({page}#note_{summary.id})"
    )
    assert f"[ci-runner] result posted: {page}#note_{reply.id}" in first[1].splitlines()
    assert "result posted" not in again[1]
    assert [e.note_id for e in gitlab_server.notifications()] == [summary.id, reply.id]


TORCHRUN_YAML = TRAIN_YAML + "distributed: torchrun\n"
JOBS = "jobs.batch"


def _expired(name: str) -> dict[str, object]:
    """A job of an earlier run, its ``ci-runner/delete-after`` passed."""
    return {
        "name": name,
        "labels": {"app.kubernetes.io/managed-by": "ci-runner"},
        "annotations": {"ci-runner/delete-after": "2020-01-01T00:00:00Z"},
    }


def test_a_torchrun_job_is_deleted_as_the_job_it_is(git_repo: GitRepo, tmp_path: Path) -> None:
    """distributed: torchrun renders a batch/v1 Job: cancel deletes it, and reaps the expired
    Jobs; no MPIJob is looked for or reaped."""
    repo, _ = git_repo({"train.yaml": TORCHRUN_YAML})
    with FakeKubeServer(token=f"ci:12:{JOB_TOKEN}") as kas:
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "KUBECONFIG": str(gitlab_kubeconfig(tmp_path, kas.url)),
        }
        name = mpijob_name(load_config(TORCHRUN_YAML), from_environment(env, repo))
        kas.store.create(JOBS, "ml-training", indexed_job_manifest(name))
        kas.store.create(JOBS, "ml-training", {"metadata": _expired("left-job"), "spec": {}})
        kas.store.create(MPIJOBS, "ml-training", {"metadata": _expired("left-mpi"), "spec": {}})

        code, err = cancel(["--kube-context", "ml/k8s-agents:gpu-cluster"], repo, env)

        assert code == 0, err
        said = ("[ci-runner] cancelled:", "[ci-runner] deleted")
        assert [line for line in err.splitlines() if line.startswith(said)] == [
            f"[ci-runner] cancelled: Job {name} and everything it owned deleted",
            "[ci-runner] deleted Job left-job: its time (ci-runner/delete-after) had passed; an "
            "earlier run kept it, or was stopped before it could delete it",
        ]
        deleted = kas.store.get(JOBS, "ml-training", name)
        assert deleted["metadata"]["finalizers"] == ["foregroundDeletion"]
        assert kas.store.find(JOBS, "ml-training", "left-job") is None
        assert kas.store.find(MPIJOBS, "ml-training", "left-mpi") is not None
