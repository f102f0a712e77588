"""The package as users install it: `make dist`'s wheel alone in a clean virtualenv, far from
the checkout, runs every command with the templates and pod scripts it carries."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci_runner import __version__
from testing.dist import build_wheel
from testing.git import run_git
from testing.paths import EXAMPLE, REPO_ROOT
from testing.plan_cases import SETUP_IMAGE

pytestmark = pytest.mark.slow
TRAIN_YAML = f"{EXAMPLE}/train.yaml"
ORIGIN = "https://gitlab.example.com/team/simple_ml.git"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh virtualenv with the wheel (and its dependencies)."""
    venv = tmp_path_factory.mktemp("clean") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)],
        check=True,
        timeout=600,
        env=clean_env(),
    )
    return venv / "bin"


def clean_env() -> dict[str, str]:
    """This process's environment without anything that could find the checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PWD")}


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    """The example committed in a repository of its own with an origin, no ci-runner beside it."""
    repo = tmp_path / "project"
    (repo / EXAMPLE).mkdir(parents=True)
    for source in (REPO_ROOT / EXAMPLE).iterdir():
        if source.is_file():
            (repo / EXAMPLE / source.name).write_bytes(source.read_bytes())
    run_git(["init", "-q", "-b", "main"], repo)
    run_git(["remote", "add", "origin", ORIGIN], repo)
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "example"], repo)
    return repo


def run(bin_dir: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "ci-runner"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
    )


def test_the_wheel_holds_the_templates_the_pod_scripts_and_the_licence(wheel: Path) -> None:
    assert wheel.name == f"ci_runner-{__version__}-py3-none-any.whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    templates = {
        f"ci_runner/templates/{path.relative_to(REPO_ROOT / 'templates')}"
        for path in (REPO_ROOT / "templates").rglob("*")
        if path.is_file()
    }
    assert "ci_runner/templates/scripts/fetch-code.sh" in templates
    assert templates <= names
    assert f"ci_runner-{__version__}.dist-info/licenses/LICENSE" in names


def test_the_installed_package_is_the_wheel_not_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [str(installed / "python"), "-c", "import ci_runner; print(ci_runner.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_env(),
        check=True,
    )
    assert Path(done.stdout.strip()).is_relative_to(installed.parent)


def test_version(installed: Path, tmp_path: Path) -> None:
    done = run(installed, ["--version"], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"ci-runner {__version__}\n", "")


def test_validate_the_example(installed: Path, user_repo: Path) -> None:
    done = run(installed, ["validate", "--config", TRAIN_YAML], user_repo)
    sha = run_git(["rev-parse", "--short=8", "HEAD"], user_repo)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"[ci-runner] {TRAIN_YAML} at {sha} is valid: MPIJob simple-ml-")
    assert done.stdout.endswith(", 2 workers x 1 slot = 2 ranks\n")


def test_render_the_example_as_the_checkout_renders_it(installed: Path, user_repo: Path) -> None:
    # The setup image as a project's CI gives it (CI_JOB_IMAGE): there is none outside CI.
    render = ["render", "--config", TRAIN_YAML, "--setup-image", SETUP_IMAGE]
    done = run(installed, render, user_repo)
    checkout = subprocess.run(
        [sys.executable, "-m", "ci_runner", *render],
        cwd=user_repo,
        capture_output=True,
        text=True,
        env={**clean_env(), "PYTHONPATH": str(REPO_ROOT)},
        check=True,
    )
    assert done.returncode == 0, done.stderr
    assert "kind: MPIJob" in done.stdout
    assert "#!/bin/sh" in done.stdout  # the pod scripts came from the wheel
    assert (done.stdout, done.stderr) == (checkout.stdout, checkout.stderr)
