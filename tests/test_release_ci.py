"""The release jobs of ci-runner's own pipeline, run by gitlab-ci-local with the shell executor:
the publish job uploads the wheel and sdist to the (fake) GitLab's PyPI registry with the job
token, and pip then installs ci-runner from that registry's simple index."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci_runner import __version__
from testing.fake_gitlab.server import FakeGitLab
from testing.gitlab_ci_local import ci_runner_project, run_gitlab_ci_local
from testing.paths import REPO_ROOT

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent  # twine is in the dev extras: the job's pip finds it here
JOB_TOKEN = "job-token-of-the-release-pipeline"
DEPLOY = ("reader", "deploy-token-to-install-with")
DIST = [f"ci_runner-{__version__}-py3-none-any.whl", f"ci_runner-{__version__}.tar.gz"]


def without_pip_settings() -> dict[str, str]:
    """This environment without the machine's pip index settings (the fake is the index)."""
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PYTHONPATH")
    }


def test_the_publish_job_uploads_and_pip_installs_from_the_registry(tmp_path: Path) -> None:
    project_dir = ci_runner_project(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(project_dir / "dist"), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    with FakeGitLab() as fake:
        project = fake.add_project("group/ci-runner", project_id=42)
        fake.pypi.add_job_token(project, JOB_TOKEN, fake.add_user("release-manager"))
        fake.pypi.add_deploy_token(
            project, DEPLOY[1], "gitlab+deploy-token-1", ["read_package_registry"]
        )
        variables = {
            "CI_COMMIT_TAG": "1.2.0",
            "CI_API_V4_URL": f"{fake.url}/api/v4",
            "CI_PROJECT_ID": "42",
            "CI_JOB_TOKEN": JOB_TOKEN,
        }
        env = {**without_pip_settings(), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        run_gitlab_ci_local(
            project_dir, ["--force-shell-executor", "pypi-publish"], variables, env, timeout=300
        )
        assert sorted(f.file_name for f in fake.pypi.files(project)) == sorted(DIST)
        uploads = fake.matching("POST", "/packages/pypi$")
        assert [r.headers["authorization"].split()[0] for r in uploads] == ["Basic", "Basic"]

        venv = tmp_path / "user-venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        host = fake.url.removeprefix("http://")
        index = f"http://{DEPLOY[0]}:{DEPLOY[1]}@{host}/api/v4/projects/42/packages/pypi/simple"
        install = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--no-deps", "--index-url", index, "ci-runner"],
            env=without_pip_settings(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert install.returncode == 0, install.stdout + install.stderr
        assert f"Successfully installed ci-runner-{__version__}" in install.stdout
        downloads = fake.matching("GET", "/packages/pypi/files/")
        assert [r.path.rsplit("/", 1)[1] for r in downloads] == [DIST[0]]  # the wheel
    shown = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import ci_runner; print(ci_runner.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert shown.stdout == f"{__version__}\n"
