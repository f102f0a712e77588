"""``ci-runner render``: the MPIJob for train.yaml at the commit, as YAML on stdout."""

from __future__ import annotations

import argparse
from typing import Final

from ci_runner.commands.common import (
    Command,
    Runtime,
    add_config_arguments,
    checked_ci_job,
    load_config_from_args,
)
from ci_runner.plan.run_plan import build_plan
from ci_runner.render import manifest_yaml, render_mpijob


def run_render(args: argparse.Namespace, runtime: Runtime) -> int:
    loaded = load_config_from_args(args, runtime)
    plan = build_plan(
        loaded.config,
        loaded.ctx,
        runtime.env,
        ci_job=checked_ci_job(loaded, runtime),
        masker=runtime.console.masker,
    )
    runtime.stdout.write(manifest_yaml(render_mpijob(plan)))
    keys = ", ".join(plan.secret.keys)
    runtime.console.status(
        f"the MPIJob reads Secret {plan.secret.name} (keys {keys}); `ci-runner train` creates it"
    )
    return 0


COMMAND: Final = Command(
    "render",
    "print the MPIJob for train.yaml at the commit (YAML, for kubectl apply)",
    add_config_arguments,
    run_render,
)
