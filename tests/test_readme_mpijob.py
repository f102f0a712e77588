"""README's "Coming from a hand-written MPIJob": the train.yaml it shows validates, with no warning,
and renders an MPIJob that runs what the hand-written manifest beside it runs, where it runs it.

Both blocks are read from README.md, so neither can drift from what the test checks.
"""

from __future__ import annotations

import io
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from ci_runner import cli
from ci_runner.config.schema import load_config
from testing.git import run_git
from testing.paths import REPO_ROOT

GitRepo = Callable[[dict[str, str]], tuple[Path, str]]
README: Final = REPO_ROOT / "README.md"
SECTION: Final = "## Coming from a hand-written MPIJob\n"


def _section_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    assert text.count(SECTION) == 1, f"README.md has no single section {SECTION.strip()}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", section, re.S)


def hand_written() -> dict[str, Any]:
    (block,) = [b for b in _section_blocks() if "kind: MPIJob" in b]
    loaded: dict[str, Any] = yaml.safe_load(block)
    return loaded


def train_yaml() -> str:
    (block,) = [b for b in _section_blocks() if "kind: MPIJob" not in b]
    return block


def _run(argv: list[str], repo: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = {"CI_RUNNER_SETUP_IMAGE": "registry.example.com/group/ci-runner:1.2.0"}
    code = cli.main(argv, env=env, cwd=repo, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def project(git_repo: GitRepo) -> tuple[Path, str]:
    """The article's repository (simple_ml) with the README's train.yaml at its root."""
    repo, sha = git_repo(
        {
            "train.yaml": train_yaml(),
            "requirements.txt": "torch\n",
            "main_with_horovod.py": "print('Training. Epoch 0, MSE loss: 1.0, Worker: 0')\n",
        }
    )
    run_git(["remote", "add", "origin", "https://gitlab.example.com/faraway/simple_ml.git"], repo)
    return repo, sha


def test_the_readmes_train_yaml_is_valid_with_no_warning(project: tuple[Path, str]) -> None:
    repo, sha = project
    assert load_config(train_yaml()).name == "simple-ml"
    code, out, err = _run(["validate"], repo)
    assert (code, err) == (0, "")
    assert out.startswith(f"[ci-runner] train.yaml at {sha[:8]} is valid: MPIJob simple-ml-")
    assert out.endswith(", 2 workers x 1 slot = 2 ranks\n")


def _spec(mpijob: dict[str, Any], role: str) -> dict[str, Any]:
    spec: dict[str, Any] = mpijob["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]
    return spec


def _container(spec: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    containers: list[dict[str, Any]] = spec["containers"]
    return next(c for c in containers if name is None or c["name"] == name)


def test_the_rendered_mpijob_runs_what_the_hand_written_one_runs(
    project: tuple[Path, str],
) -> None:
    repo, _ = project
    code, out, err = _run(["render"], repo)
    assert code == 0
    assert err.startswith("[ci-runner] the MPIJob reads Secret ") and "warning" not in err
    rendered = next(d for d in yaml.safe_load_all(out) if d and d.get("kind") == "MPIJob")
    seed = hand_written()
    assert rendered["metadata"]["namespace"] == seed["metadata"]["namespace"]
    assert rendered["spec"]["slotsPerWorker"] == seed["spec"]["slotsPerWorker"]
    replicas = rendered["spec"]["mpiReplicaSpecs"]
    seed_replicas = seed["spec"]["mpiReplicaSpecs"]
    assert replicas["Worker"]["replicas"] == seed_replicas["Worker"]["replicas"]

    worker, seed_worker = _spec(rendered, "Worker"), _spec(seed, "Worker")
    for key in ("dnsPolicy", "tolerations"):
        assert worker[key] == seed_worker[key], key
    assert worker["dnsConfig"]["nameservers"] == seed_worker["dnsConfig"]["nameservers"]
    gpus = _container(worker, "worker")["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == _container(seed_worker)["resources"]["limits"]["nvidia.com/gpu"]
    for spec, seed_spec in ((worker, seed_worker), (_spec(rendered, "Launcher"), None)):
        seed_image = _container(seed_spec or _spec(seed, "Launcher"))["image"]
        assert {c["image"] for c in spec["containers"]} == {seed_image}

    # The seed's launcher: "sleep 1m && ... && horovodrun -np 2 --hostfile ... python X".
    seed_line = _container(_spec(seed, "Launcher"))["args"][0]
    seed_program = shlex.split(seed_line.split("horovodrun", 1)[1])
    rendered_command = _container(_spec(rendered, "Launcher"), "launcher")["args"]
    program = seed_program[seed_program.index("python") :]
    assert rendered_command[-len(program) :] == program
    assert rendered_command[rendered_command.index("-np") + 1] == seed_program[1] == "2"
    assert rendered["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert not [a for a in map(str, rendered_command) if "sleep" in a]
