"""``ci-runner render``: every object ``train`` submits for train.yaml at the commit (the MPIJob,
or torchrun's Indexed Job and its Service; the ConfigMap of its pod scripts, the Secret with its
values masked), as YAML on stdout."""

from __future__ import annotations

import argparse
from typing import Final

from ci_runner.commands.common import (
    Command,
    Runtime,
    add_config_arguments,
    add_setup_image_argument,
    load_config_from_args,
    note_uncommitted,
    plan_only,
)
from ci_runner.config.types import JOB_KINDS
from ci_runner.render import objects_yaml
from ci_runner.render_job import render_objects


def add_render_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    add_setup_image_argument(parser)


def run_render(args: argparse.Namespace, runtime: Runtime) -> int:
    loaded = load_config_from_args(args, runtime)
    note_uncommitted(args, loaded, runtime, "render read it from")
    plan = plan_only(loaded, runtime)
    runtime.stdout.write(objects_yaml(render_objects(plan)))
    keys = ", ".join(plan.secret.keys)
    runtime.console.status(
        f"the {JOB_KINDS[plan.config.distributed]} reads Secret {plan.secret.name} (keys {keys}); "
        "`ci-runner train` creates it "
        "with the values masked here"
    )
    return 0


COMMAND: Final = Command(
    "render",
    "print the MPIJob (or torchrun's Indexed Job and its Service), its ConfigMap and its Secret "
    "(values masked) for train.yaml at the commit (YAML, for kubectl apply)",
    add_render_arguments,
    run_render,
)
