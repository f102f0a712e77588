"""``distributed: torchrun`` on this machine, with a stand-in torchrun (testing/fake_torchrun.py,
found as ``torch.distributed.run`` through PYTHONPATH) and tiny rank scripts.

Everything but torchrun is real: git worktrees, virtualenvs, pip, processes, signals. The real
torchrun and DDP run in tests/test_local_ddp_e2e.py.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from ci_runner.backends.local import pyenv
from ci_runner.backends.local.backend import LocalOptions
from ci_runner.backends.local.torchrun import local_torchrun_argv
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.clock import ManualClock
from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.errors import EnvironmentSetupError
from ci_runner.plan.mpijob_name import mpijob_name
from ci_runner.plan.run_plan import build_plan
from ci_runner.settings import ProcessEnvironment
from testing import fake_torchrun
from testing import local_backend as local
from testing.paths import TEST_DATA

RANK_LINE = re.compile(r"\[\d+\]<std>:")
TORCHRUN_LOGS = TEST_DATA / "torchrun"  # what real torchrun wrote (their capture.sh)
PRINT_RANK = """\
import os
names = ["RANK", "WORLD_SIZE", "CI_RUNNER_SHA", "CI_RUNNER_JOB", "DATA_URI", "LEVEL",
         "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"]
print(" ".join(f"{n}={os.environ.get(n)}" for n in names), flush=True)
"""


@pytest.fixture
def torch_path(tmp_path: Path) -> Path:
    """A directory holding a ``torch`` whose ``torch.distributed.run`` is the stand-in."""
    return fake_torchrun.install(tmp_path / "fake-torch")


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "torchrun-calls.jsonl"


def config(**changes: object) -> TrainConfig:
    """The toy job as a torchrun job, with ``changes``."""
    torch = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    return local.config(**{"image": torch, "distributed": "torchrun", **changes})


def torch_options(
    repo: Path,
    tmp_path: Path,
    base: pyenv.BaseEnvironment,
    torch_path: Path | None,
    record: Path | None = None,
) -> LocalOptions:
    """Options without any horovodrun: a torchrun job must not need one."""
    opts = local.options(repo, tmp_path, None, base)
    extra = {"FAKE_TORCHRUN_RECORD": str(record)} if record else {}
    if torch_path is not None:
        extra["PYTHONPATH"] = str(torch_path)
    return replace(opts, environ=ProcessEnvironment({**opts.environ, **extra}))


def rank_lines(screen: local.Screen) -> list[str]:
    return sorted(line for line in screen.text.splitlines() if RANK_LINE.match(line))


def test_local_torchrun_argv_is_one_standalone_node_of_every_rank() -> None:
    plan = build_plan(
        config(workers=2, slots_per_worker=3, command=("python", "-u", "train.py", "--lr", "1")),
        CIContext(sha="0" * 40, project_path=local.PROJECT),
    )

    argv = local_torchrun_argv(plan, Path("/venv/bin/python"), Path("/cache/torchrun-logs-x"))

    assert argv == [
        "/venv/bin/python",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "6",
        "--tee",
        "3",
        "--log-dir",
        "/cache/torchrun-logs-x",
        "--no-python",
        "--",
        "python",
        "-u",
        "train.py",
        "--lr",
        "1",
    ]


def test_a_torchrun_job_runs_every_rank_with_torch_alone(
    git_repo: local.GitRepo,
    tmp_path: Path,
    base: pyenv.BaseEnvironment,
    torch_path: Path,
    record: Path,
) -> None:
    repo, sha = git_repo({"train.py": PRINT_RANK})
    cfg = config(data="s3://datasets/toy/", env=(("LEVEL", "3"),))
    runner = local.RecordingRunner()

    result, screen = local.run(
        cfg, sha, torch_options(repo, tmp_path, base, torch_path, record), tmp_path, runner
    )

    job = mpijob_name(cfg, CIContext(sha=sha, project_path=local.PROJECT))
    expected = f"WORLD_SIZE=2 CI_RUNNER_SHA={sha} CI_RUNNER_JOB={job} DATA_URI=s3://datasets/toy/"
    # torch 2.13's torchrun takes the lines' prefix from its environment alone.
    prefix = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[${rank}]<std>:"
    assert rank_lines(screen) == [
        f"[0]<std>:RANK=0 {expected} LEVEL=3 {prefix}",
        f"[1]<std>:RANK=1 {expected} LEVEL=3 {prefix}",
    ]
    assert result.outcome is Outcome.SUCCEEDED
    assert result.mpijob_name == job
    # No horovodrun anywhere (none exists): only the check that torch is importable ran.
    assert [call[:2] for call in runner.calls] == [[str(base.python), "-c"]]
    assert "horovod" not in screen.text.lower()
    (call,) = [json.loads(line) for line in record.read_text().splitlines()]
    logs = Path(call[6])
    assert call == [
        *("--standalone", "--nproc-per-node", "2", "--tee", "3", "--log-dir", str(logs)),
        *("--no-python", "--", "python", "train.py"),
    ]
    # torchrun's copies of the ranks' output (unmasked) live in the cache for the run alone.
    assert logs.parent == tmp_path / "cache" and logs.name.startswith("torchrun-logs-")
    assert not logs.exists()
    assert screen.status[-1] == (
        f"[ci-runner] starting 2 ranks on this machine: {base.python} -m torch.distributed.run "
        f"--standalone --nproc-per-node 2 --tee 3 --log-dir {logs} --no-python -- python train.py"
    )
    streamed = [line for line in screen.text.splitlines() if not line.startswith("[ci-runner]")]
    assert result.log_path.read_text().splitlines() == streamed


def test_torchrun_runs_with_the_requirements_virtualenvs_python(
    git_repo: local.GitRepo, tmp_path: Path, base: pyenv.BaseEnvironment, torch_path: Path
) -> None:
    # PyYAML is in the base environment: the layer sees it, so pip has nothing to download.
    repo, sha = git_repo({"train.py": local.PRINT_PREFIX, "requirements.txt": "PyYAML\n"})
    cfg = config(workers=1, requirements="requirements.txt")
    runner = local.RecordingRunner()

    result, screen = local.run(
        cfg, sha, torch_options(repo, tmp_path, base, torch_path), tmp_path, runner
    )

    (layer,) = (tmp_path / "cache" / "venvs").iterdir()
    python = layer / "bin" / "python"
    assert [call[:3] for call in runner.calls] == [
        [str(base.python), "-m", "venv"],
        [str(python), "-m", "pip"],
        [str(python), "-c", runner.calls[2][2]],  # torch, as the launcher will see it
    ]
    assert screen.status[-1].startswith(
        f"[ci-runner] starting 1 ranks on this machine: {python} -m torch.distributed.run "
    )
    assert rank_lines(screen) == [f"[0]<std>:{layer}"]  # `python` on the ranks' PATH: the layer's
    assert result.succeeded


def test_without_torch_one_line_says_how_to_install_it(
    git_repo: local.GitRepo, tmp_path: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": "print()\n"})
    # A PYTHONPATH whose torch has no launcher: what the check looks for.
    (tmp_path / "no-launcher" / "torch").mkdir(parents=True)
    (tmp_path / "no-launcher" / "torch" / "__init__.py").write_text("")
    opts = torch_options(repo, tmp_path, base, tmp_path / "no-launcher")
    runner = local.RecordingRunner()

    with pytest.raises(EnvironmentSetupError) as caught:
        local.run(config(), sha, opts, tmp_path, runner)

    assert str(caught.value) == (
        f"torch is not installed for {base.python}, and train.yaml's distributed: torchrun "
        "starts the ranks with its launcher (python -m torch.distributed.run); fix: run "
        "`make torch`, or scripts/setup-torch.sh <your virtualenv>, or list torch in "
        "train.yaml's requirements"
    )
    assert len(runner.calls) == 1  # the check; nothing was started


def test_a_failing_rank_fails_the_run_with_torchruns_exit_code(
    git_repo: local.GitRepo, tmp_path: Path, base: pyenv.BaseEnvironment, torch_path: Path
) -> None:
    repo, sha = git_repo({"train.py": local.FAILING})
    opts = torch_options(repo, tmp_path, base, torch_path)

    result, _ = local.run(config(workers=1), sha, opts, tmp_path)

    assert result.outcome is Outcome.FAILED
    assert result.failure == Failure(
        FailureKind.EXIT_CODE, "torchrun exited with code 1", exit_code=1
    )
    assert sorted(result.log_tail) == [
        "[0]<std>:boom: loss is nan",
        "[0]<std>:step 1",
        "[0]<std>:step 2",
    ]


@pytest.mark.parametrize(
    ("log", "message"),
    [
        # no @record: rank 1's own traceback (rank 0's gloo error came of it)
        ("raise", "rank 1 raised ValueError: boom at 0.5 (train.py:10)"),
        # @record: the report's traceback, from rank 1's error file
        ("raise_record", "rank 1 raised ValueError: boom at 0.5 (train.py:11)"),
        ("raise_early", "rank 1 raised KeyError: 'batch_size' (train.py:8)"),
        ("exit3", "rank 1 exited with code 3; its last line: giving up"),
        ("killed", "rank 1 was killed by signal 9 (SIGKILL)"),
    ],
)
def test_a_failed_run_names_its_first_failing_rank(
    git_repo: local.GitRepo,
    tmp_path: Path,
    base: pyenv.BaseEnvironment,
    torch_path: Path,
    log: str,
    message: str,
) -> None:
    """torchrun's output replayed as real torchrun wrote it (tests/data/torchrun/, two ranks)."""
    repo, sha = git_repo({"train.py": "print()\n"})
    opts = torch_options(repo, tmp_path, base, torch_path)
    replay = {"FAKE_TORCHRUN_REPLAY": str(TORCHRUN_LOGS / f"{log}.log")}
    opts = replace(opts, environ=ProcessEnvironment({**opts.environ, **replay}))

    result, _ = local.run(config(workers=1, slots_per_worker=2), sha, opts, tmp_path)

    assert (result.outcome, result.failure) == (
        Outcome.FAILED,
        Failure(FailureKind.EXIT_CODE, f"torchrun exited with code 1: {message}", exit_code=1),
    )


def test_a_run_that_succeeded_says_no_rank(
    git_repo: local.GitRepo, tmp_path: Path, base: pyenv.BaseEnvironment, torch_path: Path
) -> None:
    repo, sha = git_repo({"train.py": "print()\n"})
    opts = torch_options(repo, tmp_path, base, torch_path)
    replay = {"FAKE_TORCHRUN_REPLAY": str(TORCHRUN_LOGS / "ok.log")}
    opts = replace(opts, environ=ProcessEnvironment({**opts.environ, **replay}))

    result, _ = local.run(config(workers=1, slots_per_worker=2), sha, opts, tmp_path)

    assert (result.outcome, result.failure) == (Outcome.SUCCEEDED, None)


def test_the_timeout_stops_every_torchrun_rank(
    git_repo: local.GitRepo, tmp_path: Path, base: pyenv.BaseEnvironment, torch_path: Path
) -> None:
    repo, sha = git_repo({"train.py": local.SLEEPER})
    clock = ManualClock()
    # The job's time is up once both ranks are running.
    screen = local.RankWatch(then=lambda: clock.advance(61))
    opts = torch_options(repo, tmp_path, base, torch_path)
    with LogSink(tmp_path / "train.log", screen) as sink:
        result = local.make_backend(config(timeout=60), sha, opts, sink, screen, clock).run()

    assert result.failure == Failure(FailureKind.DEADLINE, "training ran past its timeout of 60s")
    assert len(screen.pids) == 2
    assert screen.alive() == []


def test_cancel_stops_every_torchrun_rank(
    git_repo: local.GitRepo, tmp_path: Path, base: pyenv.BaseEnvironment, torch_path: Path
) -> None:
    repo, sha = git_repo({"train.py": local.SLEEPER})
    screen = local.RankWatch()
    opts = torch_options(repo, tmp_path, base, torch_path)
    sink = LogSink(tmp_path / "train.log", screen)
    backend = local.make_backend(config(), sha, opts, sink, screen)
    screen.then = lambda: threading.Thread(target=backend.cancel).start()

    result = backend.run()

    assert result.outcome is Outcome.CANCELLED
    assert screen.status[-2:] == [
        "[ci-runner] interrupted: stopping every rank",
        "[ci-runner] every rank stopped",
    ]
    assert len(screen.pids) == 2
    assert screen.alive() == []
