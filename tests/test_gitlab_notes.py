"""No note ci-runner posts can run a GitLab quick action, whatever the untrusted text in it:
checked with a port of GitLab's extractor (fake_gitlab/quick_actions.py) over fuzzed input."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.context import CIContext
from ci_runner.gitlab.notes import as_gitlab_stores, note_body, without_commands
from ci_runner.results.report import ReportInput
from ci_runner.results.report_markdown import render_comment
from testing.fake_gitlab.quick_actions import extract_commands

SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
# Pieces that move the extractor's alternatives around: fences of every length and kind,
# lone backticks, HTML and >>> blocks, carriage returns, and commands.
FRAGMENTS = [
    "/close", "/merge", "/label ~x", "/title t", "/CLOSE", "/shrug", "/ close", "//close",
    "```", "````", "~~~", "~~~~", "`", "``", "<b>", "</b>", "<details>", "</details>", ">>>",
    "\r", "\n", "\r\n", "\n\n", " ", "\t", "\x00", "x", "\u2028", "\x0b", "-->", "<!--",
]  # fmt: skip
hostile_text = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join)


@settings(max_examples=400, deadline=None)
@given(hostile_text)
def test_no_line_of_any_text_survives_as_a_command(text: str) -> None:
    body = note_body(text)
    assert extract_commands(body) == (body, [])


@settings(max_examples=150, deadline=None)
@given(
    tail=st.lists(hostile_text, max_size=12),
    name=hostile_text,
    branch=hostile_text,
    message=hostile_text,
)
def test_no_report_of_hostile_runs_holds_a_command(
    tail: list[str], name: str, branch: str, message: str
) -> None:
    report = ReportInput(
        outcome=Outcome.FAILED,
        config_name=name or "x",
        context=CIContext(sha=SHA, project_path="g/p", ref_name=branch, job_id="1"),
        mpijob_name="job",
        failure=Failure(FailureKind.EXIT_CODE, message),
        log_tail=tuple(tail),
        baseline_ref=branch or None,
    )
    body = note_body(render_comment(report, None))
    assert extract_commands(body) == (body, [])


def test_gitlabs_own_escapes_are_not_relied_on() -> None:
    # Without ci-runner's guard, GitLab runs these: ~~~ is no fence to its extractor, and text
    # after the last line ending in a backtick is outside its "inline code" rule.
    for text in ("~~~\n/close\n~~~", "````\n`x`\n````\n/merge", "a\r\n\r/label ~x"):
        assert extract_commands(as_gitlab_stores(text))[1] != []
        assert extract_commands(note_body(text))[1] == []


def test_without_commands_indents_only_lines_that_start_with_a_slash() -> None:
    assert without_commands("/a\n b/c\n/d\r\n\r/e") == " /a\n b/c\n /d\n /e"


def test_as_gitlab_stores_strips_like_ruby() -> None:
    # Ruby's rstrip removes NUL and ASCII whitespace only; a no-break space stays
    assert as_gitlab_stores("x\u00a0 \t\r\n\x00") == "x\u00a0"
    assert as_gitlab_stores("a\r\nb\n\n") == "a\nb"
