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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Outcome, QueueWait, RunResult
from ci_runner.clock import Clock
from ci_runner.commands.common import (
    Command,
    LoadedConfig,
    Runtime,
    add_cluster_arguments,
    add_config_arguments,
    add_setup_image_argument,
    checked_ci_job,
    checked_command,
    load_config_from_args,
    run_config,
)
from ci_runner.commands.outputs import add_output_arguments, output_settings
from ci_runner.console import Console, StatusOutput
from ci_runner.context import CIContext
from ci_runner.errors import EXIT_INTERRUPTED, ForkRefusedError
from ci_runner.plan.allowed import check_allowed
from ci_runner.plan.run_plan import RunPlan, build_plan
from ci_runner.settings import Settings

if TYPE_CHECKING:
    from ci_runner.results.metrics import MetricsSummary

# The backends and the results publisher are imported where they are used: `validate` and
# `render` import this module too (the CLI lists every command) and must stay light.


class Backend(Protocol):
    """What ``train`` needs of a backend: run the job once, and stop it from a signal handler."""

    def run(self) -> RunResult: ...

    def cancel(self) -> None: ...


def find_horovodrun(python: Path, path: str) -> Path | None:
    """``horovodrun`` next to ci-runner's Python (its own environment), else on ``path``
    (``PATH``)."""
    beside = python.parent / "horovodrun"
    if beside.is_file():
        return beside
    found = shutil.which("horovodrun", path=path)
    return Path(found) if found else None


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_cluster_arguments(parser)
    add_setup_image_argument(parser)
    add_output_arguments(parser)
    parser.add_argument(
        "--local",
        action="store_true",
        help="run on this machine with horovodrun or torchrun (gloo, CPU) instead of on Kubernetes",
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
    from ci_runner.commands.ending import report_result, run_failed_on_error
    from ci_runner.results.destination import open_gitlab
    from ci_runner.results.metrics import LogParser
    from ci_runner.results.publish import RunRecord, announce, masker_for_report
    from ci_runner.tracking.stage import ranks_join, start_tracking

    settings, clock = runtime.settings, runtime.clock
    # Every line ci-runner itself prints can quote the cluster or GitLab: masked like the log.
    console = runtime.console
    loaded = _load_checked(args, runtime)
    plan = _train_plan(args, runtime, loaded)
    # The run exists before anything starts; with tracking.ranks_log every rank gets its id and
    # the ranks' own token, else no MLflow variable (ci_runner.tracking).
    tracked = start_tracking(plan, settings, console, clock, loaded.root)
    plan = ranks_join(plan, tracked)
    with run_failed_on_error(tracked, clock, console):
        if args.local:
            make_backend = _local_backend(args, runtime, loaded, plan, clock)
        else:
            make_backend = _cluster_backend(plan, settings, console, clock, args.kube_context)
    gitlab = open_gitlab(plan.context, settings, console, clock)
    tracking_url = tracked.url if tracked else None
    report_masker = masker_for_report(plan.masker, settings.aws)
    announce(gitlab, plan, report_masker, console, tracking_url)

    def queued(wait: QueueWait | None) -> None:
        """The comment says where Kueue keeps the job waiting, then that it runs again."""
        announce(gitlab, plan, report_masker, console, tracking_url, queued=wait)

    # The metrics are parsed as the log streams in (what the sink shows is what it saves): the
    # end of a long training does not read its log again.
    parser = LogParser(plan.config.metrics)
    with run_failed_on_error(tracked, clock, console):
        result = _run_backend(make_backend, plan, console, parser.feed, queued)
    record = RunRecord(plan, result, metrics=parser.summary())
    report = report_result(runtime, record, tracked, gitlab)
    print_summary(result, report.metrics, plan.output_uri, console)
    return EXIT_INTERRUPTED if result.outcome is Outcome.CANCELLED else result.exit_code


def _load_checked(args: argparse.Namespace, runtime: Runtime) -> LoadedConfig:
    """train.yaml at the commit (``--local`` may run the working tree), a fork's MR refused,
    ``command`` checked."""
    if args.local:
        from ci_runner.backends.local.backend import runs_working_tree

        loaded = load_config_from_args(
            args, runtime, partial(runs_working_tree, allow_dirty=args.allow_dirty)
        )
    else:
        loaded = load_config_from_args(args, runtime)
    refuse_fork(loaded.ctx, runtime.settings)
    checked_command(loaded, runtime)
    return loaded


def _train_plan(args: argparse.Namespace, runtime: Runtime, loaded: LoadedConfig) -> RunPlan:
    """The run's plan, secrets read; ``--local``'s ``--data`` and ``--outputs`` taken."""
    plan = build_plan(
        run_config(loaded.config, runtime.settings),
        loaded.ctx,
        runtime.settings,
        read_secrets=True,
        data_uri=as_uri(args.data, runtime.cwd) if args.local else None,
        output_uri=as_uri(args.outputs, runtime.cwd) if args.local else None,
        outputs=output_settings(args, runtime),
        ci_job=checked_ci_job(loaded, runtime),
        masker=runtime.console.masker,
        policy=loaded.policy,
    )
    check_allowed(plan, loaded.policy, local=args.local)
    assert plan.outputs is not None
    return plan


def _run_backend(
    make_backend: MakeBackend,
    plan: RunPlan,
    console: Console,
    parse: Callable[[str], None],
    on_queue: QueueNotice,
) -> RunResult:
    """Run the job once, its log echoed, saved and ``parse``d as it streams in; Ctrl-C and
    SIGTERM cancel it."""
    assert plan.outputs is not None

    def echo(text: str) -> None:
        console.echo(text)
        parse(text)

    with LogSink(plan.outputs.log_path, echo, plan.masker) as sink:
        backend = make_backend(sink, on_queue)
        with _cancel_on_signals(backend):
            return backend.run()


def refuse_fork(ctx: CIContext, settings: Settings) -> None:
    """A fork's merge request runs untrusted code with the cluster's credentials: only by opt-in.

    GitLab runs a fork's MR pipeline in the fork (``CI_PROJECT_ID`` is the fork) unless a
    maintainer of the target project runs it there; the message says which of the two this is.
    """
    if not ctx.from_fork or settings.allow_forks:
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


QueueNotice = Callable[[QueueWait | None], None]
MakeBackend = Callable[[LogSink, QueueNotice], Backend]


def _cluster_backend(
    plan: RunPlan,
    settings: Settings,
    console: Console,
    clock: Clock,
    context_flag: str | None,
) -> MakeBackend:
    """Render, connect (every mistake found before anything is submitted), then the backend."""
    from ci_runner.backends.kubernetes.api import KubeApi
    from ci_runner.backends.kubernetes.backend import KubernetesBackend
    from ci_runner.backends.kubernetes.connect import connect_cluster
    from ci_runner.backends.kubernetes.options import job_options, rendered_parts
    from ci_runner.backends.kubernetes.queue_check import check_local_queue
    from ci_runner.render_job import render_objects

    # The job object (an MPIJob, or a batch/v1 Job with its headless Service): the backend
    # follows it as its kind says.
    manifest, scripts, service = rendered_parts(render_objects(plan))
    k8s = plan.config.kubernetes
    connection = connect_cluster(
        k8s.namespace, settings.kube, context=k8s.context, context_flag=context_flag
    )
    manifest["metadata"]["namespace"] = connection.namespace

    # Kueue's LocalQueue (kubernetes.local_queue): one that admits nothing ends the run now.
    api = KubeApi(connection.client, connection.namespace, clock)
    queue = check_local_queue(api, plan.config, console.warning)
    options = job_options(plan, connection, manifest, scripts, service, queue)

    def make(sink: LogSink, on_queue: QueueNotice) -> Backend:
        return KubernetesBackend(options, sink, console, clock, on_queue)

    return make


def _local_backend(
    args: argparse.Namespace, runtime: Runtime, loaded: LoadedConfig, plan: RunPlan, clock: Clock
) -> MakeBackend:
    from ci_runner.backends.local import pyenv
    from ci_runner.backends.local.backend import LocalBackend, LocalOptions

    settings = runtime.settings
    base = pyenv.current_environment()
    options = LocalOptions(
        repo=loaded.root,
        cache_dir=settings.cache_dir,
        environ=settings.environ,
        horovodrun=find_horovodrun(base.python, settings.path),
        base=base,
        cpu_count=len(os.sched_getaffinity(0)),
        allow_dirty=args.allow_dirty,
    )

    def make(sink: LogSink, on_queue: QueueNotice) -> Backend:
        return LocalBackend(plan, options, sink, runtime.console, clock)

    return make


def as_uri(location: str | None, cwd: Path) -> str | None:
    """A ``--data`` / ``--outputs`` value as a URI: a plain path becomes an absolute file:// URI
    (the ranks run in another directory, the pinned worktree)."""
    if not location or "://" in location:
        return location
    path = Path(location)
    uri = (path if path.is_absolute() else cwd / path).as_uri()
    return uri + "/" if location.endswith("/") else uri


def print_summary(
    result: RunResult,
    metrics: MetricsSummary | None,
    outputs: str | None,
    console: StatusOutput,
) -> None:
    """A few plain lines: outcome, final metrics, where the log and the outputs are."""
    took = f" in {result.duration_seconds:.0f}s" if result.duration_seconds is not None else ""
    lines = [f"training {result.outcome.value}{took}: job {result.mpijob_name}"]
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
        console.status(line)


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


COMMAND: Final = Command(
    "train",
    "train the job on Kubernetes and report to the merge request; --local runs it on this "
    "machine with horovodrun or torchrun (gloo, CPU)",
    add_train_arguments,
    run_train,
)
