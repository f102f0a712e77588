"""`ci-runner train` as a GitLab merge-request pipeline runs it, end to end.

A real ``ci-runner`` process with an MR pipeline's CI variables, in a local git repository, talks
over real HTTP to the fake GitLab (testing/fake_gitlab/server.py), the fake Kubernetes API with MPI
Operator behaviour (testing/fake_kube/) and a moto S3 server. The test
plays the cluster's part: workers start, the launcher logs, the launcher exits.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest
import requests
import yaml
from moto.server import ThreadedMotoServer

from ci_runner.cli import main
from testing.fake_gitlab.server import FakeGitLab, MergeRequest, User
from testing.fake_gitlab.server import Project as FakeProject
from testing.fake_kube.scenarios import MPIJOBS, JobScenario, MpiOperator
from testing.fake_kube.server import TOKEN as CLUSTER_TOKEN
from testing.fake_kube.server import FakeKubeServer, Store
from testing.paths import REPO_ROOT
from tests.test_backends_kubernetes_connect import CONTEXTS, gitlab_kubeconfig
from tests.test_backends_kubernetes_connect import JOB_TOKEN as AGENT_JOB_TOKEN

pytestmark = pytest.mark.slow

NAMESPACE = "ml"
GITLAB_TOKEN = "glpat-e2e-CANARY-51f0c2"
JOB_TOKEN = "glcbt-64-e2e-CANARY-job-token"
AWS_SECRET = "e2e-CANARY-aws-secret-key"
WAIT = 30.0

TRAIN_YAML = r"""
name: simple-ml
image: horovod/horovod:0.28.1
command: python train.py
workers: 2
resources: {gpu: 1}
outputs: s3://models/{project}/{sha}/{job}/
metrics:
  train_loss:
    pattern: 'Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-0-9.e]+), Worker: (?P<rank>\d+)'
    goal: min
kubernetes:
  namespace: ml
"""
LOG = [
    "[0]<stdout>:Training. Epoch 0, MSE loss: 1338.4868140452961, Worker: 0",
    "[1]<stdout>:Training. Epoch 0, MSE loss: 1148.9670435080386, Worker: 1",
    "[0]<stdout>:Training. Epoch 1, MSE loss: 935.5324933822116, Worker: 0",
    "[1]<stdout>:Training. Epoch 1, MSE loss: 934.2259948853756, Worker: 1",
]
MODEL = b"a trained model"


class CiLog:
    """The CI job's log as the process writes it, line by line; tests wait for lines."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: io.TextIOBase) -> None:
        for line in stream:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def wait_for(self, line: str) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: line in self.lines, timeout=WAIT):
                raise AssertionError(f"never printed {line!r}; the CI log so far: {self.lines}")

    def join(self) -> None:
        self._thread.join(timeout=WAIT)


@dataclass
class Pipeline:
    """One CI job of an MR pipeline: its variables, and what it talks to."""

    repo: Path
    sha: str
    env: dict[str, str]
    gitlab: FakeGitLab
    project: FakeProject
    mr: MergeRequest
    bot: User
    cluster: FakeKubeServer
    operator: MpiOperator
    s3_endpoint: str

    def for_job(self, job_id: int) -> Pipeline:
        """The same MR pipeline, another CI job (a re-run or a later pipeline)."""
        env = {
            **self.env,
            "CI_JOB_ID": str(job_id),
            "CI_JOB_URL": f"{self.env['CI_PROJECT_URL']}/-/jobs/{job_id}",
            "CI_PIPELINE_ID": str(job_id + 1000),
        }
        return Pipeline(**{**self.__dict__, "env": env})

    def start_train(self) -> tuple[subprocess.Popen[str], CiLog]:
        process = subprocess.Popen(
            [sys.executable, "-m", "ci_runner", "train"],
            cwd=self.repo,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        return process, CiLog(process.stdout)

    def submitted_job(self) -> JobScenario:
        """The MPIJob ci-runner created, once it exists."""
        store = self.cluster.store
        with store.cond:
            found = store.cond.wait_for(
                lambda: any(k == MPIJOBS for k, _, _ in store.objects), timeout=WAIT
            )
            assert found, "no MPIJob was submitted"
            name = next(n for k, _, n in store.objects if k == MPIJOBS)
        return self.operator.job(name, NAMESPACE)

    def notes(self) -> list[str]:
        return [note.body for note in self.mr.notes]

    def output_dir(self) -> Path:
        return self.repo / "ci-runner-out"


@pytest.fixture
def pipeline(
    tmp_path: Path, git_repo: Callable[[dict[str, str]], tuple[Path, str]]
) -> Iterator[Pipeline]:
    repo, sha = git_repo({"train.yaml": TRAIN_YAML, "train.py": "print('hi')\n"})
    with FakeGitLab() as gitlab, FakeKubeServer() as cluster:
        s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        s3.start()
        try:
            host, port = s3.get_host_and_port()
            s3_endpoint = f"http://{host}:{port}"
            bot = gitlab.add_user("project_7_bot")
            gitlab.add_token(GITLAB_TOKEN, bot)
            project = gitlab.add_project("group/proj")
            mr = gitlab.add_merge_request(project, 7, sha=sha, source_branch="faster")
            baseline = {
                "version": 1,
                "metrics": {"train_loss": {"final": 1000.0, "best": 990.0, "goal": "min"}},
            }
            gitlab.set_artifact(
                project,
                "main",
                "train",
                "ci-runner-out/metrics.json",
                json.dumps(baseline).encode(),
            )
            kubeconfig = tmp_path / "kubeconfig"
            kubeconfig.write_text(
                yaml.safe_dump(
                    {
                        "apiVersion": "v1",
                        "kind": "Config",
                        "clusters": [{"name": "fake", "cluster": {"server": cluster.url}}],
                        "users": [{"name": "ci", "user": {"token": CLUSTER_TOKEN}}],
                        "contexts": [
                            {"name": "fake", "context": {"cluster": "fake", "user": "ci"}}
                        ],
                        "current-context": "fake",
                    }
                )
            )
            project_url = f"{gitlab.url}/group/proj"
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(tmp_path),
                "PYTHONPATH": str(REPO_ROOT),
                "CI": "true",
                "GITLAB_CI": "true",
                "CI_SERVER_URL": gitlab.url,
                "CI_PROJECT_ID": str(project.id),
                "CI_PROJECT_PATH": "group/proj",
                "CI_PROJECT_URL": project_url,
                "CI_REPOSITORY_URL": f"https://gitlab-ci-token:{JOB_TOKEN}@gitlab.example.com/group/proj.git",
                "CI_COMMIT_SHA": sha,
                "CI_COMMIT_REF_NAME": "faster",
                "CI_DEFAULT_BRANCH": "main",
                "CI_PIPELINE_ID": "1001",
                "CI_PIPELINE_SOURCE": "merge_request_event",
                "CI_JOB_ID": "5005",
                "CI_JOB_NAME": "train",
                "CI_JOB_URL": f"{project_url}/-/jobs/5005",
                "CI_JOB_TOKEN": JOB_TOKEN,
                "CI_MERGE_REQUEST_IID": "7",
                "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
                "CI_MERGE_REQUEST_PROJECT_ID": str(project.id),
                "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": str(project.id),
                "CI_RUNNER_GITLAB_TOKEN": GITLAB_TOKEN,
                "KUBECONFIG": str(kubeconfig),
                "AWS_ACCESS_KEY_ID": "e2e-access-key",
                "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
                "AWS_ENDPOINT_URL": s3_endpoint,
                "AWS_DEFAULT_REGION": "us-east-1",
            }
            client = boto3.client(
                "s3",
                endpoint_url=s3_endpoint,
                aws_access_key_id="e2e-access-key",
                aws_secret_access_key=AWS_SECRET,
                region_name="us-east-1",
            )
            client.create_bucket(Bucket="models")
            yield Pipeline(
                repo, sha, env, gitlab, project, mr, bot, cluster, MpiOperator(cluster), s3_endpoint
            )
        finally:
            s3.stop()


def run_to_the_launcher(pipeline: Pipeline) -> tuple[subprocess.Popen[str], CiLog, JobScenario]:
    """Start `ci-runner train`; the workers and the launcher come up and the launcher logs."""
    process, log = pipeline.start_train()
    job = pipeline.submitted_job()
    log.wait_for(f"[ci-runner] submitted MPIJob {job.name} in namespace {NAMESPACE}")
    (started,) = pipeline.notes()
    assert "Training started" in started, started
    assert job.name in started
    job.workers_running()
    log.wait_for("[ci-runner] workers ready 2/2")
    job.launcher_running()
    log.wait_for(f"[ci-runner] launcher running (pod {job.launcher_pod})")
    job.launcher_log(*LOG)
    log.wait_for(LOG[-1])
    return process, log, job


def upload_model(pipeline: Pipeline, job: JobScenario) -> str:
    """What rank 0 does: the model under the expanded OUTPUT_URI."""
    key = f"group/proj/{pipeline.sha}/{job.name}/model.pt"
    client = boto3.client(
        "s3",
        endpoint_url=pipeline.s3_endpoint,
        aws_access_key_id="e2e-access-key",
        aws_secret_access_key=AWS_SECRET,
        region_name="us-east-1",
    )
    client.put_object(Bucket="models", Key=key, Body=MODEL)
    return key


def finished(process: subprocess.Popen[str], log: CiLog) -> int:
    code = process.wait(timeout=WAIT)
    log.join()
    return code


def leftovers(store: Store) -> list[tuple[str, str, str]]:
    """What a run left in the namespace (Events go by themselves, after kube-apiserver's
    --event-ttl, 1 h by default)."""
    return [key for key in store.objects if key[1] == NAMESPACE and key[0] != "events"]


def assert_no_secret_anywhere(pipeline: Pipeline, log: CiLog) -> None:
    outputs = [
        "\n".join(log.lines),
        *pipeline.notes(),
        *(p.read_text() for p in pipeline.output_dir().iterdir()),
        json.dumps(
            [obj for obj in pipeline.cluster.store.objects.values() if obj["kind"] != "Secret"]
        ),
    ]
    for secret in (GITLAB_TOKEN, JOB_TOKEN, AWS_SECRET):
        assert not [text for text in outputs if secret in text], secret


def test_mr_pipeline_trains_and_keeps_one_comment_up_to_date(pipeline: Pipeline) -> None:
    process, log, job = run_to_the_launcher(pipeline)
    key = upload_model(pipeline, job)
    # Manifests name the Secret; its values live only in the Secret, which the MPIJob owns.
    secret = pipeline.cluster.store.get("secrets", NAMESPACE, f"{job.name}-secrets")
    assert secret["metadata"]["ownerReferences"][0]["name"] == job.name
    job.launcher_exits(0)

    assert finished(process, log) == 0, "\n".join(log.lines)
    assert f"[ci-runner] MPIJob {job.name} succeeded" in log.lines
    assert f"[ci-runner] deleted MPIJob {job.name}, its pods and its Secret" in log.lines
    assert "[ci-runner] train_loss: 934.879 (final, mean over ranks; best 934.226)" in log.lines
    (comment,) = pipeline.notes()
    assert comment.startswith(
        "<!-- ci-runner:simple-ml -->\n### ✅ Training succeeded: `simple-ml`"
    )
    assert (
        "| `train_loss` | lower is better | **934.879** | 934.226 (step 1, rank 1) | 1000 | "
        "-65.12 (-6.5%) 🟢 better | 4 |"
    ) in comment
    assert "xychart-beta" in comment
    assert 'line "mean" [1243.7,934.9]' in comment
    link = next(line for line in comment.splitlines() if "model.pt" in line)
    url = link[link.index("](") + 2 : link.rindex(")")]
    assert requests.get(url, timeout=10).content == MODEL
    assert key in url
    out = pipeline.output_dir()
    assert sorted(p.name for p in out.iterdir()) == [
        "metrics.json",
        "metrics.txt",
        "report.md",
        "train.log",
    ]
    assert (out / "train.log").read_text().splitlines() == LOG
    assert json.loads((out / "metrics.json").read_text())["metrics"]["train_loss"]["final"] == (
        pytest.approx(934.8792437337936)
    )
    assert_no_secret_anywhere(pipeline, log)
    # The log saved, nothing of the run is left in the namespace (Events expire by themselves).
    store = pipeline.cluster.store
    assert [key for key in store.objects if key[1] == NAMESPACE and key[0] != "events"] == []

    # A second pipeline on the same MR edits the same comment and keeps this run in its history.
    second = pipeline.for_job(5006)
    store = pipeline.cluster.store
    for key in [key for key in store.objects if key[1] == NAMESPACE]:  # the nodes stay
        del store.objects[key]
    process, log, job2 = run_to_the_launcher(second)
    assert job2.name != job.name
    upload_model(second, job2)
    job2.launcher_exits(0)
    assert finished(process, log) == 0, "\n".join(log.lines)
    (comment,) = pipeline.notes()
    assert "<summary>Previous runs (1)</summary>" in comment
    assert "[job #5005]" in comment


def test_the_gitlab_agent_context_kube_context_names_is_the_one_trained_on(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    """GitLab injects a kubeconfig with a context per authorized agent and none current; the
    cluster here answers only the gpu-cluster agent's token, as KAS routes by token."""
    kubeconfig = gitlab_kubeconfig(tmp_path, pipeline.cluster.url)
    pipeline.cluster.accepted_token = f"ci:12:{AGENT_JOB_TOKEN}"
    agent = Pipeline(
        **{**pipeline.__dict__, "env": {**pipeline.env, "KUBECONFIG": str(kubeconfig)}}
    )

    process, log = agent.start_train()
    assert finished(process, log) == 1
    assert log.lines[-1] == (
        f"ci-runner: error: the kubeconfig {kubeconfig} has 3 contexts and none is current: "
        f"{CONTEXTS}; fix: choose one with the CI/CD variable KUBE_CONTEXT, --kube-context or "
        "kubernetes.context in train.yaml, e.g. KUBE_CONTEXT=ml/k8s-agents:cpu-cluster"
    )
    assert leftovers(pipeline.cluster.store) == []

    chosen = Pipeline(
        **{**agent.__dict__, "env": {**agent.env, "KUBE_CONTEXT": "ml/k8s-agents:gpu-cluster"}}
    )
    process, log, job = run_to_the_launcher(chosen)
    upload_model(chosen, job)
    job.launcher_exits(0)
    assert finished(process, log) == 0, "\n".join(log.lines)
    assert f"[ci-runner] MPIJob {job.name} succeeded" in log.lines


def test_failed_run_exits_1_and_says_why_in_the_comment(pipeline: Pipeline) -> None:
    process, log, job = run_to_the_launcher(pipeline)
    launcher = job.launcher_pod
    job.launcher_log("[1]<stderr>:ValueError: bad batch")
    job.launcher_exits(1)

    assert finished(process, log) == 1
    reason = f"launcher {launcher} exited with code 1"
    assert f"[ci-runner] MPIJob {job.name} failed: {reason}" in log.lines
    assert f"[ci-runner] reason: {reason}" in log.lines
    (comment,) = pipeline.notes()
    assert "### ❌ Training failed: `simple-ml`" in comment
    assert f"**Reason:** `{reason}`" in comment
    assert "[1]<stderr>:ValueError: bad batch" in comment  # the log tail
    assert "Model and outputs" not in comment
    assert_no_secret_anywhere(pipeline, log)


def test_cancelled_run_leaves_nothing_in_the_cluster(pipeline: Pipeline) -> None:
    process, log, job = run_to_the_launcher(pipeline)
    # GitLab stops the job's script (SIGTERM may never reach it), then runs after_script.
    process.kill()
    finished(process, log)
    assert job.pods()

    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stderr(stderr):
        code = main(
            ["cancel"],
            env={**pipeline.env, "CI_JOB_STATUS": "canceled"},
            cwd=pipeline.repo,
            stdout=stdout,
            stderr=stderr,
        )

    assert code == 0, stderr.getvalue()
    assert f"[ci-runner] cancelled: MPIJob {job.name} and everything it owned deleted" in (
        stderr.getvalue().splitlines()
    )
    store = pipeline.cluster.store
    assert leftovers(store) == []
    (comment,) = pipeline.notes()
    assert "Training cancelled" in comment
    assert LOG[-1] in comment  # the tail of the log `train` had saved
    assert (pipeline.output_dir() / "report.md").is_file()


def test_fork_merge_request_is_refused_before_anything_runs(pipeline: Pipeline) -> None:
    env = {
        **pipeline.env,
        "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "999",
        "CI_MERGE_REQUEST_PROJECT_PATH": "group/proj",
        "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "alice/proj",
    }
    stdout, stderr = io.StringIO(), io.StringIO()

    code = main(["train"], env=env, cwd=pipeline.repo, stdout=stdout, stderr=stderr)

    assert code == 1
    assert stderr.getvalue() == (
        "ci-runner: error: merge request !7 of group/proj comes from the fork alice/proj: its "
        "code would run with group/proj's cluster credentials; fix: review it, then set the "
        "component input allow_fork_merge_requests: true, or push its branch to group/proj and "
        "open the merge request from there\n"
    )
    assert leftovers(pipeline.cluster.store) == []
    assert pipeline.notes() == []


def test_fork_merge_request_pipeline_in_the_fork_says_so(pipeline: Pipeline) -> None:
    env = {
        **pipeline.env,
        "CI_PROJECT_ID": "999",
        "CI_PROJECT_PATH": "alice/proj",
        "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "999",
        "CI_MERGE_REQUEST_PROJECT_PATH": "group/proj",
        "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "alice/proj",
    }
    stdout, stderr = io.StringIO(), io.StringIO()

    code = main(["train"], env=env, cwd=pipeline.repo, stdout=stdout, stderr=stderr)

    assert code == 1
    assert stderr.getvalue() == (
        "ci-runner: error: merge request !7 of group/proj comes from the fork alice/proj and "
        "this pipeline runs in the fork, with the fork's CI/CD variables, not group/proj's; fix: "
        "a maintainer of group/proj reviews the code, then runs the pipeline from the merge "
        "request's Pipelines tab (it runs in group/proj) with the component input "
        "allow_fork_merge_requests: true\n"
    )
    assert leftovers(pipeline.cluster.store) == []  # nothing was submitted


def test_manual_run_overrides_workers_and_arguments(pipeline: Pipeline) -> None:
    manual = pipeline.for_job(5007)
    manual.env.update(
        {"CI_PIPELINE_SOURCE": "web", "CI_RUNNER_WORKERS": "3", "CI_RUNNER_ARGS": "--epochs 2"}
    )
    del manual.env["CI_MERGE_REQUEST_IID"]
    process, log = manual.start_train()
    job = manual.submitted_job()
    log.wait_for(f"[ci-runner] submitted MPIJob {job.name} in namespace {NAMESPACE}")
    process.kill()
    finished(process, log)

    specs = job.mpijob["spec"]["mpiReplicaSpecs"]
    assert specs["Worker"]["replicas"] == 3
    launcher_args = specs["Launcher"]["template"]["spec"]["containers"][0]["args"]
    assert launcher_args[:3] == ["horovodrun", "-np", "3"]
    assert launcher_args[-4:] == ["python", "train.py", "--epochs", "2"]


def test_invalid_override_is_one_line_and_submits_nothing(pipeline: Pipeline) -> None:
    env = {**pipeline.env, "CI_PIPELINE_SOURCE": "web", "CI_RUNNER_WORKERS": "lots"}
    stderr = io.StringIO()

    code = main(["train"], env=env, cwd=pipeline.repo, stdout=io.StringIO(), stderr=stderr)

    assert code == 1
    assert stderr.getvalue() == (
        "ci-runner: error: CI_RUNNER_WORKERS: must be a whole number, got 'lots'; fix: set "
        "CI_RUNNER_WORKERS to a number from 1 to 512, e.g. 2\n"
    )
    assert leftovers(pipeline.cluster.store) == []
    assert pipeline.notes() == []
