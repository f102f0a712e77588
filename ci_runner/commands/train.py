"""``ci-runner train``: the CI entry point, and ``--local`` for this machine.

context from the environment → train.yaml at the commit (plus a manual run's overrides) →
"training started" comment → the job run by a backend (Kubernetes, or horovodrun here) with its
log streamed into the CI log and saved → metrics, model links, baseline → report.md, metrics.json,
metrics.txt and the MR comment → exit code 0 only when training succeeded.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TextIO

from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Outcome, RunResult
from ci_runner.clock import Clock, SystemClock
from ci_runner.commands.common import Command, Job, Runtime, add_job_arguments, load_job
from ci_runner.commands.outputs import add_output_arguments, output_settings
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, ForkRefusedError, Problem
from ci_runner.masking import SecretMasker, secret_masker
from ci_runner.plan.job_name import job_name
from ci_runner.spec.schema import apply_overrides, expand_outputs, load_config
from ci_runner.spec.types import TrainConfig

if TYPE_CHECKING:
    from ci_runner.results.metrics import MetricsSummary

# The backends and the reporting stage are imported where they are used: `validate` and
# `render` import this module too (the CLI lists every command) and must stay light.

EXIT_CANCELLED = 130
# Pipeline variables a manual run (from the pipeline page) may set.
WORKERS_VARIABLE = "CI_RUNNER_WORKERS"
ARGS_VARIABLE = "CI_RUNNER_ARGS"
ALLOW_FORKS_VARIABLE = "CI_RUNNER_ALLOW_FORKS"


class Backend(Protocol):
    """What ``train`` needs of a backend: run the job once, and stop it from a signal handler."""

    def run(self) -> RunResult: ...

    def cancel(self) -> None: ...


def cache_dir(env: Mapping[str, str]) -> Path:
    """``$CI_RUNNER_CACHE``, else ``$XDG_CACHE_HOME/ci-runner``, else ``~/.cache/ci-runner``.

    The same place scripts/setup-horovod.sh keeps the Horovod wheel.
    """
    if env.get("CI_RUNNER_CACHE"):
        return Path(env["CI_RUNNER_CACHE"])
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "ci-runner"
    return Path(env.get("HOME") or Path.home()) / ".cache" / "ci-runner"


def find_horovodrun(python: Path, env: Mapping[str, str]) -> Path | None:
    """``horovodrun`` next to ci-runner's Python (its own environment), else on ``PATH``."""
    beside = python.parent / "horovodrun"
    if beside.is_file():
        return beside
    found = shutil.which("horovodrun", path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser)
    add_output_arguments(parser)
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on this machine with horovodrun (gloo, CPU) instead of on Kubernetes",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="with --local and uncommitted changes, train the working tree as it is instead of "
        "refusing",
    )
    parser.add_argument(
        "--data",
        metavar="URI",
        help="with --local: DATA_URI for the ranks instead of train.yaml's data (file://, s3:// "
        "or a path)",
    )
    parser.add_argument(
        "--outputs",
        metavar="URI",
        help="with --local: OUTPUT_URI for the ranks instead of train.yaml's outputs, taken as "
        "is (file://, s3:// or a path)",
    )


def run_train(args: argparse.Namespace, runtime: Runtime) -> int:
    """``ci-runner train``: run the job, report it; 0 only when training succeeded."""
    from ci_runner.results.stage import (
        ReportSettings,
        announce,
        finish,
        masker_for_report,
        open_gitlab,
    )

    env = runtime.env
    job = load_job_for_local(args, runtime) if args.local else load_job(args, runtime)
    refuse_fork(job.ctx, env)
    config = apply_overrides(
        job.config, workers=env.get(WORKERS_VARIABLE), extra_args=env.get(ARGS_VARIABLE)
    )
    ctx = job.ctx
    name = job_name(config, ctx)
    outputs = output_settings(args, runtime)
    masker = secret_masker(env, config.secrets)
    # Every line ci-runner itself prints can quote the cluster or GitLab: masked like the log.
    show = _masked_writer(runtime.stderr, masker)

    def status(message: str) -> None:
        show(f"[ci-runner] {message}\n")

    clock = SystemClock()
    if args.local:
        output_uri = as_uri(args.outputs, runtime.cwd) or _expanded_outputs(config, ctx, name)
        make_backend = _local_backend(args, runtime, job, config, output_uri, clock)
    else:
        output_uri = _expanded_outputs(config, ctx, name)
        make_backend = _cluster_backend(config, ctx, env, clock)
    gitlab = open_gitlab(ctx, env, status, clock)
    report_masker = masker_for_report(masker, env)
    announce(gitlab, config, ctx, name, report_masker, status, status)
    with LogSink(outputs.log_path, _writer(runtime.stdout), masker) as sink:
        backend = make_backend(sink, show)
        with _cancel_on_signals(backend):
            result = backend.run()
    report = finish(
        config,
        ctx,
        result,
        ReportSettings(outputs.out_dir, outputs.artifacts_path, output_uri, clock.now()),
        env=env,
        gitlab=gitlab,
        masker=report_masker,
        warn=status,
        echo=status,
    )
    print_summary(result, report.metrics, output_uri, show)
    return EXIT_CANCELLED if result.outcome is Outcome.CANCELLED else result.exit_code


def refuse_fork(ctx: CIContext, env: Mapping[str, str]) -> None:
    """A fork's merge request runs untrusted code with the cluster's credentials: only by opt-in.

    GitLab runs a fork's MR pipeline in the fork (``CI_PROJECT_ID`` is the fork) unless a
    maintainer of the target project runs it there; the message says which of the two this is.
    """
    if not ctx.from_fork or env.get(ALLOW_FORKS_VARIABLE, "").lower() == "true":
        return
    target = ctx.mr_project_path or f"project {ctx.mr_project_id}"
    fork = ctx.mr_source_project_path or f"project {ctx.mr_source_project_id}"
    opt_in = "the component input allow_fork_merge_requests: true"
    if ctx.project_id and ctx.project_id == ctx.mr_source_project_id:
        raise ForkRefusedError(
            f"merge request !{ctx.mr_iid} of {target} comes from the fork {fork} and this "
            f"pipeline runs in the fork, with the fork's CI/CD variables, not {target}'s; fix: a "
            f"maintainer of {target} reviews the code, then runs the pipeline from the merge "
            f"request's Pipelines tab (it runs in {target}) with {opt_in}"
        )
    raise ForkRefusedError(
        f"merge request !{ctx.mr_iid} of {target} comes from the fork {fork}: its code would "
        f"run with {target}'s cluster credentials; fix: review it, then set {opt_in}, or push "
        f"its branch to {target} and open the merge request from there"
    )


MakeBackend = Callable[[LogSink, Callable[[str], None]], Backend]


def _expanded_outputs(config: TrainConfig, ctx: CIContext, name: str) -> str | None:
    if not config.outputs:
        return None
    return expand_outputs(config.outputs, project=ctx.project_path, sha=ctx.sha, job=name)


def _cluster_backend(
    config: TrainConfig, ctx: CIContext, env: Mapping[str, str], clock: Clock
) -> MakeBackend:
    """Render, connect (every mistake found before anything is submitted), then the backend."""
    from ci_runner.backends.kubernetes.backend import KubernetesBackend
    from ci_runner.backends.kubernetes.connect import connect
    from ci_runner.render import render_mpijob, secret_data

    manifest = render_mpijob(config, ctx)
    secrets = secret_data(config, ctx, env)
    connection = connect(config.kubernetes.namespace, env)
    manifest["metadata"]["namespace"] = connection.namespace

    def make(sink: LogSink, echo: Callable[[str], None]) -> Backend:
        return KubernetesBackend(
            connection.client,
            connection.namespace,
            manifest,
            secrets,
            sink,
            echo,
            clock,
            config.kubernetes.unschedulable_timeout,
        )

    return make


def _local_backend(
    args: argparse.Namespace,
    runtime: Runtime,
    job: Job,
    config: TrainConfig,
    output_uri: str | None,
    clock: Clock,
) -> MakeBackend:
    from ci_runner.backends.local import pyenv
    from ci_runner.backends.local.backend import LocalBackend, LocalOptions

    env = runtime.env
    base = pyenv.current_environment()
    options = LocalOptions(
        repo=job.root,
        cache_dir=cache_dir(env),
        environ=env,
        horovodrun=find_horovodrun(base.python, env),
        base=base,
        cpu_count=len(os.sched_getaffinity(0)),
        allow_dirty=args.allow_dirty,
        data_uri=as_uri(args.data, runtime.cwd),
        output_uri=output_uri,
    )

    def make(sink: LogSink, echo: Callable[[str], None]) -> Backend:
        return LocalBackend(
            config,
            job.ctx,
            options,
            sink,
            echo,
            clock,
        )

    return make


def as_uri(location: str | None, cwd: Path) -> str | None:
    """A ``--data`` / ``--outputs`` value as a URI: a plain path becomes an absolute file:// URI
    (the ranks run in another directory, the pinned worktree)."""
    if not location or "://" in location:
        return location
    path = Path(location)
    uri = (path if path.is_absolute() else cwd / path).as_uri()
    return uri + "/" if location.endswith("/") else uri


def load_job_for_local(args: argparse.Namespace, runtime: Runtime) -> Job:
    """The job as ``load_job`` reads it, except that ``--allow-dirty`` on a dirty ``HEAD`` reads
    train.yaml from the working tree, the code that will actually run."""
    from ci_runner.backends.local.backend import runs_working_tree

    job = load_job(args, runtime)
    if not runs_working_tree(job.root, job.ctx.sha, args.allow_dirty):
        return job
    path = job.root / job.config_path
    config = load_config(path.read_bytes(), job.config_path)
    if config.requirements and not (job.root / config.requirements).is_file():
        raise ConfigError(
            [
                Problem(
                    job.config_path,
                    "requirements",
                    None,
                    f"{config.requirements} does not exist in the working tree",
                    "create it, or give its path relative to the repository root",
                )
            ]
        )
    return Job(config=config, ctx=job.ctx, root=job.root, config_path=job.config_path)


def print_summary(
    result: RunResult,
    metrics: MetricsSummary | None,
    outputs: str | None,
    show: Callable[[str], None],
) -> None:
    """A few plain lines: outcome, final metrics, where the log and the outputs are."""
    took = f" in {result.duration_seconds:.0f}s" if result.duration_seconds is not None else ""
    lines = [f"training {result.outcome.value}{took}: job {result.job_name}"]
    if result.failure is not None:
        lines.append(f"reason: {result.failure.message}")
    for metric in metrics.metrics if metrics else ():
        if metric.final is not None:
            best = f"; best {metric.best:.6g}" if metric.best is not None else ""
            lines.append(f"{metric.name}: {metric.final:.6g} (final, mean over ranks{best})")
        else:
            lines.append(f"{metric.name}: not found in the log")
    lines.append(f"log: {result.log_path}")
    if outputs and result.succeeded:
        lines.append(f"outputs: {outputs}")
    for line in lines:
        show(f"[ci-runner] {line}\n")


def _writer(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text)
        stream.flush()  # the CI log is a pipe: show each line as it comes

    return write


def _masked_writer(stream: TextIO, masker: SecretMasker) -> Callable[[str], None]:
    write = _writer(stream)

    def show(text: str) -> None:
        write(masker.mask(text))

    return show


@contextmanager
def _cancel_on_signals(backend: Backend) -> Iterator[None]:
    """Ctrl-C and SIGTERM (CI cancelling the job, ``kill``) cancel the job: the backend stops
    every rank / deletes the MPIJob and returns CANCELLED, and the report says so."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        backend.cancel()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


COMMAND = Command(
    "train",
    "train the job on Kubernetes and report to the merge request; --local runs it on this "
    "machine with horovodrun (gloo, CPU)",
    add_train_arguments,
    run_train,
)
