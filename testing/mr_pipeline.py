"""A GitLab merge-request pipeline's CI job for ``ci-runner train``: its CI variables
(``testing/fake_gitlab/ci_variables.job_variables``), and the services it talks to over real
HTTP: the fake GitLab (testing/fake_gitlab/), the scripted cluster's real kube-apiserver,
controllers and MPI Operator (testing/scripted_cluster/: one namespace of it, reached with the
token of the ServiceAccount examples/rbac.yaml binds) and a moto S3 server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import boto3
import yaml
from moto.server import ThreadedMotoServer

from testing.backend_harness import Cluster
from testing.ci_log import CiLog
from testing.control_plane import accounts
from testing.fake_gitlab.ci_variables import job_variables
from testing.fake_gitlab.model import MergeRequest, User
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.server import FakeGitLab
from testing.paths import REPO_ROOT
from testing.plan_cases import SETUP_IMAGE
from testing.scripted_cluster.scenarios import MPIJOBS, JobScenario
from testing.waiting import WAIT, wait_for

GITLAB_TOKEN = "glpat-e2e-CANARY-51f0c2"
JOB_TOKEN = "glcbt-64-e2e-CANARY-job-token"
AWS_SECRET = "e2e-CANARY-aws-secret-key"

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
  namespace: {namespace}
"""
LOG = [
    "[0]<stdout>:Training. Epoch 0, MSE loss: 1338.4868140452961, Worker: 0",
    "[1]<stdout>:Training. Epoch 0, MSE loss: 1148.9670435080386, Worker: 1",
    "[0]<stdout>:Training. Epoch 1, MSE loss: 935.5324933822116, Worker: 0",
    "[1]<stdout>:Training. Epoch 1, MSE loss: 934.2259948853756, Worker: 1",
]
MODEL = b"a trained model"


def train_yaml(namespace: str) -> str:
    """The MR's train.yaml, training in ``namespace``."""
    return TRAIN_YAML.replace("{namespace}", namespace)


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
    cluster: Cluster
    s3_endpoint: str

    @property
    def namespace(self) -> str:
        return self.cluster.namespace

    def for_job(self, job_id: int) -> Pipeline:
        """The same MR pipeline, another CI job (a re-run or a later pipeline)."""
        env = {
            **self.env,
            **ci_job(self.gitlab, self.project, self.mr, self.sha, job_id, job_id + 1000),
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
        return process, CiLog.reading(process.stdout)

    def submitted_job(self, log: CiLog | None = None, timeout: float = WAIT) -> JobScenario:
        """The MPIJob ci-runner created, once it exists (``log``: shown if it never does)."""
        path = MPIJOBS.format(ns=self.namespace)
        try:
            name = wait_for(
                "an MPIJob submitted",
                lambda: next(
                    (j["metadata"]["name"] for j in self.cluster.admin.list(path)[0]), None
                ),
                timeout,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}; the CI log so far: {log.lines if log else '?'}") from None
        return self.cluster.job(str(name))

    def notes(self) -> list[str]:
        return [note.body for note in self.mr.notes]

    def output_dir(self) -> Path:
        return self.repo / "ci-runner-out"


def ci_job(
    gitlab: FakeGitLab,
    project: FakeProject,
    mr: MergeRequest,
    sha: str,
    job_id: int,
    pipeline_id: int,
) -> dict[str, str]:
    """The predefined variables of CI job ``job_id`` of ``mr``'s pipeline ``pipeline_id``."""
    return job_variables(
        gitlab.url,
        project,
        source="merge_request_event",
        sha=sha,
        job_id=job_id,
        pipeline_id=pipeline_id,
        mr=mr,
        image=SETUP_IMAGE,  # ci-runner's image: the pods' git fetch runs in it
    )


@contextmanager
def mr_pipeline(tmp_path: Path, repo: Path, sha: str, cluster: Cluster) -> Iterator[Pipeline]:
    """The CI job of an MR pipeline at ``sha`` of ``repo``, with the fake GitLab (the MR, the bot,
    the main branch's baseline), ``cluster``'s namespace (examples/rbac.yaml's ServiceAccount in
    KUBECONFIG) and an S3 bucket ``models`` running."""
    with FakeGitLab() as gitlab:
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
            config = accounts.kubeconfig(
                cluster.plane.url, cluster.plane.ca, cluster.token, cluster.namespace
            )
            kubeconfig.write_text(yaml.safe_dump(config))
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(tmp_path),
                "PYTHONPATH": str(REPO_ROOT),
                **ci_job(gitlab, project, mr, sha, 5005, 1001),
                "CI_REPOSITORY_URL": f"https://gitlab-ci-token:{JOB_TOKEN}@gitlab.example.com/group/proj.git",
                "CI_JOB_TOKEN": JOB_TOKEN,
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
            yield Pipeline(repo, sha, env, gitlab, project, mr, bot, cluster, s3_endpoint)
        finally:
            s3.stop()


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
