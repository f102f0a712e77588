"""Untrusted text reaches the MR comment end to end, and changes nothing.

tests/test_results_report.py checks ``render_report`` with hostile values put straight into a
ReportInput. Here the same kind of text arrives the way it does in production, through
``finish`` and the fake GitLab: a hostile branch name and MR title, a saved training
log whose lines, ``CI_RUNNER_METRIC`` names, steps and values are hostile, a hostile failure
message, and model files whose names hold Markdown, HTML and newlines. The comment GitLab
receives must keep the structure of a benign run's, hold no quick action at a line start outside
code, no live mention, link or HTML, and a chart whose every line is plain Mermaid.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.clock import ManualClock
from ci_runner.config.schema import load_config
from ci_runner.context import CIContext
from ci_runner.gitlab.comments import find_targets
from ci_runner.masking import SecretMasker
from ci_runner.plan.run_plan import OutputPaths
from ci_runner.results.destination import GitLabDestination, open_gitlab
from ci_runner.results.markdown import clean, code
from ci_runner.results.publish import RunRecord, finish
from ci_runner.results.report_markdown import extract_history
from ci_runner.settings import read_settings
from testing.comment_shape import cell_borders, outside_code, skeleton
from testing.fake_gitlab.server import FakeGitLab
from testing.plan_cases import trusted_plan
from testing.report_runtime import ReportingRuntime

pytestmark = pytest.mark.usefixtures("no_retry_sleeps")  # python-gitlab never sleeps here
SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
TOKEN = "glpat-untrusted-test-token"
PAYLOADS = [
    "/merge",
    "/approve",
    "/close",
    "/label ~bug",
    "/assign @root",
    "@all",
    "#1",
    "!2",
    "<b>",
    "<img src=x onerror=alert(1)>",
    "</details>",
    "<!--",
    "-->",
    "[x](javascript:alert(1))",
    "```",
    "~~~",
    "| a | b |",
    "$$ math $$",
    '"] --> B["',
    "xychart-beta",
    "%%{init: {}}%%",
    "line [1, 2",
]
HOSTILE = " ".join(PAYLOADS)
# A branch name git accepts (no space, ~, ^, :, ?, *, [ or backslash) full of markup.
BRANCH = "feat/`@all`<b>#1!2|x|/merge-->%%{init}%%\"'$(id)"
TRAIN_YAML = """\
name: hostile
image: horovod/horovod:0.28.1
command: python train.py
workers: 2
metrics:
  loss: {pattern: 'loss (?P<value>\\S+) step (?P<step>\\d+)'}
"""


def hostile_log() -> list[str]:
    lines = [f"[0]<stdout>:loss {3 - step} step {step}" for step in range(3)]
    lines += [f"[1]<stdout>:loss {4 - step} step {step}" for step in range(3)]
    lines += [f"[0]<stdout>:{payload}" for payload in PAYLOADS]
    lines += ["/merge", "/approve", "````````````", "</details>", "\x1b[31m/merge\x1b[0m"]
    lines.append(f"[0]<stdout>:loss {HOSTILE} step 4")  # an unparseable value
    for index, name in enumerate([HOSTILE, *PAYLOADS[:6], "a\nb", "\u2028/merge"]):
        for step in (0, 1, 10**15):
            record = {"name": name, "value": step * 0.5 - index, "step": step}
            lines.append("CI_RUNNER_METRIC " + json.dumps(record))
    lines.append('CI_RUNNER_METRIC {"name": "nan", "value": NaN, "step": 1}')
    lines.append('CI_RUNNER_METRIC {"name": "big", "value": 1e308, "step": 1}')
    lines.append('CI_RUNNER_METRIC {"name": "big", "value": -1e-300, "step": 2}')
    lines.append('CI_RUNNER_METRIC {"name": "neg", "value": 1, "step": -5}')
    lines.append('CI_RUNNER_METRIC {"name": "neg", "value": 2, "step": 3}')
    return lines


BENIGN_LOG = [f"[0]<stdout>:loss {3 - step} step {step}" for step in range(3)] + [
    f"[1]<stdout>:loss {4 - step} step {step}" for step in range(3)
]


@pytest.fixture
def gitlab() -> Iterator[FakeGitLab]:
    with FakeGitLab() as server:
        server.add_token(TOKEN, server.add_user("ci-bot"))
        yield server


def context(gitlab: FakeGitLab, branch: str) -> CIContext:
    project = gitlab.add_project("group/project")
    gitlab.add_merge_request(
        project, 5, sha=SHA, source_branch=branch, title=f"{HOSTILE} /merge\n/approve"
    )
    return CIContext(
        sha=SHA,
        project_path="group/project",
        project_id=str(project.id),
        project_url="https://gitlab.example.com/group/project",
        server_url=gitlab.url,
        pipeline_id="1001",
        job_id="5005",
        job_url="https://gitlab.example.com/group/project/-/jobs/5005",
        ref_name=branch,
        mr_iid="5",
        mr_target_branch="main",
        default_branch="main",
    )


def run_and_report(
    tmp_path: Path,
    gitlab: FakeGitLab,
    *,
    branch: str,
    log: list[str],
    failure: str | None,
    files: list[str],
) -> str:
    """A run's saved log, model files and result through ``finish``; the posted body. With a
    ``failure`` the run failed (the comment shows the reason and the log tail), else it succeeded
    (the comment lists the model files)."""
    ctx = context(gitlab, branch)
    out = tmp_path / "out"
    out.mkdir(parents=True)
    log_path = out / "train.log"
    log_path.write_text("\n".join(log) + "\n", encoding="utf-8")
    model = tmp_path / "model"
    for name in files:
        (model / name).parent.mkdir(parents=True, exist_ok=True)
        (model / name).write_bytes(b"weights")
    config = load_config(TRAIN_YAML)
    started = datetime(2026, 11, 30, 7, 0, tzinfo=timezone.utc)
    result = RunResult(
        outcome=Outcome.FAILED if failure else Outcome.SUCCEEDED,
        mpijob_name="hostile-3f786850-5005",
        log_path=log_path,
        log_tail=tuple(log[-60:]),
        failure=Failure(FailureKind.EXIT_CODE, failure, exit_code=1, pod=failure)
        if failure
        else None,
        started_at=started,
        finished_at=started.replace(minute=5),
    )
    destination = open_gitlab(ctx, read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), _NoWarnings())
    assert isinstance(destination, GitLabDestination)
    assert [getattr(t, "iid", None) for t in find_targets(destination.project, ctx)] == [5]
    plan = trusted_plan(
        config, ctx, output_uri=model.as_uri() + "/", outputs=OutputPaths(out, "out")
    )
    runtime = ReportingRuntime(_NoWarnings(), ManualClock(started))
    report = finish(runtime, RunRecord(replace(plan, masker=SecretMasker()), result), destination)
    assert report.outcome is result.outcome
    assert (report.artifacts is not None) is (failure is None)
    (mr,) = gitlab._projects[-1].merge_requests.values()
    assert len(mr.notes) == 2  # the report, then the result's reply in its thread
    assert not [line for line in mr.notes[1].body.splitlines() if line.startswith("/")]
    body = mr.notes[0].body
    # GitLab stores a note without its trailing newline (extractor.rb:69); report.md keeps it
    assert (out / "report.md").read_text(encoding="utf-8").rstrip("\n") == body
    return body


class _NoWarnings:
    """A console on which any warning fails the test."""

    def status(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        raise AssertionError(f"unexpected warning: {message}")


HOSTILE_FILES = ["model.pt", "`x`|<b>@all.pt", "line\n/merge.pt", "[a](javascript:x).pt", "-->.pt"]

_NUMBER = r"-?\d+(\.\d+)?"
MERMAID_LINE = re.compile(
    r'%%\{init:\{"themeVariables":\{"xyChart":\{"plotColorPalette":"#[0-9a-f]{6}(,#[0-9a-f]{6})*"\}\}\}\}%%'
    r"|xychart-beta"
    r'|x-axis "step" (-?\d+ --> -?\d+|\[-?\d+(, -?\d+)*\])'
    rf'|y-axis "[\w .:/()+;×-]*"( {_NUMBER} --> {_NUMBER})?'
    rf'|line "(rank \d+|mean|lowest rank|highest rank)" \[{_NUMBER}(,{_NUMBER})*\]'
)


@pytest.mark.parametrize("failure", [HOSTILE + "\n/approve", None], ids=["failed", "succeeded"])
def test_hostile_inputs_cannot_change_the_comment(
    tmp_path: Path, gitlab: FakeGitLab, failure: str | None
) -> None:
    body = run_and_report(
        tmp_path / "hostile",
        gitlab,
        branch=BRANCH,
        log=hostile_log(),
        failure=failure,
        files=HOSTILE_FILES,
    )
    if failure is None:  # the model files are listed, by their names in code spans
        assert "`` `x`|<b>@all.pt ``" in body

    outside = outside_code(body)
    for payload in ["/merge", "/approve", "@all", "<b>", "<img", "javascript:", "-->", "#1 "]:
        assert payload not in outside, payload
    for line in outside.splitlines():
        assert not line.lstrip().startswith("/"), line  # no quick action at a line start
    # Only the lines ci-runner writes start a line with markup: headings, table, list, fences.
    for line in body.splitlines():
        assert "\u2028" not in line and "\r" not in line and "\x1b" not in line
    rows = [line for line in body.splitlines() if line.startswith("|")]
    assert len({cell_borders(row) for row in rows}) == 1, rows
    charts = re.findall(r"```mermaid\n(.*?)\n```\n", body, flags=re.DOTALL)
    assert 1 <= len(charts) <= 4
    for chart in charts:
        for line in chart.splitlines():
            assert MERMAID_LINE.fullmatch(line), line
    history = extract_history(body)
    assert [entry.job_id for entry in history] == ["5005"]


@pytest.mark.parametrize("failed", [True, False], ids=["failed", "succeeded"])
def test_the_structure_is_that_of_a_benign_run(tmp_path: Path, failed: bool) -> None:
    """Same sections, same table shape, same fences, whatever the text inside them."""
    with FakeGitLab() as benign_lab:
        benign_lab.add_token(TOKEN, benign_lab.add_user("ci-bot"))
        benign = run_and_report(
            tmp_path / "benign",
            benign_lab,
            branch="feature",
            log=BENIGN_LOG + [f"[0]<stdout>:text {i}" for i in range(6)],
            failure="exit 1 plain" if failed else None,
            files=["model.pt", "a.pt", "b.pt", "c.pt", "d.pt"],
        )
    with FakeGitLab() as hostile_lab:
        hostile_lab.add_token(TOKEN, hostile_lab.add_user("ci-bot"))
        hostile = run_and_report(
            tmp_path / "hostile",
            hostile_lab,
            branch=BRANCH,
            log=BENIGN_LOG + PAYLOADS[:6],
            failure=HOSTILE + "\n/approve" if failed else None,
            files=HOSTILE_FILES,
        )

    assert skeleton(hostile) == skeleton(benign)


def test_commit_messages_and_mr_titles_never_enter_the_comment(
    tmp_path: Path, gitlab: FakeGitLab
) -> None:
    body = run_and_report(
        tmp_path, gitlab, branch="feature", log=BENIGN_LOG, failure="plain", files=["m.pt"]
    )
    assert HOSTILE not in body and "/approve" not in body


BIDI = [
    *"\u202a\u202b\u202c\u202d\u202e",
    *"\u2066\u2067\u2068\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
]


@pytest.mark.parametrize("mark", BIDI, ids=[f"U+{ord(c):04X}" for c in BIDI])
def test_every_bidirectional_control_is_cleaned_from_untrusted_text(mark: str) -> None:
    assert clean(f"loss{mark}1") == "loss 1"
    assert code(f"a{mark}b", in_table=True) == "`a b`"
