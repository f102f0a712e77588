"""metrics.json and metrics.txt: written, read back as a baseline, refused when garbled."""

from __future__ import annotations

import json

import pytest

from ci_runner.results.metrics import MetricsSummary, parse_log_file, parse_metrics
from ci_runner.results.metrics_file import (
    MetricsFileError,
    load_baseline,
    openmetrics_name,
    summary_from_json,
    summary_to_json,
    summary_to_openmetrics,
)
from testing.metric_specs import ACC, TEST, TRAIN
from testing.paths import SEED_LOG


def test_json_round_trip_and_baseline() -> None:
    summary = parse_log_file(SEED_LOG, [TRAIN, TEST, ACC])
    data = summary_to_json(summary)

    assert data["version"] == 1
    assert data["metrics"]["train_loss"]["ranks"]["1"]["points"][17] == [17, 355.790610972445]
    assert data["metrics"]["accuracy"] == {
        "goal": "max",
        "count": 0,
        "unparseable": 0,
        "final": None,
        "final_step": None,
        "best": None,
        "best_step": None,
        "best_rank": None,
        "ranks": {},
    }
    text = json.dumps(data, allow_nan=False)
    assert load_baseline(text) == {
        "train_loss": 443.1262107366988,
        "test_loss": 219.68063354492188,
    }
    assert summary_from_json(json.loads(text)) == load_baseline(text.encode())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "metrics.json is not valid JSON: "),
        ("[]", "metrics.json is not a JSON object"),
        ('{"version": 2, "metrics": {}}', "metrics.json has version 2, expected 1"),
        ('{"metrics": {}}', "metrics.json has version None, expected 1"),
        ('{"version": 1}', "metrics.json has no 'metrics' object"),
        ('{"version": 1, "metrics": {"a": 3}}', "metrics.json: metric 'a' is not an object"),
        (
            '{"version": 1, "metrics": {"a": {"final": "1"}}}',
            "metrics.json: metric 'a' has final '1'",
        ),
        (
            '{"version": 1, "metrics": {"a": {"final": NaN}}}',
            "metrics.json: metric 'a' has final nan",
        ),
        ("[" * 100_000, "metrics.json is not valid JSON: "),
    ],
)
def test_garbage_baseline_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(MetricsFileError) as error:
        load_baseline(text)
    assert str(error.value).startswith(message)
    assert len(str(error.value)) < 200


def test_garbage_baseline_text_is_quoted_in_80_characters() -> None:
    name = "x" * 5000
    with pytest.raises(MetricsFileError) as error:
        load_baseline(json.dumps({"version": 1, "metrics": {name: {"final": "y" * 5000}}}))
    assert str(error.value) == (
        "metrics.json: metric '" + "x" * 76 + "... has final '" + "y" * 76 + "..."
    )


def test_openmetrics() -> None:
    summary = parse_log_file(SEED_LOG, [TRAIN, TEST, ACC])

    assert summary_to_openmetrics(summary) == (
        "train_loss 443.1262107366988\n"
        "train_loss_best 355.790610972445\n"
        "test_loss 219.68063354492188\n"
        "test_loss_best 219.68063354492188\n"
        "# EOF\n"
    )


def test_openmetrics_names_are_sanitised_and_unique() -> None:
    assert openmetrics_name("val loss/μ") == "val_loss__"
    assert openmetrics_name("1st") == "_1st"
    lines = [
        'CI_RUNNER_METRIC {"name": "a-b", "value": 1}',
        'CI_RUNNER_METRIC {"name": "a_b", "value": 2}',
        'CI_RUNNER_METRIC {"name": "x\\n# EOF\\ny 1", "value": 3}',
    ]
    text = summary_to_openmetrics(parse_metrics(lines, []))

    assert text == (
        "a_b 1.0\na_b_best 1.0\na_b_2 2.0\na_b_2_best 2.0\n"
        "x___EOF_y_1 3.0\nx___EOF_y_1_best 3.0\n# EOF\n"
    )


def test_empty_summary_outputs() -> None:
    empty = MetricsSummary(metrics=(), lines=0)
    assert summary_to_openmetrics(empty) == "# EOF\n"
    assert summary_to_json(empty) == {
        "version": 1,
        "lines": 0,
        "ignored_json_lines": 0,
        "metrics": {},
    }
