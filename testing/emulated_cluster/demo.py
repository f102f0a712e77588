"""``python -m testing.emulated_cluster.demo`` (``make demo-cluster``, as root): the example trained
through ``ci-runner train`` on the Kubernetes backend, on the emulated cluster with real nodes
(kubelet v1.35.4 and containerd running ``horovod/horovod:0.28.1`` as built from Debian's packages
and this virtualenv's torch and Horovod), with its data and model on the cluster's S3. The commit
trained is this checkout's HEAD plus a ``train.yaml`` for the emulated nodes (no GPU, S3 on the
bridge), served to the pods by ``git daemon`` on the bridge.
Everything it starts is removed when it ends. A way to see the whole Kubernetes path on one
machine, not a cluster to train on."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import yaml
from moto.server import ThreadedMotoServer

from testing.emulated_cluster import nodeimages
from testing.emulated_cluster.__main__ import missing_tools
from testing.emulated_cluster.harness import NAMESPACE, emulated
from testing.host import cgroups, marks
from testing.host.cgroups import Cgroup
from testing.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "simple_ml"
S3 = f"http://{marks.GATEWAY}:{marks.S3_PORT}"
GIT_PORT = 9418
REPO_URL = f"git://{marks.GATEWAY}:{GIT_PORT}/demo/simple_ml.git"
AWS = {  # moto accepts any key; these stand for the CI variables a project would set
    "AWS_ACCESS_KEY_ID": "demo-access-key",
    "AWS_SECRET_ACCESS_KEY": "demo-secret-key",
    "AWS_ENDPOINT_URL": S3,
    "AWS_DEFAULT_REGION": "us-east-1",
}
TRAIN_LOSS = (
    r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)"
)


def train_yaml() -> dict[str, object]:
    """The example's train.yaml for the emulated nodes: no GPU, S3 on the bridge, no index."""
    example = yaml.safe_load((EXAMPLE / "train.yaml").read_text())
    return {
        "name": example["name"],
        "image": example["image"],
        "command": example["command"],
        "workers": 2,
        "requirements": example["requirements"],
        "data": example["data"],
        "outputs": example["outputs"],
        "env": {
            "EPOCHS": "5",
            "AWS_ENDPOINT_URL": S3,
            "AWS_DEFAULT_REGION": "us-east-1",
            "PIP_NO_INDEX": "1",
        },
        "secrets": ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
        "metrics": {"train_loss": {"pattern": TRAIN_LOSS, "goal": "min"}},
        "timeout": "15m",
        "kubernetes": {"namespace": NAMESPACE, "dns_config": {"nameservers": [marks.GATEWAY]}},
    }


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def commit_for_the_cluster(work: Path) -> Path:
    """HEAD of this checkout plus the emulated cluster's train.yaml, as a bare repository."""
    repo = work / "repo"
    git("clone", "-q", str(REPO_ROOT), str(repo), cwd=work)
    (repo / "train.yaml").write_text(yaml.safe_dump(train_yaml(), sort_keys=False))
    identity = ["-c", "user.name=demo", "-c", "user.email=demo@localhost"]
    git("add", "train.yaml", cwd=repo)
    git(*identity, "commit", "-q", "-m", "train.yaml for the emulated cluster", cwd=repo)
    served = work / "served"
    git("clone", "-q", "--bare", str(repo), str(served / "demo" / "simple_ml.git"), cwd=work)
    git("remote", "set-url", "origin", REPO_URL, cwd=repo)  # where the pods fetch it from
    return repo


def serve_git(base: Path, cgroup: Cgroup) -> subprocess.Popen[bytes]:
    """``git daemon`` serving the repositories under ``base`` to the pods, on the bridge, in
    ``cgroup`` (the run's: a killed test's daemon goes with the cluster's stop or next start)."""
    return subprocess.Popen(
        [
            "git",
            "daemon",
            "--reuseaddr",
            "--export-all",
            f"--base-path={base}",
            f"--listen={marks.GATEWAY}",
            f"--port={GIT_PORT}",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=cgroup.add_self,
    )


@contextmanager
def s3_and_git(served: Path, aws: Mapping[str, str]) -> Iterator[Any]:
    """On the emulated cluster's bridge: a moto S3 with the buckets ``datasets`` (holding the
    example's data, put there with the credentials in ``aws``) and ``models``, and ``git daemon``
    serving the repositories under ``served``. Yields a boto3 client of that S3."""
    s3 = ThreadedMotoServer(ip_address=marks.GATEWAY, port=marks.S3_PORT, verbose=False)
    s3.start()
    daemon = serve_git(served, Cgroup(cgroups.run_root() / "system"))
    try:
        client = boto3.client(
            "s3",
            endpoint_url=S3,
            region_name="us-east-1",
            aws_access_key_id=aws["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=aws["AWS_SECRET_ACCESS_KEY"],
        )
        for bucket in ("datasets", "models"):
            client.create_bucket(Bucket=bucket)
        data = subprocess.run(
            [sys.executable, str(EXAMPLE / "prepare_data.py"), "s3://datasets/diabetes/"],
            env={**os.environ, **aws, "AWS_ENDPOINT_URL": S3, "AWS_DEFAULT_REGION": "us-east-1"},
            stdout=2,  # its one line of progress goes with the caller's (stderr)
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if data.returncode != 0:
            raise RuntimeError(f"prepare_data.py failed:\n{data.stderr}")
        yield client
    finally:
        daemon.terminate()
        daemon.wait(10)
        s3.stop()


def main() -> int:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per S3 request
    if os.geteuid() != 0:
        print("error: the emulated cluster needs root: run it with sudo", file=sys.stderr)
        return 1
    missing = missing_tools()
    if missing:
        print(f"error: missing tools: {', '.join(missing)}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="ci-runner-demo-") as tmp:
        work = Path(tmp)
        repo = commit_for_the_cluster(work)
        with (
            emulated(nodes=2) as cluster,
            s3_and_git(work / "served", AWS) as client,
        ):
            kubeconfig = work / "kubeconfig"
            # Only what examples/rbac.yaml grants, as in a cluster set up by the README.
            kubeconfig.write_text(yaml.safe_dump(cluster.ci_runner_kubeconfig(NAMESPACE)))
            train = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ci_runner",
                    "train",
                    "--output-dir",
                    str(REPO_ROOT / "demo-output" / "cluster"),
                ],
                cwd=repo,
                env={
                    **os.environ,
                    **AWS,
                    "KUBECONFIG": str(kubeconfig),
                    "PYTHONPATH": str(REPO_ROOT),
                    "CI_RUNNER_ALLOW_GIT_PROTOCOL": "1",  # git daemon on the bridge
                    # ci-runner's image stands for itself nowhere here: a node image with git.
                    "CI_RUNNER_SETUP_IMAGE": nodeimages.MPI_IMAGE,
                },
                check=False,
            )
            for item in client.list_objects_v2(Bucket="models").get("Contents", []):
                print(
                    f"[demo] on the emulated cluster's S3: s3://models/{item['Key']} "
                    f"({item['Size']} bytes)"
                )
            return train.returncode


if __name__ == "__main__":
    sys.exit(main())
