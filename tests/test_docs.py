"""The documentation as a whole: generated parts up to date, links that resolve, a map that is true.

- docs/train-yaml.md and the README's list of what ranks see are what ``python -m
  testing.reference_docs`` writes, one list from the code that sets the variables;
- every relative link of README.md and docs/*.md names a file that exists, and a heading of it
  for a ``#fragment``;
- docs/developing.md's "Where is ..." map names every place a row's answer lives, in order
  (`file` (`name`, ...) → `file` (`name`)): each file (or directory) exists and defines each
  function or class named in the brackets after it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

from ci_runner.config.setup_env import SETUP_ENV
from ci_runner.plan import run_plan
from testing import reference_ranks
from testing.paths import REPO_ROOT
from testing.reference_docs import BEGIN, END, NoMarkers, expected, readme_with_list
from testing.reference_ranks import (
    StaleReference,
    ranks_environment_markdown,
    train_yaml_reference,
)

README: Final = REPO_ROOT / "README.md"
DEVELOPING: Final = REPO_ROOT / "docs" / "developing.md"
DOCUMENTS: Final = (README, *sorted((REPO_ROOT / "docs").glob("*.md")))
MAP_HEADER: Final = "| Where is ... | |"
# What a newcomer asks first (issue 36): each must be a row of the map.
QUESTIONS: Final = (
    "the MR comment built",
    "the launcher log streamed",
    "a timeout enforced",
    "a failure explained",
    "the MLflow run created and ended",
    "a quota or admission refusal",
    "the pod scripts",
    "the baseline fetched",
)


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
    described = {**reference_ranks.RANK_VARIABLES, "CI_RUNNER_PIPELINE": "the pipeline"}
    monkeypatch.setattr(reference_ranks, "RANK_VARIABLES", described)
    with pytest.raises(StaleReference, match="the ranks' variables"):
        ranks_environment_markdown()


def test_a_setup_variable_the_list_does_not_describe_fails_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = {**SETUP_ENV, "fetch-code": ("CI_RUNNER_REPO_URL", "GIT_TRACE")}
    monkeypatch.setattr(reference_ranks, "SETUP_ENV", setup)
    with pytest.raises(StaleReference, match="the setup containers' variables"):
        ranks_environment_markdown()


def test_the_readmes_markers() -> None:
    assert readme_with_list(f"a\n{BEGIN}old\n{END}b\n", "new\n") == f"a\n{BEGIN}\nnew\n\n{END}b\n"
    for broken in ("no markers\n", f"{END}{BEGIN}", f"{BEGIN}{END}{BEGIN}{END}"):
        with pytest.raises(NoMarkers):
            readme_with_list(broken, "new\n")


# Links

LINK: Final = re.compile(r"\]\(([^)\s]+)\)")


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)


def _prose(text: str) -> str:
    """``text`` without code blocks and code spans, whose brackets are not links."""
    return re.sub(r"`[^`\n]*`", "", _without_code_blocks(text))


def _anchors(path: Path) -> set[str]:
    """The fragments GitLab and GitHub give the headings of ``path``."""
    anchors = set()
    for line in _without_code_blocks(path.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def _resolves(document: Path, target: str) -> bool:
    file, _, fragment = target.partition("#")
    path = (document.parent / file).resolve() if file else document
    if not path.exists():
        return False
    return not fragment or path.suffix != ".md" or fragment in _anchors(path)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(REPO_ROOT).as_posix())
def test_every_relative_link_resolves(document: Path) -> None:
    targets = LINK.findall(_prose(document.read_text(encoding="utf-8")))
    relative = [t for t in targets if not re.match(r"[a-z]+:", t)]  # not https:, mailto:
    assert relative, f"{document.relative_to(REPO_ROOT)}: no link found"
    assert [t for t in relative if not _resolves(document, t)] == []


def test_anchors_are_made_as_gitlab_makes_them(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    doc.write_text("## Publishing ci-runner (for its maintainers)\n# `train.yaml` reference\n")
    assert _anchors(doc) == {"publishing-ci-runner-for-its-maintainers", "trainyaml-reference"}


# The map


def _map_rows() -> list[tuple[str, str]]:
    lines = DEVELOPING.read_text(encoding="utf-8").splitlines()
    assert lines.count(MAP_HEADER) == 1, f"docs/developing.md has no single table {MAP_HEADER}"
    rows = []
    for line in lines[lines.index(MAP_HEADER) + 2 :]:
        if not line.startswith("|"):
            break
        question, answer = (cell.strip() for cell in line.strip("|").split(" | "))
        rows.append((question, answer))
    return rows


def test_the_map_answers_the_questions() -> None:
    questions = [question for question, _ in _map_rows()]
    for asked in QUESTIONS:
        assert [q for q in questions if q.startswith(asked)], f"the map has no row for {asked!r}"


ARROW: Final = " → "


def _places(answer: str) -> list[tuple[str, list[str]]]:
    """``(path, names)`` for each place of a row's answer: `file` (`name`, ...) → `file` ..."""
    places = []
    for place in answer.split(ARROW):
        path, *names = re.findall(r"`([^`]+)`", place)
        places.append((path, names))
    return places


def test_each_place_a_row_names_exists_and_defines_its_names() -> None:
    for question, answer in _map_rows():
        for path, names in _places(answer):
            assert "/" in path or "." in path, f"{question}: {path} is not a file"
            assert not [n for n in names if "/" in n], f"{question}: {answer}: one file a place"
            assert (REPO_ROOT / path).exists(), f"{question}: {path} does not exist"
            source = (REPO_ROOT / path).read_text(encoding="utf-8") if names else ""
            for name in names:
                defined = re.search(rf"^\s*(def|class) {re.escape(name)}\b", source, re.M)
                assert defined, f"{question}: {path} defines no {name}"


def test_a_place_is_a_file_then_the_names_it_defines() -> None:
    answer = "`a/b.py` (`f`, `G`) → `c.py` → `templates/`"
    assert _places(answer) == [("a/b.py", ["f", "G"]), ("c.py", []), ("templates/", [])]
