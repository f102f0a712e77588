"""train.yaml + CI context → the MPIJob manifest (kubeflow.org/v2beta1), and its Secret's contents.

Pure functions: the same config and context always give the same manifest. The manifest comes
from ``templates/mpijob.yaml.j2``; the shell scripts the pods run are ``templates/scripts/*.sh``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml
from yaml.representer import SafeRepresenter

try:  # libyaml's emitter: the pure-Python one took 40 ms of `ci-runner render`
    from yaml import CSafeDumper as _SafeDumper
except ImportError:  # PyYAML built without libyaml
    from yaml import SafeDumper as _SafeDumper  # type: ignore[assignment]

from ci_runner.context import CIContext
from ci_runner.errors import ConfigError, GitError, Problem
from ci_runner.plan.job_name import job_name
from ci_runner.spec.schema import RESERVED_ENV, RESERVED_ENV_PREFIX, expand_outputs
from ci_runner.spec.types import TrainConfig
from ci_runner.templating import environment, templates_dir

CODE_DIR = "/ci-runner/code"
# install-requirements.sh links the site-packages directories pip chose to these fixed paths.
DEPS_PYTHONPATH = "/ci-runner/python/purelib:/ci-runner/python/platlib"
HOSTFILE = "/etc/mpi/hostfile"
DISCOVER_HOSTS = "/etc/mpi/discover_hosts.sh"
GIT_USERNAME_KEY = "GIT_USERNAME"
GIT_PASSWORD_KEY = "GIT_PASSWORD"
LABEL_PREFIX = "ci-runner"
# Annotation values are capped so a pathological branch name cannot push the object past the
# API server's 256 KiB annotation limit.
MAX_ANNOTATION_CHARS = 4096

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
# libyaml's safe loader when PyYAML has it: ten times faster on the ~17 KB manifest.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SCRIPTS = {
    "fetch": "fetch-code.sh",
    "install": "install-requirements.sh",
    "ready": "ready.sh",
    "launch": "launch.sh",
}


def secret_name(job: str) -> str:
    """The Secret holding the job's git credentials and train.yaml ``secrets``."""
    return f"{job}-secrets"


def secret_data(config: TrainConfig, ctx: CIContext, env: Mapping[str, str]) -> dict[str, str]:
    """The Secret's contents: git credentials for the pods, then one key per ``config.secrets``.

    Git uses ``CI_RUNNER_GIT_TOKEN`` (user ``CI_RUNNER_GIT_USERNAME``, default ``oauth2``) when
    set, else the job token as ``gitlab-ci-token``. A missing secret variable is a ConfigError.
    """
    if env.get("CI_RUNNER_GIT_TOKEN"):
        data = {
            GIT_USERNAME_KEY: env.get("CI_RUNNER_GIT_USERNAME") or "oauth2",
            GIT_PASSWORD_KEY: env["CI_RUNNER_GIT_TOKEN"],
        }
    else:
        data = {GIT_USERNAME_KEY: "gitlab-ci-token", GIT_PASSWORD_KEY: env.get("CI_JOB_TOKEN", "")}
    _check_names(config)
    problems = []
    for name in config.secrets:
        value = env.get(name)
        if not value:
            problems.append(
                Problem(
                    config.source_file,
                    "secrets",
                    None,
                    f"CI variable {name} is not set",
                    f"define {name} as a masked variable in the project's Settings > CI/CD > "
                    "Variables (or export it when running outside CI)",
                )
            )
        else:
            data[name] = value
    if problems:
        raise ConfigError(problems)
    return data


def render_mpijob(config: TrainConfig, ctx: CIContext) -> dict[str, Any]:
    """The MPIJob for ``config`` at commit ``ctx.sha``, as a plain dict."""
    _check_names(config)
    if not ctx.repo_url:
        raise GitError(
            "no repository URL for the pods to fetch the code from; fix: pass --repo-url "
            "https://<gitlab>/<group>/<project>.git, add an 'origin' remote, or run in GitLab CI"
        )
    name = job_name(config, ctx)
    text = environment().get_template("mpijob.yaml.j2").render(_template_values(config, ctx, name))
    manifest: dict[str, Any] = yaml.load(text, Loader=_LOADER)  # a safe loader
    return manifest


def manifest_yaml(manifest: Mapping[str, Any]) -> str:
    """``manifest`` as YAML for ``kubectl apply -f``; multi-line strings as literal blocks."""
    return yaml.dump(
        dict(manifest), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30
    )


class _Dumper(_SafeDumper):
    pass


def _represent_str(dumper: SafeRepresenter, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None  # PyYAML falls back to quoting when | cannot hold it
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def _template_values(config: TrainConfig, ctx: CIContext, name: str) -> dict[str, Any]:
    k8s = config.kubernetes
    scripts = {
        key: (templates_dir() / "scripts" / file).read_text(encoding="utf-8")
        for key, file in _SCRIPTS.items()
    }
    scheduling = None
    if k8s.queue:
        # The gang is the workers only. With WaitForWorkersReady the launcher pod is created
        # after every worker is ready; a gang of workers + launcher would hold the workers back
        # until a launcher exists, which waits for the workers (kubeflow/mpi-operator#608).
        scheduling = {
            "min_available": config.workers,
            "queue": k8s.queue,
            "priority_class": k8s.priority_class,
        }
    resource_limits: list[tuple[str, str | int]] = []
    if config.resources.cpu:
        resource_limits.append(("cpu", config.resources.cpu))
    if config.resources.memory:
        resource_limits.append(("memory", config.resources.memory))
    if config.resources.gpu:
        resource_limits.append(("nvidia.com/gpu", config.resources.gpu))
    return {
        "name": name,
        "namespace": k8s.namespace,
        "labels": _labels(config, ctx, name),
        "annotations": _annotations(config, ctx),
        "slots_per_worker": config.slots_per_worker,
        "workers": config.workers,
        "ttl_seconds_after_finished": k8s.ttl_seconds_after_finished,
        "backoff_limit": k8s.backoff_limit,
        "active_deadline_seconds": config.timeout,
        "scheduling": scheduling,
        "image": config.image,
        "service_account": k8s.service_account,
        "priority_class": k8s.priority_class,
        "image_pull_secrets": k8s.image_pull_secrets,
        "node_selector": k8s.node_selector,
        "tolerations": k8s.tolerations,
        "dns_config": k8s.dns_config,
        "repo_url": ctx.repo_url,
        "secret_name": secret_name(name),
        "requirements": config.requirements or "",
        "pip_cache_pvc": k8s.pip_cache_pvc,
        "scripts": scripts,
        "setup_env": [("CI_RUNNER_SHA", ctx.sha), *config.env],
        "rank_env": _rank_env(config, ctx, name),
        "secret_env": [(s, secret_name(name), s) for s in config.secrets],
        "launcher_args": launcher_args(config),
        "resource_limits": resource_limits,
    }


def launcher_args(config: TrainConfig) -> list[str]:
    """The launcher's ``horovodrun`` command line (run from the code directory)."""
    slots = config.slots_per_worker
    args = ["horovodrun", "-np", str(config.ranks)]
    if config.elastic:
        args += [
            "--min-np",
            str(config.elastic.min_workers * slots),
            "--max-np",
            str(config.elastic.max_workers * slots),
            "--slots",
            str(slots),
            "--host-discovery-script",
            DISCOVER_HOSTS,
        ]
    else:
        args += ["--hostfile", HOSTFILE]
    return [*args, *config.command]


def _rank_env(config: TrainConfig, ctx: CIContext, name: str) -> list[tuple[str, str]]:
    user = dict(config.env)
    env = [
        ("CI_RUNNER_SHA", ctx.sha),
        ("CI_RUNNER_JOB", name),
        ("CI_RUNNER_PROJECT", ctx.project_path),
        ("CI_RUNNER_CODE_DIR", CODE_DIR),
    ]
    if config.data:
        env.append(("DATA_URI", config.data))
    if config.outputs:
        outputs = expand_outputs(config.outputs, project=ctx.project_path, sha=ctx.sha, job=name)
        env.append(("OUTPUT_URI", outputs))
    pythonpath = DEPS_PYTHONPATH
    if user.get("PYTHONPATH"):
        pythonpath = f"{pythonpath}:{user['PYTHONPATH']}"
    env.append(("PYTHONPATH", pythonpath))
    if "PYTHONUNBUFFERED" not in user:
        env.append(("PYTHONUNBUFFERED", "1"))  # ranks' lines reach the CI log as they happen
    env += [(k, v) for k, v in config.env if k != "PYTHONPATH"]
    return env


def _check_names(config: TrainConfig) -> None:
    problems = []
    for key, _ in config.env:
        if key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIX):
            problems.append(
                Problem(
                    config.source_file,
                    f"env.{key}",
                    None,
                    f"{key} is set by ci-runner for every rank",
                    "use another name",
                )
            )
    env_names = {key for key, _ in config.env}
    for secret in config.secrets:
        if secret in RESERVED_ENV or secret.startswith(RESERVED_ENV_PREFIX) or secret in env_names:
            what = "also in env" if secret in env_names else "set by ci-runner for every rank"
            problems.append(
                Problem(
                    config.source_file,
                    "secrets",
                    None,
                    f"{secret} is {what}",
                    "give the secret variable another name",
                )
            )
    if problems:
        raise ConfigError(problems)


def label_value(text: str) -> str:
    """``text`` as a valid label value: other characters become ``-``, at most 63, may be ""."""
    value = _LABEL_VALUE_BAD.sub("-", text)[:63]
    return value.strip("-_.")


def _labels(config: TrainConfig, ctx: CIContext, name: str) -> list[tuple[str, str]]:
    candidates = [
        ("app.kubernetes.io/managed-by", "ci-runner"),
        (f"{LABEL_PREFIX}/job", name),
        (f"{LABEL_PREFIX}/config-name", config.name),
        (f"{LABEL_PREFIX}/project", ctx.project_path),
        (f"{LABEL_PREFIX}/sha", ctx.sha),
        (f"{LABEL_PREFIX}/pipeline", ctx.pipeline_id),
        (f"{LABEL_PREFIX}/ci-job", ctx.job_id),
        (f"{LABEL_PREFIX}/merge-request", ctx.mr_iid),
    ]
    labels = [(key, label_value(value)) for key, value in candidates if value]
    return [(key, value) for key, value in labels if value]


def _annotations(config: TrainConfig, ctx: CIContext) -> list[tuple[str, str]]:
    candidates = [
        (f"{LABEL_PREFIX}/project", ctx.project_path),
        (f"{LABEL_PREFIX}/project-url", ctx.project_url),
        (f"{LABEL_PREFIX}/sha", ctx.sha),
        (f"{LABEL_PREFIX}/ref", ctx.ref_name),
        (f"{LABEL_PREFIX}/pipeline-id", ctx.pipeline_id),
        (f"{LABEL_PREFIX}/pipeline-source", ctx.pipeline_source),
        (f"{LABEL_PREFIX}/ci-job-id", ctx.job_id),
        (f"{LABEL_PREFIX}/ci-job-url", ctx.job_url),
        (f"{LABEL_PREFIX}/merge-request-iid", ctx.mr_iid),
        (f"{LABEL_PREFIX}/config", config.source_file),
    ]
    return [(key, value[:MAX_ANNOTATION_CHARS]) for key, value in candidates if value]
