"""The embedded backend: a job's train.yaml run on this machine with real ``horovodrun`` (gloo),
or with torchrun for ``distributed: torchrun`` (:mod:`~.torchrun`: torch alone, no Horovod).

The same contract as the Kubernetes backend: the commit is pinned (a git worktree of exactly that
SHA), every rank gets the pods' environment (``DATA_URI``, ``OUTPUT_URI``, ``CI_RUNNER_*``, the
job's ``env`` and ``secrets``), the log goes only through a
:class:`~ci_runner.backends.logsink.LogSink`, and the end is a
:class:`~ci_runner.backends.result.RunResult`. The current Python environment plays the
image; the job's requirements go into a layered virtualenv (:mod:`~.install`,
:mod:`~.pyenv`); :mod:`~.supervise` runs the launcher, :mod:`~.proctree` stops every rank.

A dirty working tree is refused unless ``allow_dirty``: then, when the commit to run is ``HEAD``,
the working tree itself runs in place, as it is (with a warning), because that is what someone
passing ``--allow-dirty`` wants to try; any other commit still runs from a pinned worktree.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from ci_runner import variables
from ci_runner.backends.local import pyenv
from ci_runner.backends.local.install import check_horovod, install_requirements
from ci_runner.backends.local.supervise import Launch, launch_process, supervise
from ci_runner.backends.local.torchrun import torchrun_launch, torchrun_python, with_failing_rank
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.clock import Clock, SystemClock
from ci_runner.console import StatusOutput, ToolOutput
from ci_runner.context import CIContext
from ci_runner.errors import EnvironmentSetupError
from ci_runner.gitrepo import checkout_commit, is_dirty, resolve_commit
from ci_runner.plan.run_plan import Hosts, RankLocation, RunPlan
from ci_runner.plan.tracking import NOT_INHERITED_PREFIX, RANK_TOKEN_VARIABLE
from ci_runner.settings import ProcessEnvironment

STOP_GRACE_SECONDS: Final = 10.0


@dataclass(frozen=True)
class LocalOptions:
    """Where and how to run; built at the edge (``ci-runner train --local``)."""

    repo: Path  # the git repository holding the commit
    cache_dir: Path  # worktrees, layered virtualenvs and discovery scripts live under it
    environ: ProcessEnvironment  # the environment ranks start from (the user's shell)
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
    plan: RunPlan, environ: ProcessEnvironment, code_dir: Path, path_prefix: Sequence[Path]
) -> dict[str, str]:
    """The environment every rank gets: the plan's, over the user's own environment (which
    plays the image's) without GitLab's credentials and MLflow's variables (as in a pod, the
    ranks get those only from the plan: ``tracking.ranks_log``, train.yaml's env and secrets).

    The base environment's ``PYTHONPATH`` stays first, as the image's requirements path does
    in a pod; the job's requirements layer comes first on ``PATH``.
    """
    env = {k: v for k, v in environ.items() if not _ci_runners_own(k)}
    location = RankLocation(
        code_dir=str(code_dir), dependency_path=environ.get(variables.PYTHONPATH, "")
    )
    env.update(plan.rank_environment(location))
    values = plan.secret.values()
    env.update({name: values[name] for name in plan.secret_names})
    path = [str(p) for p in path_prefix]
    env["PATH"] = os.pathsep.join([*path, environ.get("PATH", os.defpath)])
    return env


def _ci_runners_own(name: str) -> bool:
    """A variable of the user's environment that only ci-runner itself reads."""
    return (
        name in variables.GITLAB_CREDENTIALS
        or name == RANK_TOKEN_VARIABLE
        or name.startswith(NOT_INHERITED_PREFIX)
    )


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
    """Run the job with horovodrun (or torchrun, for ``distributed: torchrun``) on this machine;
    the log goes to ``sink``.

    Expected set-up problems (no Horovod, no torch, a dirty tree) raise a
    :class:`~ci_runner.errors.CiRunnerError`; how the training itself ended is in the result.
    Ctrl-C (KeyboardInterrupt), or ``cancelled()`` turning true, stops every rank and returns a
    cancelled result.
    """
    clock = clock or SystemClock()
    config, context, job = plan.config, plan.context, plan.mpijob_name
    torchrun = config.distributed == "torchrun"
    if not torchrun:  # a torchrun job needs torch alone: checked once its Python is known
        check_horovod(options.horovodrun, options.environ, run, options.cache_dir, console)
    _warn_shared_cores(config.ranks, options.cpu_count, console)
    source = pin_source(context, options, console)
    started_at = clock.now()
    try:
        layer_bin = _requirements_layer(plan, options, source, sink, console, run, clock)
    except pyenv.RequirementsInstallError as exc:
        setup = Failure(FailureKind.SETUP, str(exc), exit_code=exc.pip_exit_code)
        return _result(Outcome.FAILED, job, sink, started_at, clock, setup)
    path_prefix = [p for p in (layer_bin, options.base.python.parent) if p is not None]
    env = rank_environment(plan, options.environ, source, path_prefix)
    with ExitStack() as launcher_files:
        if torchrun:
            python = torchrun_python(options.base, layer_bin)
            launch_with = torchrun_launch(plan, python, env, run, options.cache_dir)
            (argv, env), launcher = launcher_files.enter_context(launch_with), "torchrun"
        else:
            argv, launcher = _horovodrun_argv(plan, options), "horovodrun"
        console.status(f"starting {config.ranks} ranks on this machine: {shlex.join(argv)}")
        outcome, failure = supervise(
            launch(argv, source, env),
            sink=sink,
            console=console,
            clock=clock,
            timeout=plan.deadline_seconds,
            cancelled=cancelled,
            grace_seconds=options.stop_grace_seconds,
            launcher=launcher,
        )
    if torchrun:
        failure = with_failing_rank(failure, sink, source)
    return _result(outcome, job, sink, started_at, clock, failure)


def _requirements_layer(
    plan: RunPlan,
    options: LocalOptions,
    source: Path,
    sink: LogSink,
    console: ToolOutput,
    run: pyenv.CommandRunner,
    clock: Clock,
) -> Path | None:
    """The ``bin`` directory of the virtualenv holding train.yaml's requirements, if it has any
    (their existence was checked when train.yaml was read)."""
    if not plan.config.requirements:
        return None
    return install_requirements(
        source / plan.config.requirements,
        options.base,
        options.cache_dir / "venvs",
        environ=options.environ,
        run=run,
        sink=sink,
        console=console,
        clock=clock,
    )


def _horovodrun_argv(plan: RunPlan, options: LocalOptions) -> list[str]:
    assert options.horovodrun is not None  # check_horovod passed
    elastic = plan.config.elastic
    discovery = write_discovery_script(plan, options.cache_dir / "discovery") if elastic else None
    return plan.horovodrun_argv(local_hosts(plan, discovery), str(options.horovodrun))


def _warn_shared_cores(ranks: int, cores: int, console: ToolOutput) -> None:
    if ranks > cores:
        console.warning(
            f"{ranks} ranks on {cores} CPU cores: ranks will share cores and train slower"
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
