"""End to end: the real example trained by real horovodrun + Horovod (gloo, CPU), 2 ranks, through
``ci-runner train --local``; data and model on file:// and on S3 (a moto server on loopback). Its
DDP version the same way with real torchrun (train-ddp.yaml: ``distributed: torchrun``).

Needs Horovod with PyTorch in this environment (the DDP tests only torch): `make test` installs it
first (scripts/setup-horovod.sh), so these run in CI; elsewhere they skip, saying how to install it.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ci_runner.backends.local.proctree import process_alive
from testing.git import run_git
from testing.local_training import (
    BIN,
    CONFIG,
    DDP_CONFIG,
    DDP_TEST_LINE,
    DDP_TRAIN_LINE,
    HOROVOD_MISSING,
    TEST_LINE,
    TORCH_MISSING,
    TRAIN_LINE,
    base_env,
    prepare_data,
)

pytestmark = pytest.mark.slow
needs_horovod = pytest.mark.skipif(
    HOROVOD_MISSING,
    reason="Horovod is not installed in this environment; run `make horovod` "
    "(scripts/setup-horovod.sh .venv) to build it",
)
needs_torch = pytest.mark.skipif(
    TORCH_MISSING,
    reason="torch is not installed in this environment; run `make torch` "
    "(scripts/setup-torch.sh .venv) to install it",
)


EPOCHS = 20


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ci-runner cache for the module: the Horovod check and the layer happen once."""
    return tmp_path_factory.mktemp("ci-runner-cache")


def train(
    repo: Path, env: dict[str, str], *args: str, config: str = CONFIG
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ci-runner"), "train", "--local", "--config", config, *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def check_training_log(
    log: str, train_line: re.Pattern[str] = TRAIN_LINE, test_line: re.Pattern[str] = TEST_LINE
) -> None:
    """Both ranks' loss for every epoch, falling, and the test loss from both ranks."""
    losses: dict[int, dict[int, float]] = {0: {}, 1: {}}
    tests: dict[int, float] = {}
    for line in log.splitlines():
        if match := train_line.match(line):
            prefix, epoch, loss, worker = match.groups()
            assert prefix == worker
            losses[int(worker)][int(epoch)] = float(loss)
        elif match := test_line.match(line):
            tests[int(match[3])] = float(match[2])
    for rank in (0, 1):
        assert sorted(losses[rank]) == list(range(EPOCHS)), f"rank {rank}: {losses[rank]}"
        assert losses[rank][EPOCHS - 1] < losses[rank][0]
    assert sorted(tests) == [0, 1]
    assert tests[0] == tests[1] > 0  # the test loss is averaged over the ranks


def summary_value(stderr: str, key: str) -> str:
    match = re.search(rf"^\[ci-runner\] {key}: (.+)$", stderr, re.MULTILINE)
    assert match, stderr
    return match[1]


def load_model(data: bytes) -> dict[str, object]:
    import torch

    checkpoint: dict[str, object] = torch.load(io.BytesIO(data), weights_only=False)
    return checkpoint


@dataclass(frozen=True)
class Flavour:
    """The example as one of its train.yaml files runs it, and what its ranks' lines look like."""

    config: str
    name: str  # train.yaml's name, the start of the job's
    train_line: re.Pattern[str]
    test_line: re.Pattern[str]


FLAVOURS = [
    pytest.param(
        Flavour(CONFIG, "simple-ml", TRAIN_LINE, TEST_LINE),
        marks=needs_horovod,
        id="horovod",
    ),
    pytest.param(
        Flavour(DDP_CONFIG, "simple-ml-ddp", DDP_TRAIN_LINE, DDP_TEST_LINE),
        marks=needs_torch,
        id="ddp",
    ),
]


def check_no_horovod(flavour: Flavour, stderr: str) -> None:
    """A torchrun job checks and starts nothing of Horovod's."""
    if flavour.config == DDP_CONFIG:
        assert "horovodrun" not in stderr, stderr
        assert " -m torch.distributed.run --standalone --nproc-per-node 2 " in stderr, stderr


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_trains_the_example_with_files(
    tmp_path: Path, example_project: Path, cache: Path, flavour: Flavour
) -> None:
    env = base_env(cache)
    data = (tmp_path / "data").as_uri()
    prepare_data(example_project, data, env)
    out = tmp_path / "model-out"

    done = train(
        example_project, env, "--data", data, "--outputs", out.as_uri(), config=flavour.config
    )

    assert done.returncode == 0, done.stderr
    check_training_log(done.stdout, flavour.train_line, flavour.test_line)
    check_no_horovod(flavour, done.stderr)
    log_file = Path(summary_value(done.stderr, "log"))
    assert log_file.read_text() == done.stdout  # the saved log is exactly what was streamed
    assert summary_value(done.stderr, "outputs") == out.as_uri()
    model = load_model((out / "model.pt").read_bytes())
    assert set(model) == {"state_dict", "feature_names", "feature_mean", "feature_std", "test_mse"}


@pytest.fixture
def s3() -> Iterator[Callable[[], object]]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"

    def client() -> object:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    client.endpoint = endpoint  # type: ignore[attr-defined]
    try:
        yield client
    finally:
        server.stop()


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_trains_the_example_with_s3(
    example_project: Path, cache: Path, s3: Callable[[], object], flavour: Flavour
) -> None:
    client = s3()
    for bucket in ("datasets", "models"):
        client.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
    env = base_env(
        cache,
        AWS_ENDPOINT_URL=s3.endpoint,  # type: ignore[attr-defined]
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    prepare_data(example_project, "s3://datasets/diabetes/", env)

    done = train(example_project, env, config=flavour.config)  # its own data and outputs

    assert done.returncode == 0, done.stderr
    check_training_log(done.stdout, flavour.train_line, flavour.test_line)
    check_no_horovod(flavour, done.stderr)
    outputs = summary_value(done.stderr, "outputs")
    sha = run_git(["rev-parse", "HEAD"], example_project)
    assert outputs.startswith(f"s3://models/project/{sha}/{flavour.name}-{sha[:8]}-")
    key = outputs.removeprefix("s3://models/") + "model.pt"
    body = client.get_object(Bucket="models", Key=key)["Body"].read()  # type: ignore[attr-defined]
    assert load_model(body)["feature_names"] == [
        "age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"
    ]  # fmt: skip


SLEEPY_TRAIN_YAML = """\
name: sleepy
image: horovod/horovod:0.28.1
command: python sleepy.py
workers: 2
"""
SLEEPY = """\
import os, time
import horovod.torch as hvd
hvd.init()
print(f"pid {os.getpid()}", flush=True)
time.sleep(600)
"""
SLEEPY_DDP = """\
import os, time
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"pid {os.getpid()}", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize(
    ("train_yaml", "script", "stdout"),
    [
        pytest.param(SLEEPY_TRAIN_YAML, SLEEPY, "<stdout>", marks=needs_horovod, id="horovod"),
        pytest.param(
            f"{SLEEPY_TRAIN_YAML}distributed: torchrun\n",
            SLEEPY_DDP,
            "<std>",
            marks=needs_torch,
            id="ddp",
        ),
    ],
)
def test_ctrl_c_stops_every_real_rank(
    git_repo: Callable[..., tuple[Path, str]],
    cache: Path,
    train_yaml: str,
    script: str,
    stdout: str,
) -> None:
    repo, _ = git_repo({"train.yaml": train_yaml, "sleepy.py": script})
    proc = subprocess.Popen(
        [str(BIN / "ci-runner"), "train", "--local"],
        cwd=repo,
        env=base_env(cache),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    pids: list[int] = []
    try:
        for line in proc.stdout:
            pids.extend(int(p) for p in re.findall(rf"{stdout}:pid (\d+)", line))
            if len(pids) == 2:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5  # real processes, reaped by the kernel
    while any(process_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if process_alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)

    assert len(pids) == 2
    assert left == []
    assert proc.returncode == 130
    assert "[ci-runner] every rank stopped\n" in err
    assert "[ci-runner] training cancelled" in err
