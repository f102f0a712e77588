"""What every ``ci-runner`` subcommand is built from: the outside world, read once by ``main``,
and the :class:`LoadedConfig` (train.yaml at the commit + CI context) most subcommands start
from.

A subcommand is a :class:`Command`; register it in ``ci_runner.cli.COMMANDS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ci_runner.clock import Clock, SystemClock
from ci_runner.config.command import command_warnings
from ci_runner.config.commit import load_train_config, path_in_repo
from ci_runner.config.overrides import apply_overrides
from ci_runner.config.types import TrainConfig
from ci_runner.console import Console
from ci_runner.context import CIContext, from_environment, without_credentials
from ci_runner.errors import GitError
from ci_runner.gitrepo import differs_from_commit, repo_root
from ci_runner.plan.allowed import check_allowed
from ci_runner.plan.deadline import CIJobTime, ci_job_time, longer_than_job
from ci_runner.plan.run_plan import RunPlan, build_plan
from ci_runner.policy import SETUP_IMAGE_VARIABLE, ProjectPolicy, project_policy
from ci_runner.settings import Settings


@dataclass(frozen=True)
class Runtime:
    """The settings (the environment, read once), working directory, output streams and clock,
    as ``main`` found them."""

    settings: Settings
    cwd: Path
    stdout: TextIO
    stderr: TextIO
    clock: Clock = dataclasses.field(default_factory=SystemClock)  # every command's one clock

    @functools.cached_property
    def console(self) -> Console:
        """Where ci-runner prints, masking the environment's credentials (and train.yaml's
        ``secrets`` once :func:`load_config_from_args` has read them); error lines and crash
        logs too."""
        return Console(self.stdout, self.stderr, self.settings.masker())


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, one-line help, its options, and what it does (→ exit code)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Runtime], int]


@dataclass(frozen=True)
class LoadedConfig:
    """A validated train.yaml read from the commit being trained, with its context."""

    config: TrainConfig
    ctx: CIContext
    root: Path  # the repository's top directory
    config_path: str  # train.yaml's path relative to ``root``
    policy: ProjectPolicy = dataclasses.field(default_factory=ProjectPolicy)  # the maintainers'


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """``--config`` and ``--sha``, shared by every subcommand that reads train.yaml."""
    parser.add_argument(
        "--config",
        default="train.yaml",
        metavar="PATH",
        help="train.yaml to use, relative to the current directory (default: train.yaml)",
    )
    parser.add_argument(
        "--sha",
        metavar="REV",
        help="commit to train (default: CI_COMMIT_SHA in GitLab CI, else HEAD)",
    )
    parser.add_argument(
        "--repo-url",
        metavar="URL",
        help="URL the pods fetch the commit from: https://, or ssh:// or user@host:path "
        "(default: CI_REPOSITORY_URL in GitLab CI, else the origin remote)",
    )


def add_setup_image_argument(parser: argparse.ArgumentParser) -> None:
    """``--setup-image``, for the subcommands that render the pods."""
    parser.add_argument(
        "--setup-image",
        metavar="IMAGE",
        help="image the pods fetch the commit in, with the git credential: one with git that "
        f"the project trusts, never train.yaml's image (default: {SETUP_IMAGE_VARIABLE}, else "
        "the CI job's own image, CI_JOB_IMAGE)",
    )


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """``--kube-context``, for the subcommands that talk to the cluster."""
    parser.add_argument(
        "--kube-context",
        metavar="NAME",
        help="kubeconfig context to use, e.g. a GitLab agent's <agent configuration project "
        "path>:<agent name> (default: the KUBE_CONTEXT variable, else train.yaml's "
        "kubernetes.context, else the kubeconfig's current context)",
    )


def load_config_from_args(
    args: argparse.Namespace,
    runtime: Runtime,
    runs_working_tree: Callable[[Path, str], bool] = lambda root, sha: False,
) -> LoadedConfig:
    """The job ``--config`` / ``--sha`` name: train.yaml read from the commit, not the work tree,
    unless ``runs_working_tree(root, sha)`` says the working tree itself will run."""
    root = repo_root(runtime.cwd)
    ctx = from_environment(runtime.settings.environ, runtime.cwd, sha=args.sha)
    if args.repo_url:
        ctx = dataclasses.replace(
            ctx, repo_url=without_credentials(args.repo_url), repo_url_from="--repo-url"
        )
    config_path = path_in_repo(args.config, runtime.cwd, root)
    working_tree = runs_working_tree(root, ctx.sha)
    config = load_train_config(ctx.sha, config_path, root, working_tree=working_tree)
    environ = runtime.settings.environ
    runtime.console.add_secrets(environ.get(name) for name in config.secrets)
    policy = project_policy(environ, setup_image=getattr(args, "setup_image", None))
    return LoadedConfig(config, ctx, root, config_path, policy)


def run_config(config: TrainConfig, settings: Settings) -> TrainConfig:
    """``config`` as this CI job runs it: with a manual run's pipeline variables applied
    (``train`` and ``cancel`` must agree on it: the job's name depends on the worker count)."""
    return apply_overrides(config, workers=settings.workers, extra_args=settings.extra_args)


def checked_ci_job(loaded: LoadedConfig, runtime: Runtime) -> CIJobTime | None:
    """The CI job's timeout and time spent, with one warning when train.yaml's ``timeout`` is
    longer than the job's (``validate``, ``render`` and ``train`` say it alike)."""
    job = ci_job_time(runtime.settings.job_time, runtime.clock.now())
    warning = longer_than_job(loaded.config.timeout, job, loaded.config_path)
    if warning:
        runtime.console.warning(warning)
    return job


def checked_command(loaded: LoadedConfig, runtime: Runtime) -> None:
    """One warning for each thing train.yaml's ``command`` will not do as written
    (:mod:`ci_runner.config.command`; ``validate``, ``render`` and ``train`` say it alike)."""
    for warning in command_warnings(loaded.config.command, loaded.config_path):
        runtime.console.warning(warning)


def note_uncommitted(
    args: argparse.Namespace, loaded: LoadedConfig, runtime: Runtime, done: str
) -> None:
    """One line when train.yaml in the working tree is not what was read from the commit
    (``validate`` and ``render`` judge the commit; ``done`` says what the command did with it,
    e.g. "validate checked"): not with ``--sha``, which names the commit on purpose."""
    if args.sha:
        return
    try:
        if not differs_from_commit(loaded.ctx.sha, loaded.config_path, loaded.root):
            return
    except GitError:
        return  # git could not compare: a note is not worth failing the command for
    runtime.console.status(
        f"note: {loaded.config_path} has uncommitted changes; {done} commit "
        f"{loaded.ctx.short_sha}; commit them (or pass --sha REV to choose the commit)"
    )


def plan_only(loaded: LoadedConfig, runtime: Runtime) -> RunPlan:
    """The plan ``validate`` and ``render`` show: no secrets read, no output files; what the
    project's policy refuses, refused."""
    checked_command(loaded, runtime)
    plan = build_plan(
        loaded.config,
        loaded.ctx,
        runtime.settings,
        ci_job=checked_ci_job(loaded, runtime),
        masker=runtime.console.masker,
        policy=loaded.policy,
    )
    check_allowed(plan, loaded.policy)
    return plan
