"""ci-runner's cache directory: one rule (ci_runner.context.cache_dir), which the setup scripts'
scripts/lib/cache.sh says in sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ci_runner.context import cache_dir
from testing.paths import REPO_ROOT

CASES = [
    {"CI_RUNNER_CACHE": "/c", "XDG_CACHE_HOME": "/x", "HOME": "/h"},
    {"CI_RUNNER_CACHE": "", "XDG_CACHE_HOME": "/x", "HOME": "/h"},
    {"XDG_CACHE_HOME": "", "HOME": "/h"},
    {"HOME": "/h"},
]


@pytest.mark.parametrize("env", CASES)
def test_the_scripts_find_the_same_cache(env: dict[str, str]) -> None:
    found = subprocess.run(
        ["/bin/sh", "-c", ". scripts/lib/cache.sh && ci_runner_cache_dir"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert found == f"{cache_dir(env)}\n"


def test_the_rule() -> None:
    assert [cache_dir(env) for env in CASES] == [
        Path("/c"),
        Path("/x/ci-runner"),
        Path("/h/.cache/ci-runner"),
        Path("/h/.cache/ci-runner"),
    ]


def test_no_setup_script_writes_the_rule_again() -> None:
    copies = [
        path.name
        for path in sorted((REPO_ROOT / "scripts").glob("*.sh"))
        if "XDG_CACHE_HOME" in path.read_text(encoding="utf-8")
    ]
    assert copies == []
