"""``ci-runner cancel``: the component's ``after_script`` when GitLab cancels the CI job or its
script times out.

GitLab does not promise that SIGTERM reaches ``ci-runner train``, but it runs ``after_script``
with ``CI_JOB_STATUS=canceled`` in the same job: the same commit, the same CI job id, so the
same job name, of the kind train.yaml's ``distributed`` renders (an MPIJob, or torchrun's
batch/v1 Job). When ``RUNNER_SCRIPT_TIMEOUT`` stops the script, GitLab Runner runs
``after_script`` too, with ``CI_JOB_STATUS=timedout`` (``Build.executeAfterScript`` and
``runtimeStateAndError``, common/build.go in gitlab-org/gitlab-runner) and every job variable.
This deletes that job and everything it owns, and turns the comment (and report.md) into
"cancelled" or "timed out after N" with the tail of the log ``train`` had saved, and ends its
MLflow run KILLED.
"""

from __future__ import annotations

import argparse
from typing import Final

from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.backends.timed_out import ci_job_timeout_failure
from ci_runner.commands.common import (
    Command,
    Runtime,
    add_cluster_arguments,
    add_config_arguments,
    load_config_from_args,
    run_config,
)
from ci_runner.commands.outputs import add_output_arguments, output_settings, saved_log_tail
from ci_runner.plan.deadline import CIJobTime, ci_job_time
from ci_runner.plan.run_plan import build_plan

TIMED_OUT: Final = "timedout"  # CI_JOB_STATUS in after_script after a script timeout


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_cluster_arguments(parser)
    add_output_arguments(parser)


def run_cancel(args: argparse.Namespace, runtime: Runtime) -> int:
    """Delete this CI job's MPIJob (or Job), its pods and Secret; report the run as cancelled."""
    from ci_runner.backends.kubernetes.cleanup import cancel_on_cluster, expired_line
    from ci_runner.backends.kubernetes.connect import connect_cluster
    from ci_runner.backends.kubernetes.kinds import KIND_OF_DISTRIBUTED
    from ci_runner.commands.ending import report_result
    from ci_runner.results.destination import open_gitlab
    from ci_runner.results.publish import RunRecord
    from ci_runner.tracking.stage import resume_tracking

    loaded = load_config_from_args(args, runtime)
    settings = runtime.settings
    config = run_config(loaded.config, settings)
    plan = build_plan(
        config,
        loaded.ctx,
        settings,
        outputs=output_settings(args, runtime),
        masker=runtime.console.masker,
    )
    assert plan.outputs is not None
    name, console, clock = plan.mpijob_name, runtime.console, runtime.clock
    connection = connect_cluster(
        config.kubernetes.namespace,
        settings.kube,
        context=config.kubernetes.context,
        context_flag=args.kube_context,
    )
    kind = KIND_OF_DISTRIBUTED[config.distributed]  # the noun too: MPIJob, or Job
    expired = cancel_on_cluster(
        connection.client, connection.namespace, name, plan.secret.name, clock, kind=kind
    )

    outcome, failure = why_stopped(
        loaded.ctx.job_status, ci_job_time(settings.job_time, clock.now())
    )
    done = "timed out" if failure.kind is FailureKind.DEADLINE else "cancelled"
    console.status(f"{done}: {kind} {name} and everything it owned deleted")
    for other in expired:
        console.status(expired_line(other, kind))
    result = RunResult(
        outcome=outcome,
        mpijob_name=name,
        log_path=plan.outputs.log_path,
        log_tail=tuple(plan.masker.mask(line) for line in saved_log_tail(plan.outputs)),
        failure=failure,
        finished_at=clock.now(),
    )
    gitlab = open_gitlab(loaded.ctx, settings, console, clock)
    tracked = resume_tracking(plan, settings, clock)  # train's MLflow run ends KILLED
    report_result(runtime, RunRecord(plan, result), tracked, gitlab)
    return 0


def why_stopped(status: str | None, job: CIJobTime | None) -> tuple[Outcome, Failure]:
    """Cancelled, or (``status``, the context's ``CI_JOB_STATUS``, is ``timedout``) failed by
    the CI job's timeout, saying after how long and which limit when ``job`` knows them."""
    if status != TIMED_OUT:
        return Outcome.CANCELLED, Failure(FailureKind.CANCELLED, "the CI job was cancelled")
    return Outcome.FAILED, ci_job_timeout_failure(job)


COMMAND: Final = Command(
    "cancel",
    "delete this CI job's MPIJob (or torchrun's Job) and all it owns, and report the run as "
    "cancelled or timed out (for the CI job's after_script)",
    add_cancel_arguments,
    run_cancel,
)
