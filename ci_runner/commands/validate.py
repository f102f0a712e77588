"""``ci-runner validate``: train.yaml at the commit is valid and renders an MPIJob."""

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
from ci_runner.render import render_mpijob


def run_validate(args: argparse.Namespace, runtime: Runtime) -> int:
    loaded = load_config_from_args(args, runtime)
    note_uncommitted(args, loaded, runtime, "validate checked")
    plan = plan_only(loaded, runtime)
    if plan.policy.setup_image is None:
        # Which image runs the git fetch changes nothing validate checks: render and train
        # ask for one.
        plan = replace(plan, policy=replace(plan.policy, setup_image=plan.config.image))
    render_mpijob(plan)  # what it refuses, validate refuses
    config = loaded.config
    workers = "worker" if config.workers == 1 else "workers"
    slots = "slot" if config.slots_per_worker == 1 else "slots"
    ranks = "rank" if config.ranks == 1 else "ranks"
    runtime.console.answer(
        f"{loaded.config_path} at {loaded.ctx.short_sha} is valid: MPIJob "
        f"{plan.mpijob_name}, {config.workers} {workers} x {config.slots_per_worker} "
        f"{slots} = {config.ranks} {ranks}"
    )
    return 0


COMMAND: Final = Command(
    "validate",
    "check train.yaml at the commit and that it renders a valid MPIJob",
    add_config_arguments,
    run_validate,
)
