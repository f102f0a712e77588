"""A canary in every secret input, searched for in every output.

Every variable of ``ci_runner.variables.SECRET_VARIABLES`` and a masked CI variable listed in
train.yaml's ``secrets`` get a distinctive value containing ``CANARY``. Training code prints them
(whole, on stderr too, and packed into a line long enough that the pipe delivers it in several
reads), ci-runner runs locally and on the scripted cluster (the real control plane, as
examples/rbac.yaml's ServiceAccount) in a merge-request pipeline that posts to the fake GitLab,
and then the CI log (stdout and stderr of ``cli.main``), the saved log, report.md, metrics.json,
metrics.txt, the comments GitLab received, the MPIJob and every error message and crash log are
searched: none may hold a canary, or any part of one. With ``tracking: gitlab`` (the run in the
fake GitLab's model experiments) no rank and no Secret holds a GitLab or MLflow token.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pytest
import yaml

from ci_runner import cli
from ci_runner.backends.logsink import LogSink
from ci_runner.clock import ManualClock
from ci_runner.commands import train
from ci_runner.masking import MASK
from ci_runner.settings import read_settings
from ci_runner.variables import SECRET_VARIABLES
from testing.fake_gitlab.server import FakeGitLab
from testing.git import run_git
from testing.plan_cases import trusted_plan
from testing.report_runtime import ReportingRuntime
from testing.waiting import WAIT, wait_for

if TYPE_CHECKING:
    from testing.backend_harness import Cluster
    from testing.scripted_cluster.cluster import ScriptedCluster

GitRepo = Callable[..., tuple[Path, str]]

pytestmark = pytest.mark.usefixtures("no_retry_sleeps")  # python-gitlab never sleeps here
JOB_TOKEN = "glcbt-64-CANARY-jobtoken-7Qz1"
API_TOKEN = "glpat-CANARY-apitoken-5Xw2"
CANARIES = {
    "CI_JOB_TOKEN": JOB_TOKEN,
    "CI_RUNNER_GIT_TOKEN": "glpat-CANARY-gittoken-3Kd8",
    "CI_RUNNER_GITLAB_TOKEN": API_TOKEN,
    "GITLAB_TOKEN": "glpat-CANARY-gitlabtoken-9Lm4",
    "CI_REGISTRY_PASSWORD": "CANARY-registry-password-2Pq6",
    "CI_DEPENDENCY_PROXY_PASSWORD": "CANARY-proxy-password-8Rt3",
    "CI_REPOSITORY_URL": f"https://gitlab-ci-token:{JOB_TOKEN}@gitlab.example.com/group/project.git",
    "AWS_SECRET_ACCESS_KEY": "CANARYsecretKEY/wJalrXUtnFEMI+K7MDENG",
    "AWS_SESSION_TOKEN": "CANARYsessionTOKEN+FwoGZXIvYXdzEJr//",
    "MLFLOW_TRACKING_TOKEN": "mlflow-CANARY-token-4Hj7",
    "MLFLOW_TRACKING_PASSWORD": "mlflow-CANARY-password-1Nc5",
    "CI_RUNNER_MLFLOW_TOKEN": "glpat-CANARY-rankstoken-2Ts6",
    "WANDB_API_KEY": "wandb-CANARY-masked-variable-6Vb0",  # listed in train.yaml's secrets
}
SECRET_VALUES = sorted(set(CANARIES.values()))
SHA_PLACEHOLDER = "0" * 40
MR_IID = 7

TRAIN_YAML = """\
name: canary
image: horovod/horovod:0.28.1
command: python train.py
workers: 2
secrets: [WANDB_API_KEY]
metrics:
  loss: {pattern: 'loss (?P<value>[0-9.]+) step (?P<step>\\d+)', goal: min}
"""


def train_py() -> str:
    """Training code that leaks every canary: from its environment, from its own source, whole,
    on stdout and stderr, in a metric-looking line, and packed into a 300 KB line."""
    values = json.dumps(SECRET_VALUES)
    tokens = json.dumps(sorted(v for k, v in CANARIES.items() if "GITLAB" in k or "MLFLOW" in k))
    return f"""\
import os, sys
values = {values}
for name in ("WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
    print(name + "=" + os.environ.get(name, "(not given)"), flush=True)
tokens = {tokens}
tracking = [n for n, v in os.environ.items() if n.startswith("MLFLOW_") or v in tokens]
print("tracking variables: " + repr(sorted(tracking)), flush=True)
for step in range(3):
    print(f"loss {{3 - step}} step {{step}}", flush=True)
for value in values:
    print("leak " + value, flush=True)
    print("err " + value, file=sys.stderr, flush=True)
print("loss " + values[0] + " step 9", flush=True)
sys.stdout.write("long:" + "|".join(values * 1200) + "\\n")
sys.stdout.flush()
sys.exit(3)
"""


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        yield server


@pytest.fixture
def chunks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every piece the backends feed the LogSink, as received (to prove the split happened)."""
    received: list[str] = []
    feed = LogSink.feed

    def recording(self: LogSink, data: bytes | str) -> None:
        received.append(data.decode("utf-8", "replace") if isinstance(data, bytes) else data)
        feed(self, data)

    monkeypatch.setattr(LogSink, "feed", recording)
    return received


def ci_environment(tmp_path: Path, gitlab: FakeGitLab, sha: str) -> dict[str, str]:
    project = gitlab.add_project("group/project")
    gitlab.add_token(API_TOKEN, gitlab.add_user("ci-bot"))
    gitlab.add_merge_request(project, MR_IID, sha=sha, source_branch="feature")
    pid = str(project.id)
    return {
        **CANARIES,
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CI_RUNNER_CACHE": str(tmp_path / "cache"),
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "GITLAB_CI": "true",
        "CI_JOB_ID": "5005",
        "CI_JOB_IMAGE": "registry.example.com/group/ci-runner:1.2.0",  # the pods' git fetch's
        "CI_JOB_NAME": "train",
        "CI_JOB_URL": "https://gitlab.example.com/group/project/-/jobs/5005",
        "CI_PIPELINE_ID": "1001",
        "CI_PIPELINE_SOURCE": "merge_request_event",
        "CI_COMMIT_SHA": sha,
        "CI_COMMIT_REF_NAME": "feature",
        "CI_PROJECT_PATH": "group/project",
        "CI_PROJECT_ID": pid,
        "CI_PROJECT_URL": "https://gitlab.example.com/group/project",
        "CI_SERVER_URL": gitlab.url,
        "CI_DEFAULT_BRANCH": "main",
        "CI_MERGE_REQUEST_IID": str(MR_IID),
        "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
        "CI_MERGE_REQUEST_PROJECT_ID": pid,
        "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": pid,
    }


def tracked_job(env: dict[str, str], gitlab: FakeGitLab, sha: str) -> dict[str, str]:
    """``env`` in a CI job the fake GitLab knows: GitLab links the MLflow run to it."""
    project = gitlab._projects[0]
    job = gitlab.add_pipeline(project, "feature", sha=sha, jobs={"train": {}}).jobs[0]
    return {**env, "CI_JOB_ID": str(job.id)}


class Outputs:
    """Every text ci-runner produced, by where it went."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def add(self, where: str, text: str | bytes) -> None:
        self.texts[where] = text.decode("utf-8", "replace") if isinstance(text, bytes) else text

    def add_files(self, directory: Path) -> None:
        for path in sorted(directory.rglob("*")) if directory.exists() else []:
            if path.is_file():
                self.add(str(path), path.read_bytes())

    def add_gitlab(self, gitlab: FakeGitLab) -> None:
        for request in gitlab.matching("POST") + gitlab.matching("PUT"):
            self.add(f"GitLab {request.method} {request.path}", request.body)

    def assert_no_canary(self) -> None:
        leaks = {
            where: [value for value in [*SECRET_VALUES, "CANARY"] if value in text]
            for where, text in self.texts.items()
        }
        assert {where: found for where, found in leaks.items() if found} == {}


def test_secret_variables_all_have_a_canary() -> None:
    assert set(SECRET_VARIABLES) <= set(CANARIES)


def assert_split_inside_a_secret(chunks: list[str]) -> None:
    """Some secret occurrence started in one piece fed to the LogSink and ended in the next."""
    joined = "".join(chunks)
    cuts, position = set(), 0
    for chunk in chunks[:-1]:
        position += len(chunk)
        cuts.add(position)
    for value in SECRET_VALUES:
        start = joined.find(value)
        while start >= 0:
            if any(start < cut < start + len(value) for cut in cuts):
                return
            start = joined.find(value, start + 1)
    raise AssertionError(f"no secret straddled a read ({len(chunks)} pieces)")


@pytest.mark.parametrize("tracking", ["", "tracking: gitlab\n"])
def test_local_training_in_an_mr_pipeline_leaks_no_secret(
    git_repo: GitRepo,
    tmp_path: Path,
    fake_horovodrun: Path,
    gitlab: FakeGitLab,
    chunks: list[str],
    tracking: str,
) -> None:
    repo, sha = git_repo({"train.yaml": TRAIN_YAML + tracking, "train.py": train_py()})
    env = tracked_job(ci_environment(tmp_path, gitlab, sha), gitlab, sha)
    out, err = io.StringIO(), io.StringIO()
    crash = tmp_path / "crash"

    code = cli.main(
        ["train", "--local", "--outputs", "model", "--output-dir", "ci"],
        env=env,
        cwd=repo,
        stdout=out,
        stderr=err,
        crash_dir=crash,
    )

    assert code == 1, err.getvalue()
    assert "[ci-runner] reason: horovodrun exited with code 3" in err.getvalue()
    ci_dir = repo / "ci"
    tracking_files = ["annotations.json", "mlflow-run.json"] if tracking else []
    assert sorted(p.name for p in ci_dir.iterdir()) == sorted(
        ["metrics.json", "metrics.txt", "report.md", "train.log", *tracking_files]
    )
    # Tracked or not, no rank saw an MLflow variable or a GitLab token.
    runs = [r for e in gitlab.mlflow.of(gitlab._projects[0].id).experiments for r in e.runs]
    assert [r.status for r in runs] == (["FAILED"] if tracking else [])
    assert "[0]<stdout>:tracking variables: []\n" in out.getvalue()
    outputs = Outputs()
    outputs.add("stdout", out.getvalue())
    outputs.add("stderr", err.getvalue())
    outputs.add_files(ci_dir)
    outputs.add_files(crash)
    outputs.add_gitlab(gitlab)
    mr = gitlab._projects[0].merge_requests[MR_IID]
    for note in mr.notes:
        outputs.add(f"note {note.id}", note.body)
    outputs.assert_no_canary()

    # The secrets were there to leak, and were masked where they were printed.
    log = out.getvalue()
    assert "[0]<stdout>:WANDB_API_KEY=[MASKED]" in log
    assert "[1]<stderr>:err [MASKED]" in log
    assert log.count(MASK) >= 2 * (3 + 2 * len(SECRET_VALUES) + 1 + 1200 * len(SECRET_VALUES))
    assert (ci_dir / "train.log").read_text() == log
    assert_split_inside_a_secret(chunks)
    # ... and what was posted is the real report, masked, and the result's reply.
    assert len(mr.notes) == 2
    assert mr.notes[1].body.startswith("<!-- ci-runner-result:job-")
    assert mr.notes[0].body.startswith("<!-- ci-runner:canary -->")
    assert "❌ Training failed" in mr.notes[0].body
    assert MASK in mr.notes[0].body  # the log tail
    assert not crash.exists()


# ---------------------------------------------------------------------------------------------
# Errors and crash logs.


def error_run(
    argv: list[str], repo: Path, env: dict[str, str], crash: Path
) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, env=env, cwd=repo, stdout=out, stderr=err, crash_dir=crash)
    return code, out.getvalue(), err.getvalue()


def padded(secret: str) -> str:
    """A value longer than the 40 characters messages used to quote, cut inside ``secret``."""
    return "-" * (40 - len(secret)) + " " + secret + " 'unbalanced" + " x" * 10


@pytest.mark.parametrize(
    ("case", "argv", "extra_env"),
    [
        ("sha is a token", ["validate", "--sha", CANARIES["CI_RUNNER_GIT_TOKEN"]], {}),
        ("missing config", ["validate", "--config", CANARIES["AWS_SECRET_ACCESS_KEY"]], {}),
        (
            "override args",
            ["train", "--local"],
            {"CI_RUNNER_ARGS": padded(CANARIES["CI_RUNNER_GITLAB_TOKEN"])},
        ),
        (
            "override args with the masked variable",
            ["train", "--local"],
            {"CI_RUNNER_ARGS": padded(CANARIES["WANDB_API_KEY"])},
        ),
        ("override workers", ["train", "--local"], {"CI_RUNNER_WORKERS": CANARIES["GITLAB_TOKEN"]}),
        ("kubeconfig", ["train"], {"KUBECONFIG": CANARIES["CI_REGISTRY_PASSWORD"]}),
        ("ci sha", ["validate"], {"CI_COMMIT_SHA": CANARIES["CI_DEPENDENCY_PROXY_PASSWORD"]}),
    ],
)
def test_error_messages_leak_no_secret(
    git_repo: GitRepo,
    tmp_path: Path,
    fake_horovodrun: Path,
    case: str,
    argv: list[str],
    extra_env: dict[str, str],
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": "print(1)\n"})
    run_git(["remote", "add", "origin", "https://gitlab.example.com/group/project.git"], repo)
    env = {
        **CANARIES,
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CI_RUNNER_CACHE": str(tmp_path / "cache"),
        **extra_env,
    }
    if "CI_COMMIT_SHA" in extra_env:
        env.update({"CI_JOB_ID": "1", "CI_PROJECT_PATH": "group/project"})
    crash = tmp_path / "crash"

    code, out, err = error_run(argv, repo, env, crash)

    assert code == 1, (case, err)
    assert err.startswith("ci-runner: error: ") and err.count("\n") == 1, err
    outputs = Outputs()
    outputs.add("stdout", out)
    outputs.add("stderr", err)
    outputs.add_files(crash)
    outputs.assert_no_canary()


@pytest.mark.parametrize("leaked", ["CI_JOB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY"])
def test_a_crash_log_leaks_no_secret(
    git_repo: GitRepo,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fake_horovodrun: Path,
    leaked: str,
) -> None:
    """A bug after train.yaml is read: its message and traceback hold a secret."""
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": "print(1)\n"})
    env = {**CANARIES, "PATH": os.environ["PATH"], "HOME": str(tmp_path)}

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"cannot use {env[leaked]}\nsecond line {env[leaked]}")

    monkeypatch.setattr(train, "output_settings", broken)
    crash = tmp_path / "crash"

    code, out, err = error_run(["train", "--local"], repo, env, crash)

    assert code == 3
    assert err.startswith("ci-runner: error: internal error (RuntimeError: cannot use [MASKED])")
    logs = list(crash.iterdir())
    assert len(logs) == 1
    assert "RuntimeError: cannot use [MASKED]\nsecond line [MASKED]" in logs[0].read_text()
    outputs = Outputs()
    outputs.add("stdout", out)
    outputs.add("stderr", err)
    outputs.add_files(crash)
    outputs.assert_no_canary()


# ---------------------------------------------------------------------------------------------
# `ci-runner render`: secrets by name only.


def test_rendered_manifest_names_secrets_only(git_repo: GitRepo, tmp_path: Path) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": "print(1)\n"})
    run_git(["remote", "add", "origin", "https://gitlab.example.com/group/project.git"], repo)
    env = {**CANARIES, "PATH": os.environ["PATH"], "HOME": str(tmp_path)}

    code, out, err = error_run(
        ["render", "--setup-image", "registry.example.com/group/ci-runner:1.2.0"],
        repo,
        env,
        tmp_path / "crash",
    )

    assert code == 0, err
    manifest = next(yaml.safe_load_all(out))  # the MPIJob, then its ConfigMap and Secret
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    env_vars = {e["name"]: e for e in launcher["containers"][0]["env"]}
    assert env_vars["WANDB_API_KEY"] == {
        "name": "WANDB_API_KEY",
        "valueFrom": {
            "secretKeyRef": {
                "name": f"{manifest['metadata']['name']}-secrets",
                "key": "WANDB_API_KEY",
            }
        },
    }
    worker = manifest["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    assert worker["initContainers"][0]["env"][0] == {
        "name": "CI_RUNNER_REPO_URL",
        "value": "https://gitlab.example.com/group/project.git",
    }
    outputs = Outputs()
    outputs.add("stdout", out)
    outputs.add("stderr", err)
    outputs.assert_no_canary()


# ---------------------------------------------------------------------------------------------
# The cluster: `ci-runner train` against the scripted cluster's kube-apiserver, controllers and
# MPI Operator (testing/scripted_cluster/), as the ServiceAccount examples/rbac.yaml binds.


@pytest.fixture
def cluster(scripted: ScriptedCluster, tmp_path: Path) -> Iterator[Cluster]:
    from testing.backend_harness import cluster_on

    with cluster_on(scripted, tmp_path) as cluster:
        yield cluster


def kubeconfig(path: Path, cluster: Cluster) -> Path:
    """KUBECONFIG with the ServiceAccount's token, its context in the test's namespace, through
    the test's proxy (``cluster.api``: what ``wait_watching`` sees)."""
    from testing.control_plane import accounts

    config = accounts.kubeconfig(
        cluster.api.url, cluster.plane.ca, cluster.token, cluster.namespace
    )
    path.write_text(yaml.safe_dump(config))
    return path


def in_thread(
    argv: list[str], repo: Path, env: dict[str, str], crash: Path | None = None
) -> tuple[threading.Thread, list[int], io.StringIO, io.StringIO]:
    """``cli.main(argv)`` on a thread: the thread, its exit code (once it ends), stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    codes: list[int] = []

    def run() -> None:
        codes.append(cli.main(argv, env=env, cwd=repo, stdout=out, stderr=err, crash_dir=crash))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, codes, out, err


@pytest.mark.slow
@pytest.mark.control_plane
@pytest.mark.parametrize("tracking", ["", "tracking: gitlab\n"])
def test_cluster_training_in_an_mr_pipeline_leaks_no_secret(
    git_repo: GitRepo,
    tmp_path: Path,
    gitlab: FakeGitLab,
    chunks: list[str],
    cluster: Cluster,
    tracking: str,
) -> None:
    """Scripted: the kubelet's log stream breaks half-way through each secret, at a chosen byte,
    which a real kubelet does not do on cue."""
    repo, sha = git_repo({"train.yaml": TRAIN_YAML + tracking, "train.py": train_py()})
    env = {
        **tracked_job(ci_environment(tmp_path, gitlab, sha), gitlab, sha),
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", cluster)),
    }
    crash = tmp_path / "crash"
    mpijobs = f"/apis/kubeflow.org/v2beta1/namespaces/{cluster.namespace}/mpijobs"
    secrets_path = f"/api/v1/namespaces/{cluster.namespace}/secrets"
    thread, codes, out, err = in_thread(["train", "--output-dir", "ci"], repo, env, crash)
    jobs = wait_for("the MPIJob", lambda: cluster.admin.list(mpijobs)[0] or None)
    name = jobs[0]["metadata"]["name"]
    cluster.wait_watching()
    job = cluster.job(name)
    job.workers_running()
    job.launcher_running()
    wait_for("launch", lambda: f"launcher running (pod {job.launcher_pod})" in err.getvalue())
    job.launcher_log(*[f"[0]<stdout>:leak {value}" for value in SECRET_VALUES])
    job.launcher_log("[0]<stdout>:loss 2 step 0", "[0]<stdout>:loss 1 step 1")
    for value in SECRET_VALUES:  # the log stream breaks half-way through a secret
        job.launcher_log_cut(f"[1]<stderr>:{value}{value}")
    job.launcher_log_unterminated(f"[0]<stdout>:last words {SECRET_VALUES[0]}")
    submitted = cluster.admin.get(f"{mpijobs}/{name}")
    secrets, _ = cluster.admin.list(secrets_path)
    job.launcher_exits(1)
    thread.join(timeout=WAIT)
    assert not thread.is_alive(), err.getvalue()
    # Deleted with the job (the garbage collector follows the MPIJob's deletion).
    wait_for("the Secret deleted", lambda: cluster.admin.list(secrets_path)[0] == [])

    assert codes == [1], err.getvalue()
    runs = [r for e in gitlab.mlflow.of(gitlab._projects[0].id).experiments for r in e.runs]
    assert [r.status for r in runs] == (["FAILED"] if tracking else [])
    # The Secret holds the values (tracked or not, no GitLab or MLflow token); the MPIJob only
    # its name and keys.
    (secret,) = [s for s in secrets if s["metadata"]["name"] == f"{name}-secrets"]
    stored = {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    assert stored == {
        "GIT_USERNAME": "oauth2",
        "GIT_PASSWORD": CANARIES["CI_RUNNER_GIT_TOKEN"],
        "WANDB_API_KEY": CANARIES["WANDB_API_KEY"],
    }
    manifest_text = json.dumps(submitted)
    assert f"{name}-secrets" in manifest_text
    outputs = Outputs()
    outputs.add("MPIJob", manifest_text)
    outputs.add("stdout", out.getvalue())
    outputs.add("stderr", err.getvalue())
    outputs.add_files(repo / "ci")
    outputs.add_files(crash)
    outputs.add_gitlab(gitlab)
    outputs.assert_no_canary()
    log = out.getvalue()
    assert log.count(f"[0]<stdout>:leak {MASK}\n") == len(SECRET_VALUES)
    assert f"[0]<stdout>:last words {MASK}\n" in log
    assert "[0]<stdout>:loss 1 step 1\n" in log
    assert (repo / "ci" / "train.log").read_text() == log
    notes = gitlab._projects[0].merge_requests[MR_IID].notes
    assert len(notes) == 2 and "❌ Training failed" in notes[0].body


@pytest.mark.slow
def test_pip_output_leaks_no_secret(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path
) -> None:
    """pip expands ${VARIABLES} in a requirements file and quotes a bad line back: the CI log,
    the saved log and the report must show it masked."""
    repo, _ = git_repo(
        {
            "train.yaml": TRAIN_YAML + "requirements: requirements.txt\n",
            "train.py": "print(1)\n",
            "requirements.txt": "torch @ https://x/${AWS_SECRET_ACCESS_KEY} ;; ${WANDB_API_KEY}\n",
        }
    )
    env = {
        **CANARIES,
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CI_RUNNER_CACHE": str(tmp_path / "cache"),
        "PIP_NO_INDEX": "1",
    }
    crash = tmp_path / "crash"

    code, out, err = error_run(["train", "--local", "--output-dir", "ci"], repo, env, crash)

    assert code == 1, err
    saved = (repo / "ci" / "train.log").read_text()
    assert MASK in saved  # pip did quote the expanded line back
    outputs = Outputs()
    outputs.add("stdout", out)
    outputs.add("stderr", err)
    outputs.add_files(repo / "ci")
    outputs.add_files(crash)
    outputs.assert_no_canary()


@pytest.mark.slow
@pytest.mark.control_plane
def test_a_cluster_failure_message_holding_a_secret_is_masked_in_the_ci_log(
    git_repo: GitRepo, tmp_path: Path, gitlab: FakeGitLab, cluster: Cluster
) -> None:
    """Scripted: what is tested is an admission webhook's refusal quoting a secret; no pod reaches a
    node."""
    from testing.scripted_cluster.webhook import PodDenyingWebhook

    repo, sha = git_repo({"train.yaml": TRAIN_YAML, "train.py": "print(1)\n"})
    leaked = CANARIES["WANDB_API_KEY"]
    env = {
        **ci_environment(tmp_path, gitlab, sha),
        "KUBECONFIG": str(kubeconfig(tmp_path / "kubeconfig", cluster)),
    }
    # An admission webhook refusing the worker pods, quoting a value back.
    with PodDenyingWebhook(
        cluster.plane,
        cluster.admin,
        cluster.namespace,
        "policy.example.com",
        f"policy refused WANDB_API_KEY={leaked}",
    ):
        thread, codes, out, err = in_thread(["train", "--output-dir", "ci"], repo, env)
        thread.join(timeout=WAIT)
    assert not thread.is_alive(), err.getvalue()

    assert codes == [1], err.getvalue()
    reason = (
        "MPI Operator cannot create the job's pods: worker pod created failed: admission "
        'webhook "policy.example.com" denied the request: policy refused WANDB_API_KEY=[MASKED]; '
        "fix: an admission policy of the cluster refused it: change what the message names, or "
        "ask the cluster's administrators about the policy"
    )
    lines = err.getvalue().splitlines()
    assert any(line.endswith(f"-5005 failed: {reason}") for line in lines), lines
    assert f"[ci-runner] reason: {reason}" in lines
    outputs = Outputs()
    outputs.add("stdout", out.getvalue())
    outputs.add("stderr", err.getvalue())
    outputs.add_files(repo / "ci")
    outputs.add_gitlab(gitlab)
    outputs.assert_no_canary()
    assert cluster.leftovers() == []


# ---------------------------------------------------------------------------------------------
# S3 links: the one documented exception.


@pytest.mark.slow
def test_s3_links_carry_the_session_token_but_never_the_secret_key(
    tmp_path: Path, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Presigned links need AWS_SESSION_TOKEN with temporary credentials (useless without the
    secret key), so ``masker_for_report`` leaves it in links; the secret key appears nowhere, and
    outside the links not even the session token does."""
    from moto.server import ThreadedMotoServer

    from ci_runner.backends.result import Outcome, RunResult
    from ci_runner.config.schema import load_config
    from ci_runner.console import Console
    from ci_runner.context import from_environment
    from ci_runner.plan.run_plan import OutputPaths
    from ci_runner.results.artifacts import make_s3_client
    from ci_runner.results.destination import open_gitlab
    from ci_runner.results.publish import RunRecord, finish

    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        repo = tmp_path / "repo"
        repo.mkdir()
        run_git(["init", "-q", "-b", "main"], repo)
        (repo / "train.yaml").write_text(TRAIN_YAML)
        run_git(["add", "-A"], repo)
        run_git(["commit", "-q", "-m", "c"], repo)
        sha = run_git(["rev-parse", "HEAD"], repo)
        env = {
            **ci_environment(tmp_path, gitlab, sha),
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        }
        client = make_s3_client(read_settings(env).aws)
        client.create_bucket(Bucket="models")
        client.put_object(Bucket="models", Key="run/model.pt", Body=b"weights")
        config = load_config(TRAIN_YAML)
        ctx = from_environment(env, repo)
        masker = read_settings(env).masker(config.secrets)
        out = tmp_path / "ci"
        with LogSink(out / "train.log", lambda text: None, masker) as sink:
            for value in SECRET_VALUES:
                sink.feed(f"[0]<stdout>:leak {value}\n[0]<stdout>:loss 1 step 0\n")
        result = RunResult(
            outcome=Outcome.SUCCEEDED,
            mpijob_name="canary-job",
            log_path=out / "train.log",
            log_tail=sink.tail,
        )
        said = io.StringIO()
        console = Console(io.StringIO(), said)
        destination = open_gitlab(ctx, read_settings(env), console)
        plan = trusted_plan(
            config, ctx, env, output_uri="s3://models/run/", outputs=OutputPaths(out, "ci")
        )
        clock = ManualClock(result.started_at or _now())
        runtime = ReportingRuntime(console, clock, read_settings(env))
        finish(runtime, RunRecord(replace(plan, masker=masker), result), destination)
    finally:
        server.stop()
    lines = said.getvalue().splitlines()
    warnings = [line for line in lines if line.startswith("[ci-runner] warning: ")]

    report = (out / "report.md").read_text()
    (link,) = re.findall(r"\]\((http://127\.0\.0\.1:\d+/models/run/model\.pt\?[^)]+)\)", report)
    assert "X-Amz-Security-Token=" in link
    outputs = Outputs()
    outputs.add_files(out)
    outputs.add_gitlab(gitlab)
    outputs.add("warnings", "\n".join(warnings))
    secret_key = CANARIES["AWS_SECRET_ACCESS_KEY"]
    for where, text in outputs.texts.items():
        assert secret_key not in text and quote(secret_key, safe="") not in text, where
        outputs.texts[where] = text.replace(link, "(link)").replace(
            link.replace("&", "&amp;"), "(link)"
        )
    outputs.assert_no_canary()
    assert report.count(link) == 1
    (note, _) = gitlab._projects[0].merge_requests[MR_IID].notes  # the report, the reply
    assert link in note.body and warnings == []


def _now() -> datetime:
    return datetime.now(timezone.utc)
