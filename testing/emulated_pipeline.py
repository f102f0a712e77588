"""`ci-runner train` as an MR pipeline's job runs it, against the emulated cluster, for the
end-to-end modules: a real ``ci-runner train`` process with an MR pipeline's CI variables talks to
the fake GitLab and to kube-apiserver, whose control plane (MPI Operator v0.8.2, Job controller,
scheduler, GC) hands the pods to the nodes; the pods fetch the commit from a ``git daemon`` on
the emulated cluster's bridge and read and write a moto S3 there."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

from testing.emulated_cluster import nodeimages
from testing.emulated_cluster.demo import GIT_PORT, s3_and_git
from testing.emulated_cluster.harness import NAMESPACE, Emulated, emulated
from testing.fake_gitlab.ci_variables import job_variables
from testing.fake_gitlab.server import FakeGitLab
from testing.git import run_git
from testing.host import marks
from testing.paths import REPO_ROOT

JSON = dict[str, Any]
GITLAB_TOKEN = "glpat-emulated-CANARY-7c1d"
AWS_KEY = "emulated-access-key"
AWS_SECRET = "emulated-CANARY-aws-secret"
S3 = f"http://{marks.GATEWAY}:{marks.S3_PORT}"
EXAMPLE = REPO_ROOT / "examples" / "simple_ml"
TRAIN_LOSS = (
    r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)"
)

SUBMITTED = re.compile(r"\[ci-runner\] submitted (?:MPIJob|Job) ")
MARGIN = 20  # the killed-CI-job test's pod deadline margin, seconds
# `python -m ci_runner CMD` with render.POD_DEADLINE_MARGIN set first (argv[1] is the command).
MARGIN_SHIM = (
    "import runpy, sys; import ci_runner.render as render; "
    "render.POD_DEADLINE_MARGIN = {margin}; sys.argv[0] = 'ci-runner'; "
    "runpy.run_module('ci_runner', run_name='__main__')"
)


def train_yaml(**kubernetes: object) -> dict[str, object]:
    """The example's train.yaml for this cluster: no GPU, a short run, S3 on the bridge."""
    return {
        "name": "simple-ml",
        "image": "horovod/horovod:0.28.1",
        "command": "python examples/simple_ml/main_with_horovod.py",
        "workers": 2,
        "requirements": "examples/simple_ml/requirements.txt",
        "data": "s3://datasets/diabetes/",
        "outputs": "s3://models/{project}/{sha}/{job}/",
        "env": {
            "EPOCHS": "2",
            "AWS_ENDPOINT_URL": S3,
            "AWS_DEFAULT_REGION": "us-east-1",
            "PIP_NO_INDEX": "1",  # no network: what the image lacks comes from the commit
        },
        "secrets": ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
        "metrics": {"train_loss": {"pattern": TRAIN_LOSS, "goal": "min"}},
        "timeout": "10m",
        "kubernetes": {"namespace": NAMESPACE, **kubernetes},
    }


def ddp_train_yaml(**kubernetes: object) -> dict[str, object]:
    """:func:`train_yaml` with the DDP example started by torchrun on an Indexed Job: two pods of
    one rank each, gloo over the pods' network (the Horovod image has torch)."""
    return {
        **train_yaml(**kubernetes),
        "distributed": "torchrun",
        "command": "python examples/simple_ml/main_with_ddp.py",
    }


@dataclass
class Site:
    """What every pipeline here talks to."""

    cluster: Emulated
    gitlab: FakeGitLab
    repos: Path  # served by git daemon at git://GATEWAY/<name>.git
    home: Path


@contextmanager
def running_site(home: Path) -> Iterator[Site]:
    """The emulated cluster with two real nodes (kubelet v1.35.4 and containerd, with the images
    of testing/emulated_cluster/nodeimages.py), the fake GitLab, S3 and git on the bridge; after
    it stopped, asserts that the cluster left nothing on this machine."""
    repos = home / "served"
    repos.mkdir()
    with (
        emulated(nodes=2) as cluster,
        FakeGitLab() as gitlab,
        s3_and_git(repos, aws_env()),
    ):
        yield Site(cluster, gitlab, repos, home)
    # Taken by stop() before it let the machine go (another run may start right after).
    assert cluster.side.left_behind is not None
    assert cluster.side.left_behind == {key: [] for key in cluster.side.left_behind}


def aws_env() -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": AWS_KEY,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_ENDPOINT_URL": S3,
        "AWS_DEFAULT_REGION": "us-east-1",
    }


@dataclass
class Run:
    code: int
    log: list[str]
    comment: str
    sha: str


@dataclass
class Pipeline:
    """An MR pipeline's job, ready to run: its checkout, CI variables, MR and commit."""

    repo: Path
    env: dict[str, str]
    mr: Any
    sha: str
    # The pods' deadline margin (render.POD_DEADLINE_MARGIN, 10 minutes) in ci-runner's process,
    # for a test that waits for the deadline itself; None: the real one.
    margin: int | None = None

    def notes(self) -> list[str]:
        return [note.body for note in self.mr.notes]

    def start(self, command: str, **env: str) -> subprocess.Popen[str]:
        """`ci-runner <command>` as the job's script runs it, output and errors in one stream."""
        argv = [sys.executable, "-m", "ci_runner", command]
        if self.margin is not None:
            argv = [sys.executable, "-c", MARGIN_SHIM.format(margin=self.margin), command]
        return subprocess.Popen(
            argv,
            cwd=self.repo,
            env={**self.env, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )


def pipeline(
    site: Site,
    name: str,
    config: dict[str, object],
    files: dict[str, bytes] | None = None,
    namespace: str = NAMESPACE,
    variables: dict[str, str] | None = None,
) -> Pipeline:
    """Commit the example with ``config`` (and ``files``) as project ``group/<name>``, with an MR
    whose pipeline's job is about to run in ``namespace`` (with ``variables`` besides GitLab's)."""
    repo = site.home / name
    shutil.copytree(EXAMPLE, repo / "examples" / "simple_ml")
    (repo / "train.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for path, text in (files or {}).items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(text)
    run_git(["init", "-q", "-b", "main"], repo)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "train"], repo)
    sha = run_git(["rev-parse", "HEAD"], repo)
    run_git(["clone", "-q", "--bare", str(repo), str(site.repos / f"{name}.git")], site.home)

    gitlab = site.gitlab
    bot = gitlab.add_user(f"project_{name}_bot")
    gitlab.add_token(f"{GITLAB_TOKEN}-{name}", bot)
    project = gitlab.add_project(f"group/{name}")
    mr = gitlab.add_merge_request(project, 7, sha=sha, source_branch="faster")
    kubeconfig = site.home / f"{name}.kubeconfig"
    # Only what examples/rbac.yaml grants: the Role is all ci-runner needs.
    kubeconfig.write_text(yaml.safe_dump(site.cluster.ci_runner_kubeconfig(namespace)))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(site.home),
        "PYTHONPATH": str(REPO_ROOT),
        **job_variables(
            gitlab.url,
            project,
            source="merge_request_event",
            sha=sha,
            job_id=5005,
            pipeline_id=1001,
            mr=mr,
            # The CI job's image, ci-runner's, runs the pods' git fetch: any node image with git.
            image=nodeimages.MPI_IMAGE,
        ),
        "CI_REPOSITORY_URL": f"git://{marks.GATEWAY}:{GIT_PORT}/{name}.git",
        "CI_RUNNER_ALLOW_GIT_PROTOCOL": "1",  # git daemon on the cluster's own bridge
        "CI_JOB_TOKEN": "glcbt-emulated-job-token",
        "CI_RUNNER_GITLAB_TOKEN": f"{GITLAB_TOKEN}-{name}",
        "KUBECONFIG": str(kubeconfig),
        **aws_env(),
        **(variables or {}),
    }
    return Pipeline(repo, env, mr, sha)


def read_until(train: subprocess.Popen[str], text: str) -> list[str]:
    """The lines ``train`` writes up to the first that contains ``text`` (AssertionError with
    them all if it ends first)."""
    assert train.stdout is not None
    seen = []
    for line in train.stdout:
        seen.append(line.rstrip("\n"))
        if text in line:
            return seen
    raise AssertionError("\n".join(seen))


def finish(job: Pipeline, train: subprocess.Popen[str], seen: list[str] | None = None) -> Run:
    """``train`` (of ``job``) to its end: its whole log (``seen`` of it read already), exit code
    and the MR's first note (the report)."""
    rest, _ = train.communicate(timeout=600)
    notes = job.notes()  # the report, then the result's reply in its thread
    log = (seen or []) + rest.splitlines()
    return Run(train.returncode, log, notes[0] if notes else "", job.sha)


def train(
    site: Site,
    name: str,
    config: dict[str, object],
    files: dict[str, bytes] | None = None,
    namespace: str = NAMESPACE,
    variables: dict[str, str] | None = None,
) -> Run:
    """`ci-runner train` as the job of an MR pipeline for ``config`` (see :func:`pipeline`)."""
    job = pipeline(site, name, config, files, namespace, variables)
    return finish(job, job.start("train"))


def assert_trained(run: Run, name: str) -> None:
    """Both ranks' losses in the CI log, the model on S3 and linked in the comment."""
    text = "\n".join(run.log)
    assert run.code == 0, text
    # Each loss line is a CI log line of its own: mpirun tags every write of a rank (torchrun
    # every line, "<std>"), and the job's virtualenv makes a print one write
    # (install-requirements.sh).
    loss = re.compile(
        r"<std(?:out)?>:Training\. Epoch (\d+), MSE loss: [-+0-9.eE]+, Worker: (\d+)$"
    )
    assert all(line.count("MSE loss") <= 1 for line in run.log), text
    lines = [line for line in run.log if "Training. Epoch" in line]
    losses = [found.groups() for line in lines if (found := loss.search(line))]
    assert len(losses) == len(lines), text
    assert sorted(set(losses)) == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")], text
    assert "### ✅ Training succeeded: `simple-ml`" in run.comment, run.comment
    link = next(line for line in run.comment.splitlines() if "model.pt" in line)
    url = link[link.index("](") + 2 : link.rindex(")")]
    assert f"group/{name}/{run.sha}/" in url
    model = requests.get(url, timeout=10)
    assert model.ok and len(model.content) > 0
    assert AWS_SECRET not in text and AWS_SECRET not in run.comment


def job_name(log: list[str]) -> str:
    """The job's name, from its `submitted MPIJob ...` (or torchrun's `submitted Job ...`) line."""
    submitted = next(line for line in log if SUBMITTED.match(line))
    return submitted.split()[3]


def job_kind(log: list[str]) -> str:
    """``MPIJob`` or torchrun's ``Job``, from the `submitted ...` line."""
    submitted = next(line for line in log if SUBMITTED.match(line))
    return submitted.split()[2]


def failure_line(run: Run) -> str:
    """The message of the `MPIJob ... failed:` (or `Job ... failed:`) line (exactly one)."""
    prefix = f"[ci-runner] {job_kind(run.log)} {job_name(run.log)} failed: "
    lines = [line[len(prefix) :] for line in run.log if line.startswith(prefix)]
    assert len(lines) == 1, "\n".join(run.log)
    return lines[0]


def assert_failed(run: Run, message: str) -> None:
    """Exit 1, ``message`` in the CI log and in the comment, nothing left in the cluster."""
    assert run.code == 1, "\n".join(run.log)
    assert "### ❌ Training failed: `simple-ml`" in run.comment, run.comment
    assert message in run.comment, run.comment
    assert not any("Traceback" in line for line in run.log), "\n".join(run.log)
