"""The documentation as a whole: docs/train-yaml.md and the README's list of what ranks see
are what ``python -m testing.reference_docs`` writes, one list from the code that sets the
variables.
"""

from __future__ import annotations

from typing import Final

import pytest

from ci_runner.config.setup_env import SETUP_ENV
from ci_runner.plan import rank_reference, run_plan
from ci_runner.plan.rank_reference import (
    StaleReference,
    ranks_environment_markdown,
    train_yaml_reference,
)
from testing.paths import REPO_ROOT
from testing.reference_docs import BEGIN, END, NoMarkers, expected, readme_with_list

README: Final = REPO_ROOT / "README.md"


# Generated text


def test_the_generated_documents_are_up_to_date() -> None:
    for path, text in expected().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(REPO_ROOT)} is out of date: run "
            ".venv/bin/python -m testing.reference_docs"
        )


def test_the_readme_and_the_reference_show_the_same_list() -> None:
    listing = ranks_environment_markdown()
    readme = README.read_text(encoding="utf-8")
    assert f"{BEGIN}\n{listing}\n{END}" in readme
    assert train_yaml_reference().endswith(f"## What every rank sees\n\n{listing}")
    for name, _ in run_plan.RANK_DEFAULTS:
        assert f"| `{name}` | `1` unless `env` sets it" in listing


def test_a_rank_variable_the_list_does_not_describe_fails_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    defaults = (*run_plan.RANK_DEFAULTS, ("MALLOC_ARENA_MAX", "2"))
    monkeypatch.setattr(run_plan, "RANK_DEFAULTS", defaults)
    with pytest.raises(StaleReference, match="the ranks' variables: the code sets "):
        ranks_environment_markdown()


def test_a_described_variable_the_code_no_longer_sets_fails_the_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    described = {**rank_reference.RANK_VARIABLES, "CI_RUNNER_PIPELINE": "the pipeline"}
    monkeypatch.setattr(rank_reference, "RANK_VARIABLES", described)
    with pytest.raises(StaleReference, match="the ranks' variables"):
        ranks_environment_markdown()


def test_a_setup_variable_the_list_does_not_describe_fails_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = {**SETUP_ENV, "fetch-code": ("CI_RUNNER_REPO_URL", "GIT_TRACE")}
    monkeypatch.setattr(rank_reference, "SETUP_ENV", setup)
    with pytest.raises(StaleReference, match="the setup containers' variables"):
        ranks_environment_markdown()


def test_the_readmes_markers() -> None:
    assert readme_with_list(f"a\n{BEGIN}old\n{END}b\n", "new\n") == f"a\n{BEGIN}\nnew\n\n{END}b\n"
    for broken in ("no markers\n", f"{END}{BEGIN}", f"{BEGIN}{END}{BEGIN}{END}"):
        with pytest.raises(NoMarkers):
            readme_with_list(broken, "new\n")
