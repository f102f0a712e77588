"""``ci-runner validate`` and ``render`` on configs generated from the schema itself, valid and
invalid: every run ends 0 or 1 with clean lines, never 3 (a crash) or a traceback (issue 34).

The strategy walks :data:`ci_runner.config.schema.SCHEMA`: each field takes its documented
example, a value of its kind at or past its bounds, or something hostile (any text, including
lone surrogates, control, bidi and non-characters; numbers of any size; lists, mappings, null).
Each case is committed to a repository and goes through :func:`ci_runner.cli.main` as a user
runs it; a bounded number of examples, so that it runs with every ``make unit`` and ``.ci/run``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci_runner import cli
from ci_runner.config.engine import Field, Kind, ListOf, MapOf, Record
from ci_runner.config.scalars import Int, OneOf
from ci_runner.config.schema import SCHEMA
from testing.git import run_git

EXAMPLES = 120

TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates included
# Lone surrogates (half a pair, or the two halves of one), bidi controls, non-characters,
# line and paragraph separators, C1 controls.
WEIRD = st.sampled_from(
    ["\ud800", "\udfff", "x\ud83d\ude00", "a\u202eb", "\u2066x\u2069", "\ufffe", "\x85", "\u2028"]
)
HOSTILE: st.SearchStrategy[Any] = st.one_of(
    TEXT,
    WEIRD,
    st.sampled_from(["-x", "", " "]),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.lists(TEXT, max_size=2),
    st.dictionaries(TEXT, TEXT, max_size=2),
)


def example_value(spec: Field) -> Any:
    """The field's documented example, as YAML reads it."""
    return yaml.safe_load(f"{spec.key}: {spec.example}")[spec.key]


def edges(kind: Kind[object], example: Any) -> st.SearchStrategy[Any]:
    """Values of ``kind`` at and past its bounds, or hostile ones."""
    choices: list[st.SearchStrategy[Any]] = [HOSTILE]
    if isinstance(kind, Int):
        choices.append(st.integers(kind.minimum - 1, min(kind.maximum + 1, 2**40)))
    elif isinstance(kind, OneOf):
        choices.append(st.sampled_from(kind.choices))
    elif isinstance(kind, ListOf):
        item = example[0] if isinstance(example, list) and example else None
        choices.append(st.lists(st.one_of(st.just(item), edges(kind.item, item)), max_size=3))
    elif isinstance(kind, MapOf):
        pairs = list(example.items()) if isinstance(example, dict) else []
        name, value = pairs[0] if pairs else ("A", None)
        keys = st.one_of(st.just(name), st.just("EPOCHS"), TEXT)
        choices.append(
            st.dictionaries(keys, st.one_of(st.just(value), edges(kind.value, value)), max_size=3)
        )
    return st.one_of(*choices)


def fields(
    kind: Record[Any, Any], path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], Field]]:
    """Every field of the schema, nested ones too, with its path of keys."""
    found = []
    for spec in kind.fields:
        found.append(((*path, spec.key), spec))
        if isinstance(spec.kind, Record):
            found += fields(spec.kind, (*path, spec.key))
    return found


FIELDS = fields(SCHEMA)


@st.composite
def documents(draw: st.DrawFn) -> Any:
    """A config: the required fields and some others at their examples (valid as a rule), then
    up to three fields replaced by values at or past their kind's edges, or hostile ones."""
    if draw(st.integers(0, 19)) == 0:
        return draw(HOSTILE)  # not even a mapping
    document: dict[str, Any] = {}
    chosen = draw(st.sets(st.sampled_from([f for f in FIELDS if len(f[0]) == 1]), max_size=6))
    for (key,), spec in FIELDS_TOP_REQUIRED + sorted(chosen, key=lambda f: f[0]):
        if not isinstance(spec.kind, Record):
            document[key] = example_value(spec)
    if draw(st.integers(0, 2)) == 0:
        # Free text that reaches the manifest as it is: an env value, a command's argument.
        text = draw(st.one_of(WEIRD, TEXT))
        document["env" if draw(st.booleans()) else "command"] = (
            {"A": text} if draw(st.booleans()) else ["python", text]
        )
    for _ in range(draw(st.integers(0, 3))):
        path, spec = draw(st.sampled_from(FIELDS))
        value = draw(edges(spec.kind, example_value(spec)))
        target = document
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = value
    return document


FIELDS_TOP_REQUIRED = [f for f in FIELDS if len(f[0]) == 1 and f[1].required]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("schema-fuzz") / "repo"
    path.mkdir()
    run_git(["init", "-q", "-b", "main"], path)
    run_git(["remote", "add", "origin", "https://gitlab.example.com/g/p.git"], path)
    (path / "requirements.txt").write_text("numpy\n")
    return path


def commit(repo: Path, text: str) -> None:
    (repo / "train.yaml").write_bytes(text.encode("utf-8", "surrogatepass"))
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "--allow-empty", "-m", "case"], repo)


def run(repo: Path, command: str, crash: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = {"CI_RUNNER_SETUP_IMAGE": "registry.example.com/group/ci-runner:1.2.0"}
    code = cli.main([command], env=env, cwd=repo, stdout=out, stderr=err, crash_dir=crash)
    return code, out.getvalue(), err.getvalue()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(document=documents())
def test_validate_and_render_end_cleanly_on_any_config(
    repo: Path, tmp_path_factory: pytest.TempPathFactory, document: Any
) -> None:
    text = yaml.safe_dump(document, allow_unicode=False, sort_keys=False)
    commit(repo, text)
    crash = tmp_path_factory.mktemp("crash")
    validated = run(repo, "validate", crash)
    rendered = run(repo, "render", crash)
    for code, out, err in (validated, rendered):
        assert code in (0, 1), (text, err)
        assert "Traceback" not in err and "internal error" not in err, (text, err)
        if code == 1:
            assert out == "", text
            lines = err.splitlines()
            assert lines and all(line.startswith("ci-runner: error: ") for line in lines), err
    assert not any(crash.iterdir()), text
    assert validated[0] == rendered[0], (text, validated, rendered)
    if rendered[0] == 0:
        manifest = next(
            yaml.safe_load_all(rendered[1])
        )  # the MPIJob (torchrun's: the Indexed Job, then its Service), its ConfigMap, Secret
        torchrun = document.get("distributed") == "torchrun"
        assert manifest["kind"] == ("Job" if torchrun else "MPIJob")
