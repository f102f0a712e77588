"""torchrun.sh (templates/scripts/), the main container of torchrun's pods, run for real with
/bin/sh: a fake ``python`` in the virtualenv's bin shows what torchrun would be started with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ci_runner.render import pod_scripts

SHA = "0123456789abcdef0123456789abcdef01234567"
ARGV = [
    *("python", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1"),
    *("--rdzv-backend", "static", "--rdzv-conf", "timeout=2400"),
    *("--master-port", "29500", "--tee", "3", "--no-python", "--"),
    *("python", "train.py", "--nnodes", "$(X)", "a b"),
]
# What the fake python prints: its working directory, PATH's first entry, HOME, then each
# argument on a line of its own.
FAKE_PYTHON = '#!/bin/sh\npwd\nprintf "%s\\n" "${PATH%%:*}" "$HOME" "$@"\n'


@pytest.fixture
def pod(tmp_path: Path) -> dict[str, str]:
    """The pod as its init containers leave it, and the container's environment."""
    script = tmp_path / "scripts" / "torchrun.sh"
    script.parent.mkdir()
    script.write_text(pod_scripts(torchrun=True)["torchrun.sh"], encoding="utf-8")
    code = tmp_path / "code"
    (code / ".git").mkdir(parents=True)
    (code / ".git" / "HEAD").write_text(SHA + "\n")
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return {
        "PATH": os.environ["PATH"],
        "HOME": "/nonexistent",
        "CI_RUNNER_CODE_DIR": str(code),
        "CI_RUNNER_VENV": str(tmp_path / "venv"),
        "CI_RUNNER_HOME": str(tmp_path / "home"),
        "CI_RUNNER_SHA": SHA,
        "CI_RUNNER_JOB": "ddp-01234567-5005",
        "POD_NAMESPACE": "ml",
        "JOB_COMPLETION_INDEX": "1",
        "SCRIPT": str(script),
    }


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", env["SCRIPT"], *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_it_adds_the_nodes_rank_and_node_0s_address_then_runs_torchrun(
    pod: dict[str, str], tmp_path: Path
) -> None:
    done = _run(pod, *ARGV)
    assert (done.returncode, done.stderr) == (0, "")
    cwd, path, home, *argv = done.stdout.splitlines()
    assert (cwd, path, home) == (
        str(tmp_path / "code"),
        str(tmp_path / "venv" / "bin"),
        str(tmp_path / "home"),
    )
    assert (tmp_path / "home").is_dir()
    # The fake python is the program: its own name is not an argument.
    assert argv == [
        *("-m", "torch.distributed.run"),
        *("--node-rank", "1", "--master-addr", "ddp-01234567-5005-0.ddp-01234567-5005.ml.svc"),
        *ARGV[3:],
    ]


def test_a_writable_home_is_kept(pod: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "own-home").mkdir()
    done = _run({**pod, "HOME": str(tmp_path / "own-home")}, *ARGV)
    assert done.stdout.splitlines()[2] == str(tmp_path / "own-home")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"CI_RUNNER_SHA": "f" * 40},
            "ci-runner: {code} is not at commit ffffffffffffffffffffffffffffffffffffffff; fix: "
            "the fetch-code init container must run first",
        ),
        (
            {"POD_NAMESPACE": ""},
            "ci-runner: CI_RUNNER_JOB and POD_NAMESPACE must be set; fix: render the job with "
            "ci-runner",
        ),
        (
            {"JOB_COMPLETION_INDEX": "x1"},
            "ci-runner: JOB_COMPLETION_INDEX 'x1' is not a node's index; fix: run it in an "
            "Indexed Job (completionMode: Indexed)",
        ),
    ],
)
def test_it_refuses_a_pod_not_made_for_it(
    pod: dict[str, str], tmp_path: Path, change: dict[str, str], message: str
) -> None:
    done = _run({**pod, **change}, *ARGV)
    expected = message.format(code=tmp_path / "code") + "\n"
    assert (done.returncode, done.stdout, done.stderr) == (1, "", expected)


def test_it_refuses_arguments_without_torchruns_options(pod: dict[str, str]) -> None:
    done = _run(pod, "python", "train.py")
    assert (done.returncode, done.stderr) == (
        1,
        "ci-runner: no torchrun options in 'python train.py'; fix: render the job with ci-runner\n",
    )
