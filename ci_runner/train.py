"""``ci-runner train --local``: train.yaml at the commit, run on this machine with horovodrun.

The edge of the local backend: it reads the process's environment (through the
:class:`~ci_runner.commands.Runtime`), finds horovodrun and the cache directory, turns SIGTERM
into the same clean stop as Ctrl-C, and prints a plain summary of the result.
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
from typing import TextIO

from ci_runner import pyenv
from ci_runner.commands import Command, Job, Runtime, add_job_arguments, load_job
from ci_runner.config import expand_outputs, load_config
from ci_runner.errors import ConfigError, EnvironmentSetupError, Problem
from ci_runner.local_backend import WITHHELD_VARIABLES, LocalOptions, run_local, runs_working_tree
from ci_runner.logsink import LogSink, SecretMasker
from ci_runner.metrics import parse_log_file
from ci_runner.naming import job_name
from ci_runner.result import Outcome, RunResult

EXIT_CANCELLED = 130
# Credentials that may be in the environment: masked wherever the training log shows them.
MASKED_VARIABLES = (*sorted(WITHHELD_VARIABLES), "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
LOG_NAME = "train.log"


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
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on this machine with horovodrun (gloo, CPU) instead of on Kubernetes",
    )
    parser.add_argument(
        "--allow-dirty",
        action="store_true",
        help="with uncommitted changes, train the working tree as it is instead of refusing",
    )
    parser.add_argument(
        "--data",
        metavar="URI",
        help="DATA_URI for the ranks instead of train.yaml's data (file://, s3:// or a path)",
    )
    parser.add_argument(
        "--outputs",
        metavar="URI",
        help="OUTPUT_URI for the ranks instead of train.yaml's outputs, taken as is "
        "(file://, s3:// or a path)",
    )
    parser.add_argument(
        "--output-dir",
        metavar="DIR",
        help="directory for ci-runner's own files: the training log as train.log "
        "(default: the log goes to <cache>/logs/<job>.log)",
    )


def run_train(args: argparse.Namespace, runtime: Runtime) -> int:
    """``ci-runner train``; only ``--local`` is available in this build."""
    if not args.local:
        raise EnvironmentSetupError(
            "ci-runner train on Kubernetes is not available in this build; fix: pass --local "
            "to train on this machine"
        )
    job = load_job_for_local(args, runtime)
    env = runtime.env
    cache = cache_dir(env)
    name = job_name(job.config, job.ctx)
    if args.output_dir:
        log_path = Path(args.output_dir) / LOG_NAME
        log_path = log_path if log_path.is_absolute() else runtime.cwd / log_path
    else:
        log_path = cache / "logs" / f"{name}.log"
    output_uri = as_uri(args.outputs, runtime.cwd)
    base = pyenv.current_environment()
    options = LocalOptions(
        repo=job.root,
        cache_dir=cache,
        environ=env,
        horovodrun=find_horovodrun(base.python, env),
        base=base,
        cpu_count=len(os.sched_getaffinity(0)),
        allow_dirty=args.allow_dirty,
        data_uri=as_uri(args.data, runtime.cwd),
        output_uri=output_uri,
    )
    masker = SecretMasker(env.get(var) for var in (*job.config.secrets, *MASKED_VARIABLES))
    status = _writer(runtime.stderr)
    with LogSink(log_path, _writer(runtime.stdout), masker) as sink, _sigterm_as_interrupt():
        result = run_local(job.config, job.ctx, options, sink=sink, echo=status)
    outputs = output_uri or (
        expand_outputs(job.config.outputs, project=job.ctx.project_path, sha=job.ctx.sha, job=name)
        if job.config.outputs
        else None
    )
    print_summary(result, job, outputs, runtime.stderr)
    return EXIT_CANCELLED if result.outcome is Outcome.CANCELLED else result.exit_code


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
    job = load_job(args, runtime)
    if not runs_working_tree(job.root, job.ctx.sha, args.allow_dirty):
        return job
    path = job.root / job.config_path
    config = load_config(path.read_text(encoding="utf-8"), job.config_path)
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


def print_summary(result: RunResult, job: Job, outputs: str | None, out: TextIO) -> None:
    """A few plain lines: outcome, final metrics, where the log and the outputs are."""
    took = f" in {result.duration_seconds:.0f}s" if result.duration_seconds is not None else ""
    lines = [f"training {result.outcome.value}{took}: job {result.job_name}"]
    if result.failure is not None:
        lines.append(f"reason: {result.failure.message}")
    if job.config.metrics and result.log_path.is_file():
        summary = parse_log_file(result.log_path, job.config.metrics)
        for metric in summary.metrics:
            if metric.final is not None:
                best = f"; best {metric.best:.6g}" if metric.best is not None else ""
                lines.append(f"{metric.name}: {metric.final:.6g} (final, mean over ranks{best})")
            else:
                lines.append(f"{metric.name}: not found in the log")
    lines.append(f"log: {result.log_path}")
    if outputs and result.succeeded:
        lines.append(f"outputs: {outputs}")
    for line in lines:
        out.write(f"[ci-runner] {line}\n")
    out.flush()


def _writer(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text)
        stream.flush()  # the CI log is a pipe: show each line as it comes

    return write


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (CI cancelling the job, ``kill``) stops the ranks exactly like Ctrl-C."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


COMMAND = Command(
    "train",
    "train the job: --local runs it on this machine with horovodrun (gloo, CPU)",
    add_train_arguments,
    run_train,
)
