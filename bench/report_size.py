"""5. Report size: 8 ranks x 100,000 steps -> at most 100 points a chart series, each chart within
GitLab's 2,000 characters, a comment under 50 KB, rendered in under 1 s.

The metrics come from parsing a generated horovodrun log of that size (the parse is not timed
here: bench 3 times it); what is timed is :func:`render_comment` over the parsed summary, with a
previous comment body to carry the history over from, as the publisher calls it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from bench.common import Row, check, median, say, spread
from bench.logs import SPECS
from ci_runner.backends.result import Outcome, RunResult
from ci_runner.results.chart import CHART_CHARS
from ci_runner.results.metrics import parse_metrics
from ci_runner.results.report import HistoryEntry, ReportInput
from ci_runner.results.report_markdown import render_comment, render_report
from testing.plan_cases import REPORT_CONFIG, REPORT_CONTEXT

NAME = "5 report size"
RANKS = 8
STEPS = 100_000
MAX_POINTS = 100
MAX_BYTES = 50_000
MAX_SECONDS = 1.0
CTX = replace(REPORT_CONTEXT, mr_iid="12")
CONFIG = replace(
    REPORT_CONFIG,
    command=("python", "examples/simple_ml/main_with_horovod.py"),
    workers=RANKS,
    metrics=SPECS,  # the example's train_loss and test_loss, with the rank
)


def log_lines(steps: int) -> Iterator[str]:
    """The example's output for ``steps`` epochs on every rank, interleaved like horovodrun's."""
    for step in range(steps):
        for rank in range(RANKS):
            loss = 1000.0 / (step + 1) + 3.0 * rank + (step * 7919 + rank) % 13
            yield f"[{rank}]<stdout>:Training. Epoch {step}, MSE loss: {loss!r}, Worker: {rank}\n"
    for rank in range(RANKS):
        yield f"[{rank}]<stdout>:Testing. MSE loss: 219.68063354492188, Worker: {rank}\n"


def chart_series_points(body: str) -> list[int]:
    """Points in each Mermaid ``line [...]`` / ``bar [...]`` series of the comment."""
    return [
        len(match.group(1).split(","))
        for match in re.finditer(
            r"^\s*(?:line|bar)(?: \"[^\"]*\")? \[([^\]]*)\]", body, flags=re.MULTILINE
        )
    ]


def chart_sources(body: str) -> list[str]:
    """The text of each Mermaid block of the comment, as GitLab measures it."""
    return re.findall(r"^```mermaid\n(.*?)^```$", body, flags=re.MULTILINE | re.DOTALL)


def run(quick: bool) -> list[Row]:
    steps = 10_000 if quick else STEPS
    say(f"parsing {RANKS} ranks x {steps} steps")
    summary = parse_metrics(log_lines(steps), CONFIG.metrics)
    started = datetime(2026, 11, 30, 6, 0, tzinfo=timezone.utc)
    result = RunResult(
        outcome=Outcome.SUCCEEDED,
        mpijob_name="simple-ml-01234567",
        log_path=Path("/tmp/train.log"),
        log_tail=tuple(log_lines(1))[-8:],
        started_at=started,
        finished_at=started.replace(hour=7),
    )
    report = ReportInput.from_run(
        CONFIG, CTX, result, metrics=summary, baseline={"train_loss": 0.02, "test_loss": 230.0}
    )
    history = tuple(
        HistoryEntry(str(100 + i), str(40 + i), f"{i:08x}", "succeeded", 3600.0, "train_loss", 0.1)
        for i in range(20)
    )
    previous = render_report(
        replace(
            ReportInput(Outcome.RUNNING, CONFIG.name, CTX, "simple-ml-01234567"), history=history
        )
    )
    seconds: list[float] = []
    body = ""
    for _ in range(3 if quick else 9):
        begun = time.perf_counter()
        body = render_comment(report, previous)
        seconds.append(time.perf_counter() - begun)
    points = chart_series_points(body)
    largest = max((len(source) for source in chart_sources(body)), default=0)
    size = len(body.encode())
    most = max(points, default=0)
    return [
        Row(NAME, "log parsed", f"{summary.lines:,} lines, {RANKS} ranks x {steps:,} steps"),
        Row(
            NAME,
            "chart series",
            f"{len(points)} series, at most {most} points",
            f"<= {MAX_POINTS} points",
            check(bool(points) and most <= MAX_POINTS),
        ),
        Row(
            NAME,
            "largest chart source",
            f"{largest:,} characters",
            f"<= {CHART_CHARS:,} (GitLab draws it)",
            check(0 < largest <= CHART_CHARS),
        ),
        Row(
            NAME,
            "comment size",
            f"{size:,} bytes",
            f"< {MAX_BYTES:,} bytes",
            check(size < MAX_BYTES),
        ),
        Row(
            NAME,
            "render_comment time",
            spread(seconds, digits=3),
            f"< {MAX_SECONDS:.0f} s",
            check(median(seconds) < MAX_SECONDS),
        ),
    ]
