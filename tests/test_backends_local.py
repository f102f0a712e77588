"""The local backend with a stand-in horovodrun (testing/fake_horovodrun.py) and tiny rank scripts.

Everything here is real except horovodrun itself: git worktrees, virtualenvs, pip, processes,
signals. The real horovodrun + Horovod run in tests/test_local_e2e.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from ci_runner.backends.local import pyenv
from ci_runner.backends.local.backend import local_hosts, run_local, write_discovery_script
from ci_runner.backends.local.proctree import process_alive
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.clock import ManualClock
from ci_runner.config.types import Elastic
from ci_runner.console import Console
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, EnvironmentSetupError
from ci_runner.masking import SecretMasker
from ci_runner.plan.mpijob_name import mpijob_name
from ci_runner.plan.run_plan import build_plan
from ci_runner.settings import ProcessEnvironment
from testing.local_backend import (
    FAILING,
    PRINT_PREFIX,
    PROJECT,
    SLEEPER,
    GitRepo,
    RankWatch,
    RecordingRunner,
    Screen,
    config,
    make_backend,
    options,
    plan_for,
    run,
)


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "horovodrun-calls.jsonl"


def rank_lines(console: Screen) -> list[str]:
    return sorted(line for line in console.text.splitlines() if re.match(r"\[\d+\]<", line))


PRINT_ENV = """\
import os
names = ["DATA_URI", "OUTPUT_URI", "CI_RUNNER_SHA", "CI_RUNNER_JOB", "CI_RUNNER_PROJECT",
         "LEVEL", "API_KEY", "CI_JOB_TOKEN", "CI_RUNNER_GITLAB_TOKEN"]
print(" ".join(f"{n}={os.environ.get(n)}" for n in names), flush=True)
"""


def test_every_rank_gets_the_pods_environment(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, record: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": PRINT_ENV})
    cfg = config(
        data="s3://datasets/toy/",
        outputs="s3://models/{project}/{sha}/{job}/",
        env=(("LEVEL", "3"),),
        secrets=("API_KEY",),
    )
    opts = options(repo, tmp_path, horovodrun, base, record)
    opts = replace(
        opts,
        environ=ProcessEnvironment(
            {
                **opts.environ,
                "API_KEY": "s3cr3t-value",
                "CI_JOB_TOKEN": "job-token-value",
                "CI_RUNNER_GITLAB_TOKEN": "glpat-api-token-value",
            }
        ),
    )

    result, console = run(cfg, sha, opts, tmp_path, masker=SecretMasker(["s3cr3t-value"]))

    job = mpijob_name(cfg, CIContext(sha=sha, project_path=PROJECT))
    expected = (
        f"DATA_URI=s3://datasets/toy/ OUTPUT_URI=s3://models/{PROJECT}/{sha}/{job}/ "
        f"CI_RUNNER_SHA={sha} CI_RUNNER_JOB={job} CI_RUNNER_PROJECT={PROJECT} LEVEL=3 "
        "API_KEY=[MASKED] CI_JOB_TOKEN=None CI_RUNNER_GITLAB_TOKEN=None"
    )
    assert rank_lines(console) == [f"[0]<stdout>:{expected}", f"[1]<stdout>:{expected}"]
    assert result.outcome is Outcome.SUCCEEDED
    assert result.mpijob_name == job
    assert result.failure is None
    assert result.exit_code == 0
    # The saved log is the streamed log, in arrival order, without ci-runner's status lines.
    streamed = [line for line in console.text.splitlines() if not line.startswith("[ci-runner]")]
    assert result.log_path.read_text().splitlines() == streamed
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls == [
        ["--check-build"],
        ["-np", "2", "-H", "localhost:2", "--gloo", "python", "train.py"],
    ]
    assert console.status[-1] == (
        f"[ci-runner] starting 2 ranks on this machine: {horovodrun} -np 2 -H localhost:2 "
        "--gloo python train.py"
    )


def test_output_and_data_overrides_are_passed_as_given(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": PRINT_ENV})
    cfg = config(workers=1, data="s3://datasets/toy/", outputs="s3://m/{job}/")
    opts = options(repo, tmp_path, horovodrun, base)

    _, console = run(cfg, sha, opts, tmp_path, data_uri="file:///d/", output_uri="file:///o")

    assert rank_lines(console)[0].startswith(
        "[0]<stdout>:DATA_URI=file:///d/ OUTPUT_URI=file:///o "
    )


def test_the_pinned_commit_runs_not_a_later_one(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, first = git_repo({"train.py": "print('code A', flush=True)\n"})
    git_repo({"train.py": "print('code B', flush=True)\n", "later.txt": "new\n"})
    opts = options(repo, tmp_path, horovodrun, base)

    result, console = run(config(), first, opts, tmp_path)

    assert rank_lines(console) == ["[0]<stdout>:code A", "[1]<stdout>:code A"]
    worktree = tmp_path / "cache" / "worktrees"
    (checkout,) = worktree.iterdir()
    assert checkout.name.endswith(first[:12])
    assert not (checkout / "later.txt").exists()
    assert f"[ci-runner] code: commit {first[:8]} checked out in {checkout}" in console.status
    assert result.succeeded


def test_a_dirty_working_tree_is_refused(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": "print('committed')\n"})
    (repo / "train.py").write_text("print('edited')\n")

    with pytest.raises(EnvironmentSetupError) as caught:
        run(config(), sha, options(repo, tmp_path, horovodrun, base), tmp_path)

    assert str(caught.value) == (
        f"{repo} has uncommitted changes and ci-runner trains commits; fix: commit them, or "
        "pass --allow-dirty to train the working tree as it is"
    )


def test_allow_dirty_runs_the_working_tree_as_it_is(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": "print('committed', flush=True)\n"})
    (repo / "train.py").write_text("print('edited', flush=True)\n")
    opts = options(repo, tmp_path, horovodrun, base, allow_dirty=True)

    result, console = run(config(workers=1), sha, opts, tmp_path)

    assert rank_lines(console) == ["[0]<stdout>:edited"]
    assert (
        f"[ci-runner] warning: running the uncommitted working tree {repo} as it is, not "
        f"commit {sha[:8]}" in console.status
    )
    assert result.succeeded


def test_allow_dirty_with_an_older_commit_still_runs_that_commit(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, first = git_repo({"train.py": "print('code A', flush=True)\n"})
    git_repo({"train.py": "print('code B', flush=True)\n"})
    (repo / "train.py").write_text("print('edited', flush=True)\n")
    opts = options(repo, tmp_path, horovodrun, base, allow_dirty=True)

    _, console = run(config(workers=1), first, opts, tmp_path)

    assert rank_lines(console) == ["[0]<stdout>:code A"]


def test_a_failing_command_reports_its_exit_code_and_the_log_tail(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": FAILING})

    result, _ = run(config(workers=1), sha, options(repo, tmp_path, horovodrun, base), tmp_path)

    assert result.outcome is Outcome.FAILED
    assert result.failure == Failure(
        FailureKind.EXIT_CODE, "horovodrun exited with code 3", exit_code=3
    )
    assert result.exit_code == 1
    assert sorted(result.log_tail) == [
        "[0]<stderr>:boom: loss is nan",
        "[0]<stdout>:step 1",
        "[0]<stdout>:step 2",
    ]


def test_requirements_layer_is_created_once_and_reused(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    # PyYAML is in the base environment: the layer sees it, so pip has nothing to download.
    repo, sha = git_repo({"train.py": PRINT_PREFIX, "requirements.txt": "PyYAML\n"})
    cfg = config(workers=1, requirements="requirements.txt")
    opts = options(repo, tmp_path, horovodrun, base)

    first_runner = RecordingRunner()
    first, first_console = run(cfg, sha, opts, tmp_path, runner=first_runner)
    second_runner = RecordingRunner()
    second, second_console = run(cfg, sha, opts, tmp_path, runner=second_runner)

    (layer,) = (tmp_path / "cache" / "venvs").iterdir()
    assert [c[:3] for c in first_runner.installs()] == [
        [str(base.python), "-m", "venv"],
        [str(layer / "bin" / "python"), "-m", "pip"],
    ]
    assert second_runner.calls == []  # no venv, no pip, and the Horovod check is remembered
    assert rank_lines(first_console) == [f"[0]<stdout>:{layer}"]
    assert rank_lines(second_console) == [f"[0]<stdout>:{layer}"]
    assert f"[ci-runner] requirements already installed: reusing {layer}" in (second_console.status)
    assert first.succeeded and second.succeeded


def test_a_changed_requirements_file_gets_a_new_layer(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, first = git_repo({"train.py": PRINT_PREFIX, "requirements.txt": "PyYAML\n"})
    _, second = git_repo({"requirements.txt": "PyYAML\nJinja2\n"})
    cfg = config(workers=1, requirements="requirements.txt")
    opts = options(repo, tmp_path, horovodrun, base)

    run(cfg, first, opts, tmp_path)
    run(cfg, second, opts, tmp_path)

    assert len(list((tmp_path / "cache" / "venvs").iterdir())) == 2


def test_a_failed_install_is_a_setup_failure_and_leaves_no_layer(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": PRINT_PREFIX, "requirements.txt": "no-such-package\n"})
    runner = RecordingRunner(fail=lambda argv: 1 if "pip" in argv else None)

    result, _ = run(
        config(workers=1, requirements="requirements.txt"),
        sha,
        options(repo, tmp_path, horovodrun, base),
        tmp_path,
        runner=runner,
    )

    message = (
        "pip could not install requirements.txt (exit code 1); fix: correct the requirements "
        "(pip's message is in the log above) and commit again"
    )
    assert result.failure == Failure(FailureKind.SETUP, message, exit_code=1)
    assert result.log_tail == ("ERROR: no matching distribution", f"[ci-runner] {message}")
    assert list((tmp_path / "cache" / "venvs").iterdir()) == []


def test_missing_horovodrun_says_how_to_install_it(
    git_repo: GitRepo, tmp_path: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": "print()\n"})

    with pytest.raises(EnvironmentSetupError) as caught:
        run(config(), sha, options(repo, tmp_path, None, base), tmp_path)

    assert str(caught.value) == (
        "horovodrun is not installed; fix: run `make demo`, or scripts/setup-horovod.sh "
        "<your virtualenv> (builds Horovod with PyTorch and Gloo)"
    )


def test_horovod_without_pytorch_says_how_to_rebuild_it(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": "print()\n"})
    opts = options(repo, tmp_path, horovodrun, base)
    build = "Available Frameworks:\n    [X] TensorFlow\n    [ ] PyTorch\n    [X] Gloo\n"
    opts = replace(opts, environ=ProcessEnvironment({**opts.environ, "FAKE_HOROVOD_BUILD": build}))

    with pytest.raises(EnvironmentSetupError) as caught:
        run(config(), sha, opts, tmp_path)

    assert str(caught.value) == (
        f"Horovod at {horovodrun} is without PyTorch support (horovodrun --check-build); fix: "
        "run `make demo`, or scripts/setup-horovod.sh <your virtualenv>, which rebuilds it "
        "with HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1"
    )
    assert not (tmp_path / "cache" / "checks").exists()  # a failed check is not remembered


def test_more_ranks_than_cores_is_a_warning(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": "print('hi', flush=True)\n"})
    opts = options(repo, tmp_path, horovodrun, base, cpu_count=2)

    result, console = run(config(workers=3), sha, opts, tmp_path)

    assert console.status[:2] == [
        "[ci-runner] checking the Horovod build (horovodrun --check-build, once) ...",
        "[ci-runner] warning: 3 ranks on 2 CPU cores: ranks will share cores and train slower",
    ]
    assert result.succeeded


def test_a_missing_secret_is_the_same_config_error_as_on_kubernetes(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": "print()\n"})

    with pytest.raises(ConfigError) as caught:
        run(
            config(secrets=("API_KEY",)),
            sha,
            options(repo, tmp_path, horovodrun, base),
            tmp_path,
        )

    assert caught.value.lines() == [
        "train.yaml: secrets: CI variable API_KEY is not set; fix: define API_KEY as a masked "
        "variable in the project's Settings > CI/CD > Variables (or export it when running "
        "outside CI)"
    ]


def test_elastic_jobs_discover_localhost(tmp_path: Path) -> None:
    cfg = config(workers=2, slots_per_worker=2, elastic=Elastic(min_workers=1, max_workers=3))
    plan = build_plan(cfg, CIContext(sha="0" * 40, project_path=PROJECT))
    script = write_discovery_script(plan, tmp_path)

    argv = plan.horovodrun_argv(local_hosts(plan, script), "/bin/horovodrun")

    assert script.name == f"discover-hosts-{plan.mpijob_name}.sh"
    assert argv == [
        "/bin/horovodrun",
        "-np",
        "4",
        "--min-np",
        "2",
        "--max-np",
        "6",
        "--slots",  # as on Kubernetes; the script's "localhost:6" is what counts here
        "2",
        "--host-discovery-script",
        str(script),
        "--gloo",
        "python",
        "train.py",
    ]
    out = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout
    assert out == "localhost:6\n"


def test_the_timeout_stops_every_rank(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": SLEEPER})
    clock = ManualClock()
    # The job's time is up once both ranks are running.
    console = RankWatch(then=lambda: clock.advance(61))
    with LogSink(tmp_path / "train.log", console) as sink:
        opts = options(repo, tmp_path, horovodrun, base)
        result = run_local(
            plan_for(config(timeout=60), sha, opts),
            opts,
            sink=sink,
            console=Console(console, console),
            clock=clock,
        )

    assert result.failure == Failure(FailureKind.DEADLINE, "training ran past its timeout of 60s")
    assert "[ci-runner] timeout 60s reached: stopping every rank" in console.status
    assert len(console.pids) == 2
    assert console.alive() == []


DRIVER = """\
import sys
from pathlib import Path
from ci_runner.backends.local import pyenv
from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext
from ci_runner.backends.local.backend import LocalOptions, run_local
from ci_runner.backends.logsink import LogSink
from ci_runner.console import Console
from ci_runner.plan.run_plan import build_plan
from ci_runner.settings import read_settings

repo, sha, cache, horovodrun = sys.argv[1:5]
opts = LocalOptions(
    repo=Path(repo), cache_dir=Path(cache), environ={"PATH": sys.argv[5]},
    horovodrun=Path(horovodrun), base=pyenv.current_environment(), cpu_count=8,
    stop_grace_seconds=5.0,
)
cfg = TrainConfig(name="toy", image="img", command=("python", "train.py"), workers=2)
console = Console(sys.stdout, sys.stdout)
with LogSink(Path(cache) / "train.log", console.echo) as sink:
    context = CIContext(sha=sha, project_path="g/p")
    plan = build_plan(cfg, context, read_settings(opts.environ), read_secrets=True)
    result = run_local(plan, opts, sink=sink, console=console)
print(f"outcome {result.outcome.value}", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_every_rank(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, signum: signal.Signals
) -> None:
    repo, sha = git_repo({"train.py": SLEEPER})
    driver = tmp_path / "driver.py"
    # SIGINT and SIGTERM become KeyboardInterrupt, as `ci-runner train` arranges it for both
    # (commands/train.py): a Python started with SIGINT ignored (a CI script run in the
    # background by a shell without job control) would not turn it into one by itself.
    prelude = (
        "import signal\n"
        "for signum in (signal.SIGINT, signal.SIGTERM):\n"
        "    signal.signal(signum, signal.default_int_handler)\n"
    )
    driver.write_text(prelude + DRIVER)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(driver),
            str(repo),
            sha,
            str(tmp_path / "cache"),
            str(horovodrun),
            os.environ["PATH"],
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    pids: list[int] = []
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            pids.extend(int(p) for p in re.findall(r"pid (\d+)", line))
            if len(pids) == 2:
                break
        assert all(process_alive(pid) for pid in pids)
        proc.send_signal(signum)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    for pid in pids:  # the test must not leave ranks behind even when it fails
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)

    assert len(pids) == 2, lines
    assert not [pid for pid in pids if process_alive(pid)]
    assert rest.splitlines()[-3:] == [
        "[ci-runner] interrupted: stopping every rank",
        "[ci-runner] every rank stopped",
        "outcome cancelled",
    ]


def test_local_backend_cancel_stops_every_rank(
    git_repo: GitRepo, tmp_path: Path, horovodrun: Path, base: pyenv.BaseEnvironment
) -> None:
    repo, sha = git_repo({"train.py": SLEEPER})
    console = RankWatch()
    sink = LogSink(tmp_path / "train.log", console)
    opts = options(repo, tmp_path, horovodrun, base)
    backend = make_backend(config(), sha, opts, sink, console)
    # From another thread, as a signal handler or a CI hook would.
    console.then = lambda: threading.Thread(target=backend.cancel).start()

    result = backend.run()

    assert result.outcome is Outcome.CANCELLED
    assert result.failure == Failure(
        FailureKind.CANCELLED, "stopped by Ctrl-C, SIGTERM or a cancel request"
    )
    assert console.status[-2:] == [
        "[ci-runner] interrupted: stopping every rank",
        "[ci-runner] every rank stopped",
    ]
    assert sink.closed
    assert len(console.pids) == 2
    assert console.alive() == []
