"""The CI/CD component users include (templates/train.yml) and this repository's own pipeline."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ci_runner.policy import ProjectPolicy, project_policy
from ci_runner.settings import read_settings

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPONENT = REPO_ROOT / "templates" / "train.yml"
PIPELINE = REPO_ROOT / ".gitlab-ci.yml"

INPUT = re.compile(r"\$\[\[\s*inputs\.([a-z_]+)\s*\]\]")
COMPONENT_CONTEXT = re.compile(r"\$\[\[\s*component\.([a-z_]+)\s*\]\]")


def load_component(
    inputs: dict[str, Any], version: str | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(spec, jobs) of the component with ``inputs`` and the component context (``version``:
    None when included by SHA or branch) interpolated the way GitLab does."""
    header, body = COMPONENT.read_text().split("\n---\n", 1)
    declared = yaml.safe_load(header)["spec"]
    spec = declared["inputs"]
    context = {"version": version or ""}
    for match in COMPONENT_CONTEXT.finditer(body):
        assert match.group(1) in declared.get("component", []), f"{match.group(1)} not declared"
    body = COMPONENT_CONTEXT.sub(lambda m: context[m.group(1)], body)
    values: dict[str, Any] = {}
    for name, field in spec.items():
        if name in inputs:
            values[name] = inputs[name]
        elif "default" in field:
            values[name] = field["default"]
        else:
            raise AssertionError(f"input {name} has no default and was not given")
    unknown = set(inputs) - set(spec)
    assert not unknown, f"inputs not in the spec: {unknown}"

    def substitute(match: re.Match[str]) -> str:
        value = values[match.group(1)]
        return str(value).lower() if isinstance(value, bool) else str(value)

    return spec, yaml.safe_load(INPUT.sub(substitute, body))


TOKEN = re.compile(r'\s*(\$[A-Z_]+|"[^"]*"|==|!=|&&|\|\||\(|\))')


def evaluate(expression: str, variables: dict[str, str]) -> bool:
    """GitLab `rules:if` for the subset we use: $VAR, $VAR == "x", $VAR != "x", &&, ||."""
    tokens = TOKEN.findall(expression)
    assert "".join(tokens).replace(" ", "") == expression.replace(" ", ""), expression

    def value(token: str) -> str | None:
        if token.startswith("$"):
            return variables.get(token[1:]) or None
        return token.strip('"')

    def term(i: int) -> tuple[bool, int]:
        left = value(tokens[i])
        if i + 1 < len(tokens) and tokens[i + 1] in ("==", "!="):
            right = value(tokens[i + 2])
            return (left == right) == (tokens[i + 1] == "=="), i + 3
        return left is not None, i + 1

    def conjunction(i: int) -> tuple[bool, int]:
        result, i = term(i)
        while i < len(tokens) and tokens[i] == "&&":
            other, i = term(i + 1)
            result = result and other
        return result, i

    result, i = conjunction(0)
    while i < len(tokens) and tokens[i] == "||":
        other, i = conjunction(i + 1)
        result = result or other
    assert i == len(tokens), expression
    return result


def job_runs(rules: list[dict[str, Any]], variables: dict[str, str]) -> bool:
    for rule in rules:
        if "if" not in rule or evaluate(rule["if"], variables):
            return bool(rule.get("when", "on_success") != "never")
    return False


PIPELINES = {
    "push, no MR": {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_BRANCH": "feature"},
    "push, open MR": {
        "CI_PIPELINE_SOURCE": "push",
        "CI_COMMIT_BRANCH": "feature",
        "CI_OPEN_MERGE_REQUESTS": "group/project!4",
    },
    "MR pipeline": {"CI_PIPELINE_SOURCE": "merge_request_event", "CI_MERGE_REQUEST_IID": "4"},
    "manual run": {
        "CI_PIPELINE_SOURCE": "web",
        "CI_COMMIT_BRANCH": "feature",
        "CI_OPEN_MERGE_REQUESTS": "group/project!4",
    },
    "schedule": {"CI_PIPELINE_SOURCE": "schedule", "CI_COMMIT_BRANCH": "main"},
    "tag push": {"CI_PIPELINE_SOURCE": "push", "CI_COMMIT_TAG": "v1"},
}


# Which pipelines run the component's job is evaluated by gitlab-ci-local itself
# (tests/test_templates_ci.py); gitlab-ci-local ignores workflow:rules, so this repository's
# workflow is checked with the evaluator above.


def test_train_job_shape() -> None:
    _, jobs = load_component(
        {"image": "img:1", "config": "ml/train.yaml", "stage": "gpu", "output_dir": "out"}
    )
    assert list(jobs) == ["train"]
    job = jobs["train"]
    assert job["stage"] == "gpu"
    assert job["image"] == "img:1"
    assert job["interruptible"] is True
    assert job["variables"]["CI_RUNNER_CONFIG"] == "ml/train.yaml"
    assert job["variables"]["CI_RUNNER_ALLOW_FORKS"] == "false"
    assert job["script"] == [
        'ci-runner train --config "$CI_RUNNER_CONFIG" --output-dir "$CI_RUNNER_OUTPUT_DIR"'
    ]
    assert job["environment"] == {"name": "training", "action": "access"}
    assert job["resource_group"] == ""  # none: GitLab ignores a blank key
    assert job["artifacts"] == {
        "when": "always",
        "expire_in": "30 days",
        "expose_as": "Training report",
        "paths": ["out/"],
        "reports": {"metrics": "out/metrics.txt", "annotations": "out/annotations.json"},
    }


@pytest.mark.parametrize(
    ("status", "cancels"),
    # after_script's CI_JOB_STATUS as GitLab Runner sets it (common/build.go,
    # runtimeStateAndError): success, failed, canceled, timedout (RUNNER_SCRIPT_TIMEOUT)
    [("success", False), ("failed", False), ("canceled", True), ("timedout", True)],
)
def test_after_script_cancels_a_cancelled_or_timed_out_job(
    tmp_path: Path, status: str, cancels: bool
) -> None:
    _, jobs = load_component({"image": "img:1", "output_dir": "out dir"})
    job = jobs["train"]
    (line,) = job["after_script"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    recorder = bin_dir / "ci-runner"
    recorder.write_text('#!/bin/sh\nprintf "%s|" "$@" > "$CALLS"\n')
    recorder.chmod(0o755)
    env = {
        **{k: str(v) for k, v in job["variables"].items()},
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CALLS": str(tmp_path / "calls"),
        "CI_JOB_STATUS": status,
    }
    # the shell executor's and most images' /bin/sh (dash in Debian's)
    done = subprocess.run(["/bin/sh", "-c", line], env=env, capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    calls = tmp_path / "calls"
    expected = "cancel|--config|train.yaml|--output-dir|out dir|"
    assert (calls.read_text() if calls.exists() else None) == (expected if cancels else None)


def test_the_script_timeout_leaves_after_script_its_time() -> None:
    spec, jobs = load_component({"image": "img:1"})
    variables = jobs["train"]["variables"]
    # No script timeout unless asked: a default would cut a project's longer job timeout short.
    assert (variables["RUNNER_SCRIPT_TIMEOUT"], variables["RUNNER_AFTER_SCRIPT_TIMEOUT"]) == (
        "",
        "5m",
    )
    _, jobs = load_component({"image": "img:1", "script_timeout": "55m"})
    assert jobs["train"]["variables"]["RUNNER_SCRIPT_TIMEOUT"] == "55m"  # + 5m: GitLab's 60m
    assert spec["script_timeout"]["regex"] == spec["after_script_timeout"]["regex"]
    pattern = re.compile(spec["script_timeout"]["regex"])
    assert [bool(pattern.match(t)) for t in ("55m", "2h30m", "90s", "", "1d", "5 m")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


def test_fork_merge_requests_are_opt_in() -> None:
    spec, jobs = load_component({"image": "img:1", "allow_fork_merge_requests": True})
    assert spec["allow_fork_merge_requests"] == {
        "type": "boolean",
        "default": False,
        "description": "Train merge requests from forks. Their code runs with your cluster "
        "credentials.",
    }
    assert jobs["train"]["variables"]["CI_RUNNER_ALLOW_FORKS"] == "true"


def test_the_result_reply_is_on_unless_turned_off() -> None:
    spec, jobs = load_component({"image": "img:1"})
    assert spec["notify_result"]["type"] == "boolean"
    assert jobs["train"]["variables"]["CI_RUNNER_NOTIFY_RESULT"] == "true"
    _, jobs = load_component({"image": "img:1", "notify_result": False})
    assert jobs["train"]["variables"]["CI_RUNNER_NOTIFY_RESULT"] == "false"


def test_the_policy_inputs_reach_ci_runner_s_project_policy() -> None:
    _, jobs = load_component(
        {
            "image": "img:1",
            "allowed_secrets": "WANDB_*",
            "allowed_outputs": "s3://models/team-a/",
            "allowed_pip_cache_claims": "none",
            "allowed_local_queues": "team-a, team-a-?",
            "allowed_workload_priority_classes": "low,batch-*",
        }
    )
    assert project_policy(jobs["train"]["variables"]) == ProjectPolicy(
        allowed_secrets=("WANDB_*",),
        allowed_outputs=("s3://models/team-a/",),
        allowed_pip_cache_claims=(),
        allowed_local_queues=("team-a", "team-a-?"),
        allowed_workload_priority_classes=("low", "batch-*"),
    )
    spec, jobs = load_component({"image": "img:1"})
    assert project_policy(jobs["train"]["variables"]) == ProjectPolicy()  # empty: any
    for name in ("allowed_local_queues", "allowed_workload_priority_classes"):
        assert spec[name]["default"] == ""
        assert "* and ? as wildcards; none for no" in spec[name]["description"]


def test_the_image_defaults_to_the_one_released_with_the_same_version() -> None:
    _, jobs = load_component({}, version="1.2.0")
    job = jobs["train"]
    assert job["image"] == "$CI_RUNNER_RELEASED_IMAGE"  # GitLab expands it from the job's variables
    assert job["variables"]["CI_RUNNER_RELEASED_IMAGE"] == "$CI_REGISTRY/ci-runner/ci-runner:1.2.0"


def test_the_release_checks_the_default_image_is_its_own() -> None:
    spec, _ = load_component({})
    assert spec["image_repository"]["default"] == "$CI_REGISTRY/ci-runner/ci-runner"
    script = "\n".join(yaml.safe_load(PIPELINE.read_text())["dist"]["script"])
    assert (
        'grep -qxF "      default: \\$CI_REGISTRY/$CI_PROJECT_PATH" templates/train.yml' in script
    )
    assert "      default: $CI_REGISTRY/ci-runner/ci-runner\n" in COMPONENT.read_text()


def test_own_pipeline_runs_the_tests_and_includes_the_component() -> None:
    pipeline = yaml.safe_load(PIPELINE.read_text())
    (include,) = pipeline["include"]
    assert include["component"] == "$CI_SERVER_FQDN/$CI_PROJECT_PATH/train@$CI_COMMIT_SHA"
    assert include["inputs"]["image"] == "$CI_REGISTRY_IMAGE:$CI_COMMIT_SHA"
    _, jobs = load_component(include["inputs"])
    assert list(jobs) == ["example-train"]
    assert jobs["example-train"]["image"] == "$CI_REGISTRY_IMAGE:$CI_COMMIT_SHA"
    assert pipeline["example-train"]["needs"] == ["image-build"]
    assert pipeline["unit"]["script"] == ["make lint typecheck unit"]
    assert pipeline["e2e"]["script"][-1] == "make test"
    assert pipeline["e2e"]["variables"]["CI_RUNNER_REQUIRE_CLUSTER_RIGHTS"] == "1"
    assert pipeline["unit"]["interruptible"] is pipeline["e2e"]["interruptible"] is True
    # a newer commit cancels the outdated pipeline's running jobs, not only a pipeline none of
    # whose non-interruptible jobs started (GitLab's default, conservative)
    assert pipeline["workflow"]["auto_cancel"] == {"on_new_commit": "interruptible"}
    workflow = pipeline["workflow"]["rules"]
    assert [p for p in PIPELINES if job_runs(workflow, PIPELINES[p])] == [
        "push, no MR",
        "MR pipeline",
        "manual run",
        "tag push",
    ]


def test_rule_evaluator_handles_what_the_rules_use() -> None:
    variables = {"A": "x", "B": ""}
    assert evaluate('$A == "x"', variables)
    assert not evaluate('$A != "x"', variables)
    assert not evaluate("$B", variables)
    assert evaluate('$B || $A == "x"', variables)
    assert not evaluate("$A && $B", variables)


def test_component_command_lines_parse_with_the_real_cli() -> None:
    import io

    from ci_runner.cli import _parser
    from ci_runner.commands.common import Runtime

    _, jobs = load_component({"image": "img:1"})
    job = jobs["train"]
    variables = {"CI_RUNNER_CONFIG": "train.yaml", "CI_RUNNER_OUTPUT_DIR": "ci-runner-out"}
    after = job["after_script"][0]
    cancel = after[after.index("ci-runner cancel") : after.index(";;")]
    parser = _parser(Runtime(read_settings({}), REPO_ROOT, io.StringIO(), io.StringIO()))
    parsed = []
    for line in [*job["script"], cancel]:
        words = shlex.split(re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], line))
        assert words[0] == "ci-runner"
        parsed.append(parser.parse_args(words[1:]))
    assert [(a.config, a.output_dir) for a in parsed] == [
        ("train.yaml", "ci-runner-out"),
        ("train.yaml", "ci-runner-out"),
    ]
    assert [a.run.__name__ for a in parsed] == ["run_train", "run_cancel"]


@pytest.mark.parametrize(
    ("name", "good", "bad"),
    [
        (
            "environment",
            ["training", "gpu/prod", "review/$CI_COMMIT_REF_SLUG", "e" * 255],
            ["", "a|b", "/gpu", "gpu/", "e" * 256],
        ),
        (
            "resource_group",
            ["", "gpu-cluster", "gpu cluster/1", "r" * 255],
            ["a|b", "x;y", "/gpu", "gpu/", "r" * 256],
        ),
        (
            "expose_as",
            ["Training report", "report_1", "A" * 100],
            ["", " lead", "a/b", "Bericht ä", "A" * 101],
        ),
        ("image", ["img:1", "$CI_REGISTRY_IMAGE:$CI_COMMIT_SHA"], ["", "img:", "my image"]),
        ("job_name", ["train", "train gpu:1", "t" * 255], ["", ".train", "t" * 256]),
    ],
)
def test_free_text_inputs_have_the_rule_gitlab_applies(
    name: str, good: list[str], bad: list[str]
) -> None:
    spec, _ = load_component({"image": "img:1"})
    pattern = re.compile(spec[name]["regex"])
    assert [bool(pattern.match(v)) for v in good + bad] == [True] * len(good) + [False] * len(bad)
    assert spec[name]["description"]


def test_the_job_file_is_the_component_without_its_component_context() -> None:
    from testing.ci_templates import JOB_FILE, job_file

    assert JOB_FILE.read_text() == job_file(COMPONENT.read_text()), (
        "templates/project/train.yml is not templates/train.yml's job file; fix: python -m "
        "testing.ci_templates"
    )
    component = yaml.safe_load(COMPONENT.read_text().split("\n---\n")[0])["spec"]
    job = yaml.safe_load(JOB_FILE.read_text().split("\n---\n")[0])["spec"]
    assert "component" in component and "component" not in job
    assert set(component["inputs"]) - set(job["inputs"]) == {"image_repository"}
    assert "default" not in job["inputs"]["image"]  # required
    assert job["inputs"]["image"]["regex"] == component["inputs"]["image"]["regex"]
    same = set(job["inputs"]) - {"image"}
    assert {n: job["inputs"][n] for n in same} == {n: component["inputs"][n] for n in same}
    assert "component." not in JOB_FILE.read_text().split("\n---\n")[1]


def test_an_input_added_to_the_component_reaches_the_job_file() -> None:
    from testing.ci_templates import job_file

    text = COMPONENT.read_text().replace(
        "    config:\n",
        "    notify:\n      type: boolean\n      default: true\n      description: x.\n"
        "    config:\n",
    )
    text = text.replace(
        "    CI_RUNNER_CONFIG:",
        '    CI_RUNNER_NOTIFY: "$[[ inputs.notify ]]"\n    CI_RUNNER_CONFIG:',
    )
    job = yaml.safe_load(job_file(text).split("\n---\n")[0])["spec"]["inputs"]
    assert job["notify"] == {"type": "boolean", "default": True, "description": "x."}
    assert 'CI_RUNNER_NOTIFY: "$[[ inputs.notify ]]"' in job_file(text)
