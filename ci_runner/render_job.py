"""A run plan → the objects ``train`` submits, by train.yaml's ``distributed``: Horovod's MPIJob
(:mod:`ci_runner.render`) or torchrun's Indexed Job and its Service
(:mod:`ci_runner.torchrun_job`), each with the ConfigMap of its pod scripts and its Secret."""

from __future__ import annotations

from typing import Any

from ci_runner.plan.run_plan import RunPlan
from ci_runner.render import render_mpijob, render_scripts, render_secret
from ci_runner.torchrun_job import render_service, render_torchrun_job


def render_job(plan: RunPlan) -> dict[str, Any]:
    """The job that runs ``plan``: an MPIJob (``horovod``) or an Indexed Job (``torchrun``)."""
    if plan.config.distributed == "torchrun":
        return render_torchrun_job(plan)
    return render_mpijob(plan)


def render_objects(plan: RunPlan) -> list[dict[str, Any]]:
    """Every object ``train`` submits, in its order: the job, (torchrun's) its Service, the
    ConfigMap of the pod scripts and the Secret (its values masked)."""
    if plan.config.distributed == "torchrun":
        return [
            render_torchrun_job(plan),
            render_service(plan),
            render_scripts(plan),
            render_secret(plan),
        ]
    return [render_mpijob(plan), render_scripts(plan), render_secret(plan)]
