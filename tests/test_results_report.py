"""The merge-request comment: golden files, history, size budget, hostile text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ci_runner.backends.kubernetes.explain import preempted_failure
from ci_runner.backends.result import Failure, FailureKind, Outcome, QueueWait, RunResult
from ci_runner.config.types import MetricSpec
from ci_runner.context import CIContext
from ci_runner.kueue_names import QUEUE_NAME_LABEL
from ci_runner.results.artifacts import ArtifactLink, ArtifactListing
from ci_runner.results.chart import mermaid_label
from ci_runner.results.chart_axis import chart_number
from ci_runner.results.markdown import code, safe_url
from ci_runner.results.metrics import MetricsSummary, parse_log_file, parse_metrics
from ci_runner.results.report import HistoryEntry, ReportInput
from ci_runner.results.report_markdown import (
    MAX_HISTORY,
    extract_history,
    marker,
    render_comment,
    render_reply,
    render_report,
)
from testing.comment_shape import cell_borders, outside_code, skeleton
from testing.fake_gitlab.mermaid import diagrams
from testing.golden import Golden
from testing.metric_specs import ACC, TEST, TRAIN
from testing.paths import SEED_LOG
from testing.plan_cases import REPORT_CONFIG, REPORT_CONTEXT, SHA

CTX = REPORT_CONTEXT
CONFIG = REPORT_CONFIG
STARTED = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
FINISHED = datetime(2026, 11, 30, 6, 12, 34, tzinfo=timezone.utc)
SEED_TAIL = tuple(
    line for line in SEED_LOG.read_text(encoding="utf-8").splitlines() if line.startswith("[")
)[-6:]
LINKS = ArtifactListing(
    "s3://models/simple_ml/01234567",
    links=(
        ArtifactLink(
            "model.pt",
            "https://s3.example.com/models/simple_ml/01234567/model.pt?X-Amz-Expires=604800",
            1_234_567,
        ),
        ArtifactLink(
            "logs/events.json",
            "https://s3.example.com/models/simple_ml/01234567/logs/events.json?X-Amz-Expires=604800",
            812,
        ),
    ),
    more=3,
    expires_at=datetime(2026, 12, 7, 6, 12, tzinfo=timezone.utc),
)
OLDER = [
    HistoryEntry("120", "44", "89abcdef", "failed", 61.0, "train_loss", None),
    HistoryEntry("117", "43", "76543210", "succeeded", 700.4, "train_loss", 450.0),
]


def _seed_summary() -> MetricsSummary:
    return parse_log_file(SEED_LOG, [TRAIN, TEST])


def _result(outcome: Outcome, **kwargs: object) -> RunResult:
    fields: dict[str, object] = {
        "outcome": outcome,
        "mpijob_name": "simple-ml-01234567",
        "log_path": Path("/tmp/ci-runner/log.txt"),
        "log_tail": SEED_TAIL,
        "started_at": STARTED,
        "finished_at": FINISHED,
        **kwargs,
    }
    return RunResult(**fields)  # type: ignore[arg-type]


def _previous_body(*entries: HistoryEntry) -> str:
    report = ReportInput(Outcome.RUNNING, "simple-ml", CTX, "simple-ml-01234567")
    body = render_report(replace(report, history=entries))
    assert extract_history(body)[1:] == list(entries)
    return body


def test_golden_success(golden: Golden) -> None:
    report = ReportInput.from_run(
        CONFIG,
        CTX,
        _result(Outcome.SUCCEEDED),
        metrics=_seed_summary(),
        baseline={"train_loss": 450.0, "test_loss": 210.0},
        baseline_ref="main",
        artifacts=LINKS,
    )
    # The comment so far is this job's own "training started" announcement over older runs.
    previous = render_comment(replace(report, outcome=Outcome.RUNNING), _previous_body(*OLDER))

    body = render_comment(report, previous)

    golden.check("success.md", body)
    assert extract_history(body) == [report.history_entry(), *OLDER]


def test_golden_failure(golden: Golden) -> None:
    tail = (*SEED_TAIL, "[1]<stderr>:Traceback with ``` fences ````", "[1]<stderr>:/merge")
    failure = Failure(
        FailureKind.OOM_KILLED,
        "worker simple-ml-01234567-worker-1 was OOMKilled (memory limit 4Gi)",
        exit_code=137,
        pod="simple-ml-01234567-worker-1",
    )
    report = ReportInput.from_run(
        CONFIG,
        CTX,
        _result(Outcome.FAILED, failure=failure, log_tail=tail),
        metrics=parse_metrics(SEED_TAIL, [TRAIN, TEST, ACC]),
        baseline=None,
        baseline_ref="main",
    )

    golden.check("failure.md", render_comment(report, None))


def test_golden_preempted(golden: Golden) -> None:
    # kubernetes.on_preemption: fail, and the queue suspended the job while it trained.
    mpijob = {"metadata": {"name": "simple-ml-01234567", "labels": {QUEUE_NAME_LABEL: "team-a"}}}
    report = ReportInput.from_run(
        CONFIG,
        CTX,
        _result(Outcome.FAILED, failure=preempted_failure(mpijob)),
        metrics=parse_metrics(SEED_TAIL, [TRAIN]),
    )

    golden.check("preempted.md", render_comment(report, None))


def test_golden_cancel(golden: Golden) -> None:
    report = ReportInput.from_run(
        CONFIG,
        CTX,
        _result(
            Outcome.CANCELLED,
            failure=Failure(FailureKind.CANCELLED, "the CI job was cancelled"),
        ),
        metrics=parse_metrics(SEED_TAIL, [TRAIN]),
    )

    golden.check("cancel.md", render_comment(report, _previous_body(*OLDER)))


def test_golden_running(golden: Golden) -> None:
    report = ReportInput.from_run(
        CONFIG, CTX, _result(Outcome.RUNNING, log_tail=(), started_at=None, finished_at=None)
    )

    golden.check("running.md", render_comment(report, _previous_body(*OLDER)))


def test_golden_queued(golden: Golden) -> None:
    report = ReportInput.from_run(
        CONFIG, CTX, _result(Outcome.RUNNING, log_tail=(), started_at=None, finished_at=None)
    )
    since = datetime(2026, 12, 5, 18, 40, 12, tzinfo=timezone.utc)
    queued = replace(report, queued=QueueWait("team-a", "training", since))
    golden.check("queued.md", render_comment(queued, _previous_body(*OLDER)))


def test_local_success_without_ci() -> None:
    ctx = CIContext(sha=SHA, project_path="local/simple_ml")
    listing = ArtifactListing(
        "file:///tmp/out",
        links=(ArtifactLink("model.pt", "/tmp/out/model.pt", 10),),
        local=True,
    )
    report = ReportInput.from_run(
        CONFIG, ctx, _result(Outcome.SUCCEEDED), metrics=_seed_summary(), artifacts=listing
    )

    body = render_report(report)

    assert body.splitlines()[:4] == [
        "<!-- ci-runner:simple-ml -->",
        "### ✅ Training succeeded: `simple-ml`",
        "",
        "`01234567` · 12m 34s · 2 workers × 1 slot (2 ranks), 1 GPU per worker (2 in all)"
        " · MPIJob `simple-ml-01234567`",
    ]
    assert "- `model.pt`: `/tmp/out/model.pt` (10 B)" in body.splitlines()
    assert "No baseline: no `metrics.json` from a successful target run." in body


def test_a_torchrun_run_names_its_indexed_job() -> None:
    config = replace(CONFIG, distributed="torchrun")
    ctx = CIContext(sha=SHA, project_path="local/simple_ml")
    report = ReportInput.from_run(config, ctx, _result(Outcome.SUCCEEDED), metrics=_seed_summary())

    assert render_report(report).splitlines()[3] == (
        "`01234567` · 12m 34s · 2 workers × 1 slot (2 ranks), 1 GPU per worker (2 in all)"
        " · Indexed Job `simple-ml-01234567`"
    )


def test_storage_warning_is_shown() -> None:
    listing = ArtifactListing("s3://m/x", warning="could not list s3://m/x: access denied")
    report = ReportInput.from_run(
        CONFIG, CTX, _result(Outcome.SUCCEEDED), metrics=_seed_summary(), artifacts=listing
    )

    assert "⚠️ `could not list s3://m/x: access denied`\n" in render_report(report)


def test_history_is_capped_and_keyed_by_job() -> None:
    many = [HistoryEntry(str(i), "1", "aaaaaaaa", "succeeded") for i in range(200, 170, -1)]
    report = ReportInput.from_run(CONFIG, CTX, _result(Outcome.SUCCEEDED))

    body = render_comment(report, _previous_body(*many[:MAX_HISTORY]))
    body = render_comment(replace(report, outcome=Outcome.FAILED), body)  # a re-render, same job

    history = extract_history(body)
    assert len(history) == MAX_HISTORY + 1
    assert [e.job_id for e in history[:3]] == ["123", "200", "199"]
    assert history[0].outcome == "failed"
    assert body.count("<summary>Previous runs (20)</summary>") == 1


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "a human wrote this",
        "<!-- ci-runner-history: not json -->",
        "<!-- ci-runner-history: {} -->",
        '<!-- ci-runner-history: [1, "x", {"outcome": "exploded", "sha": "a"}] -->',
        '<!-- ci-runner-history: [{"outcome": "failed", "sha": 3}] -->',
        '<!-- ci-runner-history: [{"outcome": "failed", "sha": "a", "value": "NaN"}] -->',
    ],
)
def test_garbage_history_is_ignored(body: str | None) -> None:
    assert extract_history(body) == []


def test_huge_run_stays_small_and_fast() -> None:
    spec = MetricSpec("loss", re.compile(r"step (?P<step>\d+) loss (?P<value>\S+)"))

    def lines() -> Iterator[str]:
        for step in range(100_000):
            for rank in range(8):
                yield f"[{rank}]<stdout>:step {step} loss {1 / (step + 1) + rank}\n"

    summary = parse_metrics(lines(), [spec])
    tail = tuple(f"[{i % 8}]<stdout>:" + "y" * 20_000 for i in range(5_000))
    links = tuple(
        ArtifactLink(f"ckpt-{i}.pt", f"https://s3.example.com/b/ckpt-{i}.pt?X-Amz-Signature=ab", 1)
        for i in range(50)
    )
    report = ReportInput.from_run(
        replace(CONFIG, workers=8),
        CTX,
        _result(Outcome.FAILED, log_tail=tail, failure=Failure(FailureKind.UNKNOWN, "x" * 10**6)),
        metrics=summary,
        baseline={"loss": 1.0},
        artifacts=ArtifactListing("s3://b", links=links, more=10_000, more_is_lower_bound=True),
    )
    history = [
        HistoryEntry(str(i), "1", "aaaaaaaa", "succeeded", 1.0, "m" * 10**5, 1.0) for i in range(30)
    ]

    # How long this takes is bench 5's figure (render_comment time), not a unit test's.
    running = ReportInput(Outcome.RUNNING, "simple-ml", CTX, "simple-ml-01234567")
    body = render_comment(report, render_report(replace(running, history=history)))

    assert len(body) < 50_000
    chart_lines = [line for line in body.splitlines() if line.startswith("line ")]
    # 8 ranks: the lowest and highest rank at each step and the mean, within GitLab's budget.
    assert [line.split(" [")[0] for line in chart_lines] == [
        'line "lowest rank"',
        'line "highest rank"',
        'line "mean"',
    ]
    assert 'x-axis "step" 0 --> 99999' in body.splitlines()
    assert [d.drawn for d in diagrams(body)] == [True]
    assert "… and more than 10000 more under `s3://b`" in body


def test_first_chart_is_shown_the_others_drawn_when_opened() -> None:
    names = ("loss", "accuracy", "lr")
    specs = [MetricSpec(n, re.compile(rf"{n} (?P<step>\d+) (?P<value>\S+)")) for n in names]
    lines = [
        f"[{rank}]<stdout>:{name} {step} {1 / (step + 1) + rank}"
        for step in range(500)
        for rank in range(2)
        for name in names
    ]
    report = ReportInput.from_run(
        CONFIG, CTX, _result(Outcome.SUCCEEDED), metrics=parse_metrics(lines, specs)
    )

    body = render_report(report)

    # GitLab draws the first on page load and each other one when its <details> is opened.
    assert [(d.details, d.drawn) for d in diagrams(body)] == [(None, True), (0, True), (1, True)]
    assert "#### `loss` by step\n\n```mermaid\n%%{init:" in body
    for name in names[1:]:
        assert (
            f"#### `{name}` by step\n\n<details><summary>Show the chart</summary>\n\n"
            "```mermaid\n%%{init:"
        ) in body
    assert body.count("\n</details>\n") == 2


# ----------------------------------------------------------------------------- hostile text

HOSTILE = "x` | <b>bold</b> @all #999 !998 ~bug [a](javascript:alert(1))\n/merge\r\n```\n--> end"


def _text_report(text: str) -> ReportInput:
    """A failed run where every piece of untrusted input is ``text``."""
    spec = MetricSpec(text, re.compile(r"loss (?P<step>\d+) (?P<value>\S+)"))
    summary = parse_metrics(["loss 0 2.5", "loss 1 1.5"], [spec])
    return ReportInput(
        outcome=Outcome.FAILED,
        config_name=text,
        context=replace(CTX, ref_name=text),
        mpijob_name=text,
        metrics=summary,
        baseline={text: 2.0},
        baseline_ref=text,
        artifacts=ArtifactListing(
            text, links=(ArtifactLink(text, "https://s3.example.com/b/k?X-Amz-Expires=1", 1),)
        ),
        failure=Failure(FailureKind.EXIT_CODE, text, exit_code=1, pod=text),
        log_tail=(text, f"/merge {text}"),
        history=(HistoryEntry("9", "8", "abc", "succeeded", 1.0, text, 1.0),),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.text(max_size=120)
    | st.lists(st.sampled_from(list("`|\\\n\r<>-!/@#[]()*_~:$&%\"' x")), max_size=60).map("".join)
)
def test_any_text_keeps_the_structure(text: str) -> None:
    assume(text != "")  # an empty branch name is no branch: one line less, rightly
    body = render_report(_text_report(text))

    assert skeleton(body) == skeleton(render_report(_text_report("benign")))
    assert marker(text) in body
    history = extract_history(body)
    assert [(e.job_id, e.metric) for e in history] == [("123", text[:200]), ("9", text[:200])]
    lines = body.splitlines()
    assert [i for i, line in enumerate(lines) if "<!--" in line] == [0, len(lines) - 1]


def _hostile_report() -> ReportInput:
    spec = MetricSpec(HOSTILE, re.compile(r"loss (?P<step>\d+) (?P<value>\S+)"))
    summary = parse_metrics(
        [f"[0]<stdout>:loss {i} {i}" for i in range(3)]
        + [f"[0]<stdout>:loss 3 {HOSTILE}"]
        + ["CI_RUNNER_METRIC " + json.dumps({"name": HOSTILE + "2", "value": 1})],
        [spec],
    )
    ctx = replace(
        CTX,
        ref_name=HOSTILE,
        job_url="javascript:alert(1)",
        project_url="https://gitlab.example.com/a b/(c)",
    )
    return ReportInput(
        outcome=Outcome.FAILED,
        config_name=HOSTILE,
        context=ctx,
        mpijob_name=HOSTILE,
        metrics=summary,
        baseline={HOSTILE: 1.0},
        baseline_ref=HOSTILE,
        artifacts=ArtifactListing(HOSTILE, links=(ArtifactLink(HOSTILE, HOSTILE, 1),)),
        failure=Failure(FailureKind.EXIT_CODE, HOSTILE, exit_code=1, pod=HOSTILE),
        log_tail=(HOSTILE, "/approve", "</details>", "````````", "@all"),
    )


def test_an_html_comment_opens_only_on_the_first_and_the_last_line() -> None:
    text = "<!-- ci-runner:other-config --> <!-- ci-runner-history: [] -->"
    lines = render_report(_text_report(text)).splitlines()

    assert [i for i, line in enumerate(lines) if "<!--" in line] == [0, len(lines) - 1]


def test_hostile_text_cannot_change_the_structure() -> None:
    body = render_report(_hostile_report())

    outside = outside_code(body)
    for payload in (
        "<b>",
        "@all",
        "#999",
        "!998",
        "~bug",
        "javascript:",
        "/merge",
        "/approve",
        "-->",
    ):
        assert payload not in outside, payload
    for line in outside.splitlines():
        assert not line.startswith("/"), line
    # The table: header, delimiter, one row per metric, each with exactly 8 cell borders.
    rows = [line for line in body.splitlines() if line.startswith("|")]
    assert len(rows) == 4
    assert {cell_borders(row) for row in rows} == {8}
    # The log tail fence is longer than any backtick run inside it, and closes the block.
    lines = body.splitlines()
    start = lines.index("`````````text")
    assert lines[start + 1 : start + 9] == [
        "x` | <b>bold</b> @all #999 !998 ~bug [a](javascript:alert(1)) /merge  ``` --> end",
        "/approve",
        "</details>",
        "````````",
        "@all",
        "`````````",
        "",
        "</details>",
    ]
    # The hidden parts still parse back.
    assert marker(HOSTILE) in body
    assert extract_history(body)[0].metric is not None


def test_hostile_metric_name_cannot_break_the_chart() -> None:
    body = render_report(_hostile_report())

    chart = body.split("```mermaid\n", 1)[1].split("\n```\n", 1)[0]
    assert chart.splitlines() == [
        '%%{init:{"themeVariables":{"xyChart":{"plotColorPalette":"#4c84d8"}}}}%%',
        "xychart-beta",
        'x-axis "step" [0, 1, 2]',
        'y-axis "x_ _ _b_bold_/b_ _all _999 _998 _bug _a_(javascript:alert(1_"',
        'line "rank 0" [0,1,2]',
    ]


def test_hostile_history_round_trips() -> None:
    entry = HistoryEntry("1", "2", "abc", "succeeded", 1.0, "a--> <!-- b -- c >", 1.0)
    body = _previous_body(entry)

    hidden = body.split("<!-- ci-runner-history: ", 1)[1]
    assert hidden.count("-->") == 1
    assert hidden.endswith(" -->\n")
    assert extract_history(body)[1] == entry


def test_code_span_escaping() -> None:
    assert code("plain") == "`plain`"
    assert code("a`b") == "`` a`b ``"
    assert code("``") == "``` `` ```"
    assert code("a|b", in_table=True) == "`a\\|b`"
    # GFM reads backslash pairs first: an odd run before the pipe gets a space to stay escaped.
    assert code("a\\|b", in_table=True) == "`a\\ \\|b`"
    assert code("a\\\\|b", in_table=True) == "`a\\\\\\|b`"
    for text in ("a|b", "a\\|b", "a\\\\|b", "\\|", "|\\"):
        assert cell_borders(code(text, in_table=True)) == 0
    assert code("line\nbreak\x1b[31mred\x07") == "`line breakred `"
    assert code("   ") == "(empty)"
    assert code("y" * 300) == "`" + "y" * 199 + "…`"


def test_marker() -> None:
    assert marker("simple-ml") == "<!-- ci-runner:simple-ml -->"
    assert marker("a--> b") == "<!-- ci-runner:a%2D-%3E%20b -->"
    assert marker("x-") == "<!-- ci-runner:x%2D -->"
    assert marker("模型") == "<!-- ci-runner:%E6%A8%A1%E5%9E%8B -->"


def test_safe_url_and_labels() -> None:
    assert safe_url("javascript:alert(1)") is None
    assert safe_url("https://h/a b/(c)") == "https://h/a%20b/%28c%29"
    assert safe_url(None) is None
    assert mermaid_label('loss "x"\n```') == "loss _x_ ___"
    assert chart_number(1e-07) == "0.0000001"
    assert chart_number(-2.5e20) == "-250000000000000000000"
    assert chart_number(443.1262107366988) == "443.126"


# ----------------------------------------------------------------------------- forged hidden lines

FORGED_HISTORY = (
    '<!-- ci-runner-history: [{"job":"666","pipeline":"66","sha":"deadbeef",'
    '"outcome":"succeeded","duration":1.0,"metric":"train_loss","value":0.001}] -->'
)


def _forging_run() -> ReportInput:
    """A failed run whose training printed ci-runner's hidden lines: they are in the tail."""
    tail = (
        f"[0]<stdout>:{FORGED_HISTORY}",
        FORGED_HISTORY,
        "<!-- ci-runner:other-config -->",
        "<!-- ci-runner-result:job-124 -->",
    )
    return ReportInput.from_run(CONFIG, CTX, _result(Outcome.FAILED, log_tail=tail))


def test_a_history_the_training_prints_is_not_the_comments() -> None:
    report = _forging_run()
    body = render_comment(report, _previous_body(*OLDER))
    later = replace(report, context=replace(CTX, job_id="124"), outcome=Outcome.SUCCEEDED)

    assert extract_history(body) == [report.history_entry(), *OLDER]
    assert extract_history(render_comment(later, body)) == [
        later.history_entry(),
        report.history_entry(),
        *OLDER,
    ]


def test_the_log_tail_shows_forged_hidden_lines_neutralised() -> None:
    lines = render_report(_forging_run()).splitlines()

    start = lines.index("```text")
    assert lines[start + 1 : start + 6] == [
        "[0]<stdout>:" + FORGED_HISTORY.replace("<!--", "<!- -"),
        FORGED_HISTORY.replace("<!--", "<!- -"),
        "<!- - ci-runner:other-config -->",
        "<!- - ci-runner-result:job-124 -->",
        "```",
    ]
    assert [i for i, line in enumerate(lines) if "<!--" in line] == [0, len(lines) - 1]


def test_only_the_last_line_is_read_as_the_history() -> None:
    body = _previous_body(*OLDER)
    marker_line, rest = body.split("\n", 1)
    forged_above = f"{marker_line}\n{FORGED_HISTORY}\n{rest}"

    assert extract_history(forged_above) == extract_history(body)
    assert extract_history(body + "\n\n") == extract_history(body)
    assert extract_history(f"{body}not ours") == []
    assert extract_history(f"{body}{FORGED_HISTORY} and more") == []


def test_the_result_note_shows_forged_hidden_lines_neutralised() -> None:
    failure = Failure(FailureKind.EXIT_CODE, "<!-- ci-runner-result:job-124 -->", exit_code=1)
    report = ReportInput.from_run(
        replace(CONFIG, name="<!--x"), CTX, _result(Outcome.FAILED, failure=failure)
    )

    assert render_reply(report, "<!-- ci-runner-result:job-123 -->", None) == (
        "<!-- ci-runner-result:job-123 -->\n"
        "❌ **Training failed**: `<!- -x` · reason: `<!- - ci-runner-result:job-124 -->`"
        " · [job #123](https://gitlab.example.com/faraway/simple_ml/-/jobs/123)"
    )
