"""ending: how train and cancel end, reported and with the MLflow run ended."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ci_runner.backends.result import Outcome, RunResult
from ci_runner.clock import ManualClock
from ci_runner.commands import ending
from ci_runner.commands.common import Runtime
from ci_runner.console import Console
from ci_runner.plan.run_plan import OutputPaths
from ci_runner.results.publish import RunRecord
from ci_runner.settings import read_settings
from ci_runner.tracking.stage import TrackedRun
from testing.plan_cases import CONFIG, CONTEXT, trusted_plan

# A run that was created; never called: what would call it is recorded instead.
TRACKED: Any = SimpleNamespace(url="https://mlflow.example.com/#/experiments/1/runs/r1")


def quiet() -> Console:
    return Console(io.StringIO(), io.StringIO())


def recording(monkeypatch: pytest.MonkeyPatch, name: str) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(ending, name, lambda *args: calls.append(args))
    return calls


def test_an_error_ends_the_run_failed_and_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    ended = recording(monkeypatch, "end_failed")
    clock, console = ManualClock(), quiet()
    with pytest.raises(KeyboardInterrupt), ending.run_failed_on_error(TRACKED, clock, console):
        raise KeyboardInterrupt
    assert ended == [(TRACKED, clock, console)]
    with ending.run_failed_on_error(TRACKED, clock, console):
        pass
    with pytest.raises(ValueError), ending.run_failed_on_error(None, clock, console):
        raise ValueError
    assert len(ended) == 1


def test_the_result_is_reported_then_the_run_ended_with_its_artifacts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    finished = recording(monkeypatch, "finish_tracking")
    plan = trusted_plan(CONFIG, CONTEXT, outputs=OutputPaths(tmp_path, "out"))
    (tmp_path / "train.log").write_text("[0]<stdout>:epoch 1\n")
    result = RunResult(Outcome.SUCCEEDED, plan.mpijob_name, tmp_path / "train.log")
    clock = ManualClock()
    runtime = Runtime(read_settings({}), tmp_path, io.StringIO(), io.StringIO(), clock)
    console = runtime.console
    tracked: TrackedRun | None = TRACKED
    report = ending.report_result(runtime, RunRecord(plan, result), tracked)
    assert (report.outcome, report.tracking_url) == (Outcome.SUCCEEDED, TRACKED.url)
    assert (tmp_path / "report.md").is_file()
    assert finished == [(TRACKED, plan, result, report.artifacts, console, clock)]
    ending.report_result(runtime, RunRecord(plan, result))
    assert len(finished) == 1
