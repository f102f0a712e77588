"""``ci-runner validate``: train.yaml at the commit is valid and renders its job (an MPIJob, or
torchrun's Indexed Job)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Final

from ci_runner.commands.common import (
    Command,
    Runtime,
    add_config_arguments,
    load_config_from_args,
    note_uncommitted,
    plan_only,
)
from ci_runner.plan.run_plan import RunPlan
from ci_runner.render_job import render_job


def run_validate(args: argparse.Namespace, runtime: Runtime) -> int:
    loaded = load_config_from_args(args, runtime)
    note_uncommitted(args, loaded, runtime, "validate checked")
    plan = plan_only(loaded, runtime)
    if plan.policy.setup_image is None:
        # Which image runs the git fetch changes nothing validate checks: render and train
        # ask for one.
        plan = replace(plan, policy=replace(plan.policy, setup_image=plan.config.image))
    render_job(plan)  # what it refuses, validate refuses
    config = loaded.config
    ranks = "rank" if config.ranks == 1 else "ranks"
    runtime.console.answer(
        f"{loaded.config_path} at {loaded.ctx.short_sha} is valid: {_job(plan)} "
        f"{config.ranks} {ranks}"
    )
    return 0


def _job(plan: RunPlan) -> str:
    """The job and its shape: "MPIJob <name>, 2 workers x 1 slot =", or torchrun's "Indexed
    Job <name> with Service <name>, 2 nodes x 4 processes ="."""
    config, name = plan.config, plan.mpijob_name
    workers, slots = config.workers, config.slots_per_worker
    if config.distributed == "torchrun":
        nodes = "node" if workers == 1 else "nodes"
        processes = "process" if slots == 1 else "processes"
        return f"Indexed Job {name} with Service {name}, {workers} {nodes} x {slots} {processes} ="
    return (
        f"MPIJob {name}, {workers} {'worker' if workers == 1 else 'workers'} x {slots} "
        f"{'slot' if slots == 1 else 'slots'} ="
    )


COMMAND: Final = Command(
    "validate",
    "check train.yaml at the commit and that it renders a valid MPIJob (or torchrun's Indexed Job)",
    add_config_arguments,
    run_validate,
)
