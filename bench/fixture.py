"""A throw-away git repository holding the example, committed, as a user's project would be.

The benchmarks run ci-runner against it rather than against this checkout, so they measure the
same thing whether or not this working tree has uncommitted changes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.common import REPO, run_quiet

EXAMPLE = "examples/simple_ml"
CONFIG = f"{EXAMPLE}/train.yaml"
REPO_URL = "https://gitlab.example.com/faraway/simple_ml.git"


def example_repo(dest: Path) -> Path:
    """``dest`` as a git repository with the example committed at the same path as here."""
    shutil.copytree(
        REPO / EXAMPLE, dest / EXAMPLE, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    git = ["git", "-C", str(dest), "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    run_quiet(["git", "init", "-q", "-b", "main", str(dest)])
    run_quiet([*git, "add", "-A"])
    run_quiet([*git, "commit", "-q", "-m", "example"])
    run_quiet([*git, "remote", "add", "origin", REPO_URL])
    return dest
