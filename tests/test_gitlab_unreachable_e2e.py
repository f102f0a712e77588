"""With GitLab unreachable, ``ci-runner train --local`` on the example in a GitLab CI job trains,
says so in one warning line, exits 0, and is done well within 60 s of the training's end. Real
horovodrun, real sockets: a port nobody listens on, and a black hole that accepts connections and
never answers."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.git import run_git
from testing.local_training import (
    BIN,
    CONFIG,
    HOROVOD_MISSING,
    TRAIN_LINE,
    base_env,
    prepare_data,
)
from testing.ports import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(HOROVOD_MISSING, reason="Horovod is not installed in this environment"),
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ci-runner-cache")


@pytest.fixture
def refused() -> str:
    return f"http://127.0.0.1:{free_port()}"  # a loopback port nobody listens on


@pytest.fixture
def black_hole() -> Iterator[str]:
    """Accepts every connection and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        server.close()


def ci_env(repo: Path, cache_dir: Path, server_url: str) -> dict[str, str]:
    sha = run_git(["rev-parse", "HEAD"], repo)
    return base_env(
        cache_dir,
        GITLAB_CI="true",
        CI_SERVER_URL=server_url,
        CI_PROJECT_ID="42",
        CI_PROJECT_PATH="team/simple_ml",
        CI_PROJECT_URL=f"{server_url}/team/simple_ml",
        CI_COMMIT_SHA=sha,
        CI_COMMIT_REF_NAME="faster",
        CI_DEFAULT_BRANCH="main",
        CI_PIPELINE_ID="1001",
        CI_PIPELINE_SOURCE="merge_request_event",
        CI_JOB_ID="5005",
        CI_JOB_NAME="train",
        CI_MERGE_REQUEST_IID="7",
        CI_MERGE_REQUEST_PROJECT_ID="42",
        CI_MERGE_REQUEST_SOURCE_PROJECT_ID="42",
        CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main",
        CI_RUNNER_GITLAB_TOKEN="glpat-unreachable-test",
    )


@pytest.mark.parametrize("where", ["refused", "black_hole"])
def test_gitlab_unreachable_is_one_warning_and_never_the_result(
    tmp_path: Path, example_project: Path, cache: Path, where: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue(where)
    env = ci_env(example_project, cache, url)
    data = (tmp_path / "data").as_uri()
    prepare_data(example_project, data, env)
    args = [str(BIN / "ci-runner"), "train", "--local", "--config", CONFIG, "--data", data]
    args += ["--outputs", (tmp_path / "model").as_uri()]
    process = subprocess.Popen(
        args,
        cwd=example_project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None
    stderr_lines: list[str] = []
    reader = threading.Thread(target=lambda: stderr_lines.extend(stderr), daemon=True)
    reader.start()
    first_training = last_training = None
    for line in stdout:
        if TRAIN_LINE.match(line.rstrip("\n")):
            now = time.monotonic()
            first_training = first_training or now
            last_training = now
    code = process.wait(timeout=600)
    ended = time.monotonic()
    reader.join(timeout=10)

    assert code == 0, "".join(stderr_lines)
    assert first_training is not None and last_training is not None
    assert ended - last_training < 60
    warnings = [line for line in stderr_lines if "warning" in line]
    assert len(warnings) == 1, "".join(stderr_lines)
    if where == "refused":
        assert warnings[0].startswith(
            f"[ci-runner] warning: not commenting on GitLab: cannot sign in to GitLab at {url}: "
            f"GitLab at {url} did not answer (ConnectionError, after retries)"
        )
    else:
        assert warnings[0] == (
            f"[ci-runner] warning: not commenting on GitLab: cannot sign in to GitLab at {url}: "
            f"GitLab at {url} did not answer within the 20 s ci-runner gives it; fix: check "
            "CI_SERVER_URL and the runner's network, or give it more time in "
            "CI_RUNNER_GITLAB_TIMEOUT (seconds)\n"
        )
