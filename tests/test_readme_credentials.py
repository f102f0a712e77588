"""The README's table of which credential reaches which container, against the rendered objects.

The table ("Tokens and where they go") is parsed from README.md; the manifests are rendered for
the examples and for configs with and without tracking, with ``tracking.ranks_log`` and
without, as ``train`` renders them (the run created, then :func:`ranks_join`). Every container's
variables from a Secret, ``envFrom`` and Secret volumes must be what its row says, as its row
says (variables or files), and every container must have a row: the table cannot drift.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Final

import pytest

from ci_runner.clock import ManualClock
from ci_runner.config.schema import load_config
from ci_runner.config.setup_env import PIP_SETTINGS
from ci_runner.config.types import Elastic, TrackingSpec, TrainConfig
from ci_runner.context import CIContext
from ci_runner.gitlab.transport import BoundedSession, Budget
from ci_runner.kube_yaml import manifest_yaml
from ci_runner.plan.run_plan import RunPlan
from ci_runner.plan.tracking import PASSWORD_VARIABLE, RANK_TOKEN_VARIABLE, TOKEN_VARIABLE
from ci_runner.render_job import render_job
from ci_runner.settings import read_settings
from ci_runner.tracking.client import MlflowApi
from ci_runner.tracking.stage import TrackedRun, ranks_join
from ci_runner.tracking.target import Target, rank_sign_in
from ci_runner.variables import GITLAB_CREDENTIALS, GITLAB_TOKEN_VARIABLES
from testing.paths import REPO_ROOT, example_configs
from testing.plan_cases import trusted_plan

README: Final = REPO_ROOT / "README.md"
CONTAINERS_HEADER: Final = "| container | holds | keys of the job's Secret | as |"
TOKENS_HEADER: Final = "| token | what for | scope and role |"
RANKS_LOG: Final = "; with `tracking.ranks_log`: "
# install-requirements' keys: those of train.yaml's `secrets` that are pip's settings
# (ci_runner/config/setup_env.py), as the README's row says them.
PIP_SECRETS: Final = "the pip settings among `secrets`"

CONTEXT = CIContext(
    sha="0123456789abcdef0123456789abcdef01234567",
    project_path="group/project",
    project_id="42",
    job_id="5005",
    server_url="https://gitlab.example.com",
    repo_url="https://gitlab.example.com/group/project.git",
)
ENV = {
    "CI_JOB_TOKEN": "glcbt-job-token-value",
    "CI_RUNNER_GITLAB_TOKEN": "glpat-comment-token-value",
    "CI_RUNNER_MLFLOW_TOKEN": "glpat-ranks-token-value",
    "MLFLOW_TRACKING_URI": "https://mlflow.example.com",
    "MLFLOW_TRACKING_USERNAME": "ci",
    "MLFLOW_TRACKING_PASSWORD": "mlflow-password-value",
    "WANDB_API_KEY": "wandb-key-value",
    "PIP_INDEX_URL": "https://user:pw@pypi.example.com/simple",
}
GITLAB = Target("gitlab", "https://gitlab.example.com/api/v4/projects/42/ml/mlflow", "glpat-c")
MLFLOW = Target("mlflow", "https://mlflow.example.com", username="ci", password="mlflow-pw")


@dataclass(frozen=True)
class Row:
    """One container's row: the Secret keys it gets (``secrets``: train.yaml's), those it gets
    only with ``tracking.ranks_log``, and how (``variables``, ``files`` or ``—``)."""

    keys: frozenset[str]
    ranks_log_keys: frozenset[str]
    way: str


def table(header: str) -> list[list[str]]:
    """The cells of the README's table under ``header``."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert lines.count(header) == 1, f"README.md has no single table headed {header}"
    start = lines.index(header) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def names(cell: str) -> frozenset[str]:
    """The backticked names of ``cell`` ("—": none), each one of them the whole of its part."""
    if cell == "—":
        return frozenset()
    parts = re.split(r", | or ", cell)
    found = [re.fullmatch(r"`([A-Za-z_]+)`", part) for part in parts]
    assert all(found), f"not a list of `NAMES`: {cell!r}"
    return frozenset(m.group(1) for m in found if m)


def container_rows() -> dict[str, Row]:
    """The table's rows by container name (the row's first backticked word); the ranks' row,
    which must say they get what the launcher gets, under ``ranks``."""
    rows: dict[str, Row] = {}
    for container, _, keys, way in table(CONTAINERS_HEADER):
        if container.startswith("the CI job"):
            assert (keys, way) == ("—", "—")
            continue
        if container.startswith("the ranks"):
            assert keys == "the `launcher`'s"
            rows["ranks"] = replace(rows["launcher"], way=way)
            continue
        name = re.match(r"`([a-z-]+)`", container)
        assert name, f"no container named in {container!r}"
        base, _, conditional = keys.partition(RANKS_LOG)
        given = frozenset({PIP_SECRETS}) if base == PIP_SECRETS else names(base)
        rows[name.group(1)] = Row(given, names(conditional or "—"), way)
    return rows


def given_keys(plan: RunPlan, cell_name: str) -> tuple[str, ...]:
    """The Secret keys a name of the README's table stands for."""
    if cell_name == "secrets":
        return plan.config.secrets
    if cell_name == PIP_SECRETS:
        return tuple(name for name in plan.config.secrets if name in PIP_SETTINGS)
    return (cell_name,)


def secret_refs(plan: RunPlan, pod: dict[str, Any], container: dict[str, Any]) -> Iterator[
    tuple[str, str]
]:  # fmt: skip
    """(key of the job's Secret, how) for everything of a Secret that ``container`` gets."""
    for item in container.get("env", []):
        ref = item.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            assert ref["name"] == plan.secret.name, item
            yield ref["key"], "variables"
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            assert source["secretRef"]["name"] == plan.secret.name, source
            yield from ((key, "variables") for key in plan.secret.keys)
    volumes = {volume["name"]: volume for volume in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        sources = [volume] + [s for s in volume.get("projected", {}).get("sources", [])]
        for source in sources:
            secret = source.get("secret")
            if secret is None:
                continue
            assert secret.get("secretName", secret.get("name")) == plan.secret.name, volume
            items = secret.get("items")
            keys = [item["key"] for item in items] if items else plan.secret.keys
            yield from ((key, "files") for key in keys)


def containers(manifest: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Every container of the job: an MPIJob's launcher and workers, a Job's (torchrun's) nodes."""
    specs = manifest["spec"].get("mpiReplicaSpecs", {}).values() or [manifest["spec"]]
    for spec in specs:
        pod = spec["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            yield pod, container


def tracked(plan: RunPlan, target: Target) -> RunPlan:
    """``plan`` as ``train`` runs it once the run exists at ``target``."""
    api = MlflowApi(target, BoundedSession(Budget(ManualClock(), 1)))
    run = TrackedRun(
        api, "7", "0a1b2c", "https://page", 1, rank_sign_in(plan.config, target, read_settings(ENV))
    )
    return ranks_join(plan, run)


def example(path: str) -> TrainConfig:
    return load_config((REPO_ROOT / path).read_text(encoding="utf-8"), path)


def cases() -> dict[str, RunPlan]:
    own = replace(
        load_config("name: job\nimage: img\ncommand: python train.py\n"),
        secrets=("WANDB_API_KEY", "PIP_INDEX_URL"),
        env=(("PIP_EXTRA_INDEX_URL", "https://pypi.org/simple"),),
    )
    elastic = replace(own, elastic=Elastic(1, 3))
    gitlab = replace(own, tracking=TrackingSpec("gitlab"))
    gitlab_ranks = replace(own, tracking=TrackingSpec("gitlab", ranks_log=True))
    mlflow_ranks = replace(elastic, tracking=TrackingSpec("mlflow", ranks_log=True))
    torchrun = replace(own, distributed="torchrun")
    torchrun_ranks = replace(torchrun, tracking=TrackingSpec("mlflow", ranks_log=True))
    plans = {
        str(path.relative_to(REPO_ROOT)): trusted_plan(
            example(str(path.relative_to(REPO_ROOT))), CONTEXT, ENV, read_secrets=True
        )
        for path in example_configs()
    }
    assert plans, "no example"

    def plan(config: TrainConfig) -> RunPlan:
        return trusted_plan(config, CONTEXT, ENV, read_secrets=True)

    return {
        **plans,
        "untracked": plan(own),
        "elastic, untracked": plan(elastic),
        "tracking: gitlab": tracked(plan(gitlab), GITLAB),
        "tracking: mlflow": tracked(plan(elastic), MLFLOW),
        "tracking: gitlab, ranks_log": tracked(plan(gitlab_ranks), GITLAB),
        "tracking: mlflow, ranks_log (a password)": tracked(plan(mlflow_ranks), MLFLOW),
        "torchrun, untracked": plan(torchrun),
        "torchrun, tracking: mlflow, ranks_log": tracked(plan(torchrun_ranks), MLFLOW),
    }


CASES: Final = cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_container_gets_what_the_readme_table_says(case: str) -> None:
    plan = CASES[case]
    rows = container_rows()
    manifest = render_job(plan)
    seen = set()
    for pod, container in containers(manifest):
        name = container["name"]
        assert name in rows, f"README.md's table has no row for the container {name}"
        row = rows[name]
        refs = list(secret_refs(plan, pod, container))
        expected = {given_keys(plan, key) for key in row.keys}
        keys = {key for group in expected for key in group}
        if plan.tracking is not None and row.ranks_log_keys:
            assert plan.config.tracking.ranks_log
            assert set(plan.tracking.credentials) <= row.ranks_log_keys
            keys |= set(plan.tracking.credentials)
        assert sorted({key for key, _ in refs}) == sorted(keys), (case, name)
        assert {how for _, how in refs} == ({row.way} if keys else set()), (case, name)
        seen.add(name)
    ran = {"torchrun"} if plan.config.distributed == "torchrun" else {"worker", "launcher"}
    assert {"fetch-code", *ran} <= seen
    # No value of the Secret is written anywhere in the manifest (the git user name, such as
    # gitlab-ci-token, is no secret: fetch-code.sh names it).
    text = manifest_yaml(manifest)
    values = plan.secret.values()
    assert [k for k, v in values.items() if v in text and k != "GIT_USERNAME"] == []


def test_the_table_covers_every_container_rendered() -> None:
    rendered = {c["name"] for plan in CASES.values() for _, c in containers(render_job(plan))}
    assert set(container_rows()) - {"ranks"} == rendered


def test_by_default_no_container_gets_a_gitlab_or_mlflow_token() -> None:
    for case in ("tracking: gitlab", "tracking: mlflow"):
        plan = CASES[case]
        assert plan.tracking is None
        assert plan.secret.keys == ("GIT_USERNAME", "GIT_PASSWORD", *plan.config.secrets)
        values = plan.secret.values().values()
        tokens = [ENV[name] for name in (*GITLAB_TOKEN_VARIABLES[:1], RANK_TOKEN_VARIABLE)]
        assert [t for t in [*tokens, MLFLOW.password, GITLAB.token] if t in values] == []


def test_the_token_table_names_every_credential_ci_runner_reads() -> None:
    named = set()
    for token, _, _ in table(TOKENS_HEADER):
        named |= set(re.findall(r"`([A-Z_]+)`", token))
    used = {
        *GITLAB_TOKEN_VARIABLES,
        RANK_TOKEN_VARIABLE,
        TOKEN_VARIABLE,
        PASSWORD_VARIABLE,
        *(n for n in GITLAB_CREDENTIALS if n in ("CI_JOB_TOKEN", "CI_RUNNER_GIT_TOKEN")),
        "KUBECONFIG",
        "AWS_SECRET_ACCESS_KEY",
    }
    assert used <= named, used - named
