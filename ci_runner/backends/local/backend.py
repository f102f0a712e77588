"""The embedded backend: a job's train.yaml run on this machine with real ``horovodrun`` (gloo).

The same contract as the Kubernetes backend: the commit is pinned (a git worktree of exactly that
SHA), every rank gets the pods' environment (``DATA_URI``, ``OUTPUT_URI``, ``CI_RUNNER_*``, the
job's ``env`` and ``secrets``), the log goes only through a
:class:`~ci_runner.backends.logsink.LogSink`, and the end is a
:class:`~ci_runner.backends.result.RunResult`. The current Python environment plays the
image; the job's requirements go into a layered virtualenv
(:mod:`ci_runner.backends.local.pyenv`).

A dirty working tree is refused unless ``allow_dirty``: then, when the commit to run is ``HEAD``,
the working tree itself runs in place, as it is (with a warning), because that is what someone
passing ``--allow-dirty`` wants to try; any other commit still runs from a pinned worktree.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import selectors
import shlex
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ci_runner.backends.local import pyenv
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.clock import Clock, SystemClock
from ci_runner.console import StatusOutput, ToolOutput, status_line
from ci_runner.context import CIContext
from ci_runner.errors import EnvironmentSetupError
from ci_runner.gitrepo import checkout_commit, is_dirty, resolve_commit
from ci_runner.masking import GITLAB_CREDENTIALS
from ci_runner.plan.run_plan import Hosts, RankLocation, RunPlan

INSTALL_HINT: Final = "run `make demo`, or scripts/setup-horovod.sh <your virtualenv>"
STOP_GRACE_SECONDS: Final = 10.0
PIP_TAIL_LINES: Final = 30
_READ_CHUNK: Final = 65536
_POLL_SECONDS: Final = 1.0
# Seconds to wait for every process of a killed rank's tree to be gone after SIGKILL.
_GONE_SECONDS: Final = 10.0

# Starts argv in cwd with env, stdout and stderr on one pipe, as the leader of a new process group.
Launch = Callable[[Sequence[str], Path, Mapping[str, str]], "subprocess.Popen[bytes]"]


def launch_process(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """The real :data:`Launch`."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # one group to signal: horovodrun and whatever stays in it
    )


@dataclass(frozen=True)
class LocalOptions:
    """Where and how to run; built at the edge (``ci-runner train --local``)."""

    repo: Path  # the git repository holding the commit
    cache_dir: Path  # worktrees, layered virtualenvs and discovery scripts live under it
    environ: Mapping[str, str]  # the environment ranks start from (the user's shell)
    horovodrun: Path | None  # None: not installed
    base: pyenv.BaseEnvironment  # the environment playing the image
    cpu_count: int
    allow_dirty: bool = False
    stop_grace_seconds: float = STOP_GRACE_SECONDS


def dirty_refusal(repo: Path) -> str:
    return (
        f"{repo} has uncommitted changes and ci-runner trains commits; fix: commit them, or "
        "pass --allow-dirty to train the working tree as it is"
    )


def runs_working_tree(repo: Path, sha: str, allow_dirty: bool) -> bool:
    """Whether to run ``repo``'s working tree in place instead of a worktree of ``sha``.

    Raises :class:`EnvironmentSetupError` for a dirty tree without ``allow_dirty``.
    """
    if not is_dirty(repo):
        return False
    if not allow_dirty:
        raise EnvironmentSetupError(dirty_refusal(repo))
    return resolve_commit("HEAD", repo) == sha


def check_horovod(
    horovodrun: Path | None,
    environ: Mapping[str, str],
    run: pyenv.CommandRunner,
    cache_dir: Path,
    console: StatusOutput,
) -> None:
    """Fail with one line unless ``horovodrun`` exists and Horovod has PyTorch and Gloo.

    ``horovodrun --check-build`` takes seconds (a process per framework), so a passing answer is
    remembered for this exact ``horovodrun`` file; reinstalling Horovod rewrites it.
    """
    if horovodrun is None or not horovodrun.is_file():
        raise EnvironmentSetupError(
            f"horovodrun is not installed; fix: {INSTALL_HINT} (builds Horovod with PyTorch "
            "and Gloo)"
        )
    info = horovodrun.stat()
    key = f"{horovodrun.resolve()}\n{info.st_size}\n{info.st_mtime_ns}"
    passed = cache_dir / "checks" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if passed.is_file():
        return
    console.status("checking the Horovod build (horovodrun --check-build, once) ...")
    chunks: list[str] = []
    code = run([str(horovodrun), "--check-build"], environ, chunks.append)
    report = "".join(chunks)
    missing = [name for name in ("PyTorch", "Gloo") if f"[X] {name}" not in report]
    if code != 0 or missing:
        what = f"without {' and '.join(missing)} support" if missing else "broken"
        raise EnvironmentSetupError(
            f"Horovod at {horovodrun} is {what} (horovodrun --check-build); fix: {INSTALL_HINT}, "
            "which rebuilds it with HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1"
        )
    passed.parent.mkdir(parents=True, exist_ok=True)
    passed.write_text(report, encoding="utf-8")


def local_hosts(plan: RunPlan, discovery_script: Path | None) -> Hosts:
    """Every rank on localhost, talking over Gloo (no MPI here)."""
    return Hosts(
        fixed=("-H", f"localhost:{plan.config.ranks}"),
        discovery_script=str(discovery_script or ""),
        controller=("--gloo",),
    )


def write_discovery_script(plan: RunPlan, directory: Path) -> Path:
    """Elastic Horovod's host discovery: this machine, with room for the most ranks allowed."""
    config = plan.config
    assert config.elastic is not None
    slots = config.elastic.max_workers * config.slots_per_worker
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / f"discover-hosts-{plan.mpijob_name}.sh"
    script.write_text(f"#!/bin/sh\necho localhost:{slots}\n", encoding="utf-8")
    script.chmod(0o755)
    return script


def rank_environment(
    plan: RunPlan, environ: Mapping[str, str], code_dir: Path, path_prefix: Sequence[Path]
) -> dict[str, str]:
    """The environment every rank gets: the plan's, over the user's own environment (which
    plays the image's) without GitLab's credentials.

    The base environment's ``PYTHONPATH`` stays first, as the image's requirements path does
    in a pod; the job's requirements layer comes first on ``PATH``.
    """
    env = {k: v for k, v in environ.items() if k not in GITLAB_CREDENTIALS}
    location = RankLocation(code_dir=str(code_dir), dependency_path=environ.get("PYTHONPATH", ""))
    env.update(plan.rank_environment(location))
    values = plan.secret.values()
    env.update({name: values[name] for name in plan.secret_names})
    path = [str(p) for p in path_prefix]
    env["PATH"] = os.pathsep.join([*path, environ.get("PATH", os.defpath)])
    return env


def pin_source(context: CIContext, options: LocalOptions, console: StatusOutput) -> Path:
    """The directory holding exactly the code to run (see the module docstring)."""
    if runs_working_tree(options.repo, context.sha, options.allow_dirty):
        console.warning(
            f"running the uncommitted working tree {options.repo} as it is, not commit "
            f"{context.short_sha}"
        )
        return options.repo
    repo_id = hashlib.sha256(str(options.repo.resolve()).encode()).hexdigest()[:8]
    dest = options.cache_dir / "worktrees" / f"{repo_id}-{context.sha[:12]}"
    checkout_commit(options.repo, context.sha, dest)
    console.status(f"code: commit {context.short_sha} checked out in {dest}")
    return dest


def run_local(
    plan: RunPlan,
    options: LocalOptions,
    *,
    sink: LogSink,
    console: ToolOutput,
    launch: Launch = launch_process,
    run: pyenv.CommandRunner = pyenv.run_command,
    clock: Clock | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> RunResult:
    """Run the job with horovodrun on this machine; the log goes to ``sink``.

    Expected set-up problems (no Horovod, a dirty tree) raise a
    :class:`~ci_runner.errors.CiRunnerError`; how the training itself ended is in the result.
    Ctrl-C (KeyboardInterrupt), or ``cancelled()`` turning true, stops every rank and returns a
    cancelled result.
    """
    clock = clock or SystemClock()
    config, context, job = plan.config, plan.context, plan.mpijob_name
    check_horovod(options.horovodrun, options.environ, run, options.cache_dir, console)
    assert options.horovodrun is not None
    if config.ranks > options.cpu_count:
        console.warning(
            f"{config.ranks} ranks on {options.cpu_count} CPU cores: ranks will share cores "
            "and train slower"
        )
    source = pin_source(context, options, console)
    started_at = clock.now()
    path_prefix = [options.base.python.parent]
    if config.requirements:  # its existence was checked when train.yaml was read
        requirements = source / config.requirements
        # pip talks to the console; only a failure's last words go into the training log.
        pip_tail: deque[str] = deque(maxlen=PIP_TAIL_LINES)

        def pip_output(text: str) -> None:
            # pip expands ${VARIABLES} in requirements files and may quote a line back.
            masked = sink.mask(text)
            console.relay(masked)
            pip_tail.append(masked)

        try:
            layer = pyenv.ensure_layer(
                requirements,
                options.base,
                options.cache_dir / "venvs",
                environ=options.environ,
                run=run,
                output=pip_output,
                console=console,
                clock=clock,
            )
        except pyenv.RequirementsInstallError as exc:
            sink.feed("".join(pip_tail))
            sink.feed(status_line(str(exc)))  # the log says why the training never started
            return _result(
                Outcome.FAILED,
                job,
                sink,
                started_at,
                clock,
                Failure(FailureKind.SETUP, str(exc), exit_code=exc.pip_exit_code),
            )
        path_prefix.insert(0, layer.bin_dir)
    env = rank_environment(plan, options.environ, source, path_prefix)
    discovery = (
        write_discovery_script(plan, options.cache_dir / "discovery") if config.elastic else None
    )
    argv = plan.horovodrun_argv(local_hosts(plan, discovery), str(options.horovodrun))
    console.status(f"starting {config.ranks} ranks on this machine: {shlex.join(argv)}")
    proc = launch(argv, source, env)
    try:
        deadline = clock.monotonic() + config.timeout if config.timeout else None
        finished = _pump(proc, sink, clock, deadline, cancelled)
    except (KeyboardInterrupt, _Cancelled):
        console.status("interrupted: stopping every rank")
        stop_process_tree(proc, options.stop_grace_seconds)
        sink.flush()
        console.status("every rank stopped")
        return _result(
            Outcome.CANCELLED,
            job,
            sink,
            started_at,
            clock,
            Failure(FailureKind.CANCELLED, "stopped by Ctrl-C, SIGTERM or a cancel request"),
        )
    except BaseException:  # e.g. the console went away: no rank may outlive ci-runner
        stop_process_tree(proc, options.stop_grace_seconds)
        raise
    if not finished:
        console.status(f"timeout {config.timeout}s reached: stopping every rank")
        stop_process_tree(proc, options.stop_grace_seconds)
        return _result(
            Outcome.FAILED,
            job,
            sink,
            started_at,
            clock,
            Failure(FailureKind.DEADLINE, f"training ran past its timeout of {config.timeout}s"),
        )
    code = proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # nothing left in its group may outlive the job
    if code == 0:
        return _result(Outcome.SUCCEEDED, job, sink, started_at, clock, None)
    return _result(
        Outcome.FAILED,
        job,
        sink,
        started_at,
        clock,
        Failure(FailureKind.EXIT_CODE, f"horovodrun exited with code {code}", exit_code=code),
    )


class LocalBackend:
    """:func:`run_local` in the shape of the Kubernetes backend: build it, :meth:`run` it once,
    :meth:`cancel` it from anywhere (a signal handler, another thread)."""

    def __init__(
        self,
        plan: RunPlan,
        options: LocalOptions,
        sink: LogSink,
        console: ToolOutput,
        clock: Clock,
        launch: Launch = launch_process,
        run: pyenv.CommandRunner = pyenv.run_command,
    ) -> None:
        self.plan = plan
        self.options = options
        self.sink = sink
        self.console = console
        self.clock = clock
        self._launch = launch
        self._run = run
        self._cancelled = False

    def cancel(self) -> None:
        """Ask :meth:`run` to stop every rank and return CANCELLED (within a second)."""
        self._cancelled = True

    def run(self) -> RunResult:
        """Run the job to its end; closes the sink, like the Kubernetes backend."""
        try:
            return run_local(
                self.plan,
                self.options,
                sink=self.sink,
                console=self.console,
                launch=self._launch,
                run=self._run,
                clock=self.clock,
                cancelled=lambda: self._cancelled,
            )
        finally:
            self.sink.close()


def _result(
    outcome: Outcome,
    job: str,
    sink: LogSink,
    started_at: datetime,
    clock: Clock,
    failure: Failure | None,
) -> RunResult:
    sink.flush()
    return RunResult(
        outcome=outcome,
        mpijob_name=job,
        log_path=sink.path,
        log_tail=sink.tail,
        failure=failure,
        started_at=started_at,
        finished_at=clock.now(),
    )


class _Cancelled(Exception):
    """``cancelled()`` turned true while the ranks ran."""


def _pump(
    proc: subprocess.Popen[bytes],
    sink: LogSink,
    clock: Clock,
    deadline: float | None,
    cancelled: Callable[[], bool],
) -> bool:
    """Feed ``proc``'s output to ``sink`` until it ends (True) or ``deadline`` passes (False);
    raise :class:`_Cancelled` as soon as ``cancelled()`` says so (checked at least every second).
    """
    assert proc.stdout is not None  # launched with stdout=PIPE
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if cancelled():
                raise _Cancelled
            wait = _POLL_SECONDS
            if deadline is not None:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return False
                wait = min(wait, remaining)
            if not selector.select(wait):
                continue
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                return True
            sink.feed(chunk)


def stop_process_tree(proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
    """Stop ``proc`` (a process group leader) and every process it started, then wait for them.

    Horovod's launcher starts each rank in a session of its own, so signalling the group is not
    enough: descendants are found through /proc first, then SIGTERM, then SIGKILL after the grace.
    """
    family = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    _signal_all(family, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_seconds)
    family |= _descendants(proc.pid) if proc.poll() is None else set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    _signal_all(family, signal.SIGKILL)
    proc.wait()
    _wait_gone(family, timeout=_GONE_SECONDS)


def _signal_all(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _parent_pids() -> dict[int, int]:
    """pid → parent pid of every process visible in /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def _descendants(root: int) -> set[int]:
    parents = _parent_pids()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def is_running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: set[int], timeout: float) -> None:
    # Real time on purpose: this waits for the kernel to reap processes, not for a schedule.
    end = time.monotonic() + timeout
    while any(is_running(pid) for pid in pids) and time.monotonic() < end:
        time.sleep(0.05)
