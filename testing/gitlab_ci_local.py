"""gitlab-ci-local, which runs the CI files as GitLab evaluates them (installed by `make
gitlab-ci-local`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GCL_VERSION = "4.65.1"


def gitlab_ci_local() -> Path:
    """The gitlab-ci-local `make test` installs (``GITLAB_CI_LOCAL`` overrides the path)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = Path(
        os.environ.get("GITLAB_CI_LOCAL")
        or cache / "ci-runner" / "npm" / "node_modules" / ".bin" / "gitlab-ci-local"
    )
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"gitlab-ci-local {GCL_VERSION} is not installed at {path}: make test installs it"
            )
        pytest.skip(
            f"gitlab-ci-local {GCL_VERSION} is not installed at {path} (make test installs it)"
        )
    return path
