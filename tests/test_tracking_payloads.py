"""The run's data as MLflow requests, within what GitLab and MLflow both accept."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ci_runner.backends.result import Outcome
from ci_runner.config.types import Elastic, TrainConfig
from ci_runner.context import CIContext
from ci_runner.tracking import payloads
from ci_runner.tracking.payloads import MetricPoints, batches, bounded, key
from ci_runner.tracking.stage import on_this_gitlab
from ci_runner.tracking.target import Target
from testing.plan_cases import trusted_plan


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("train_loss", "train_loss"),
        ("loss/rank_3", "loss/rank_3"),
        ("val loss (%)", "val loss ___"),
        ("../up", "_up"),
        ("/abs", "_abs"),
        ("a//b", "a__b"),
        ("", "_"),
        ("x" * 300, "x" * 250),
    ],
)
def test_keys_are_made_valid_for_both_servers(name: str, expected: str) -> None:
    assert key(name) == expected


def test_long_values_are_cut_with_an_ellipsis() -> None:
    assert bounded("a" * 250, 250) == "a" * 250
    assert bounded("a" * 251, 250) == "a" * 249 + "…"


def test_the_mean_over_ranks_by_step_then_each_rank() -> None:
    points = MetricPoints(per_rank=True)
    for rank, step, value in [(0, 0, 1.0), (1, 0, 3.0), (0, 1, 0.5), (1, 1, 1.5), (0, 2, 0.25)]:
        points.add("loss", rank, step, value)
    rows = [(m["key"], m["step"], m["value"]) for m in points.metrics(1000)]
    assert rows == [
        ("loss", 0, 2.0),
        ("loss", 1, 1.0),
        ("loss", 2, 0.25),
        ("loss/rank_0", 0, 1.0),
        ("loss/rank_1", 0, 3.0),
        ("loss/rank_0", 1, 0.5),
        ("loss/rank_1", 1, 1.5),
        ("loss/rank_0", 2, 0.25),
    ]
    assert points.count == 8


def test_batches_keep_to_the_entity_limits() -> None:
    metrics = [{"key": "m", "value": 1.0, "timestamp": 1, "step": i} for i in range(2500)]
    params = [(f"p{i}", "v") for i in range(150)]
    sent = list(batches("r", metrics=metrics, params=params, tags=[("t", "v")]))
    for body in sent:
        assert len(body.get("metrics", [])) <= 1000
        assert len(body.get("params", [])) + len(body.get("tags", [])) <= 200
        assert len(body.get("params", [])) <= 100 and len(body.get("tags", [])) <= 100
        total = sum(len(body.get(k, [])) for k in ("metrics", "params", "tags"))
        assert total <= 1000
        assert len(json.dumps(body)) < 1_000_000
        assert body["run_id"] == "r"
    assert sum(len(b.get("metrics", [])) for b in sent) == 2500
    assert [p["key"] for b in sent for p in b.get("params", [])] == [k for k, _ in params]
    shape = [tuple(len(b.get(k, [])) for k in ("params", "tags", "metrics")) for b in sent]
    assert shape == [(100, 0, 0), (50, 1, 949), (0, 0, 1000), (0, 0, 551)]


def test_batches_stay_under_a_megabyte() -> None:
    tags = [(f"t{i}", "x" * 20_000) for i in range(100)]  # 2 MB in 100 tags
    sent = list(batches("r", tags=tags))
    assert [len(b["tags"]) for b in sent] == [44, 44, 12]
    assert all(len(json.dumps(b)) < 900_000 for b in sent)


def test_nothing_to_send_is_no_batch() -> None:
    assert list(batches("r")) == []


def test_the_status_follows_the_outcome() -> None:
    assert payloads.update_run("r", Outcome.SUCCEEDED, 5) == {
        "run_id": "r",
        "status": "FINISHED",
        "end_time": 5,
    }
    assert payloads.STATUS[Outcome.FAILED] == "FAILED"
    assert payloads.STATUS[Outcome.CANCELLED] == "KILLED"


def test_the_run_page_is_mlflows_ui_or_the_gitlab_experiment() -> None:
    assert payloads.run_url("mlflow", "http://m:5000", None, "3", "abc") == (
        "http://m:5000/#/experiments/3/runs/abc"
    )
    api = "https://g/api/v4/projects/1/ml/mlflow"
    page = payloads.run_url("gitlab", api, "https://g/grp/p", "2", "abc")
    assert page == "https://g/grp/p/-/ml/experiments/2"


PLAN = trusted_plan(
    TrainConfig(
        name="toy",
        image="img:1",
        command=("python", "train.py"),
        workers=2,
        env=(("EPOCHS", "3"),),
        elastic=Elastic(min_workers=1, max_workers=3),
    ),
    CIContext(sha="a" * 40, project_path="g/p", job_id="4242", ref_name="main"),
    output_uri="s3://b/o/",
)


def test_our_params_are_under_a_prefix_no_training_code_logs() -> None:
    assert payloads.run_params(PLAN, "0123abcd") == [
        ("ci_runner.workers", "2"),
        ("ci_runner.slots_per_worker", "1"),
        ("ci_runner.ranks", "2"),
        ("ci_runner.gpus_per_worker", "0"),
        ("ci_runner.image", "img:1"),
        ("ci_runner.command", "python train.py"),
        ("ci_runner.requirements_hash", "0123abcd"),
        ("ci_runner.outputs", "s3://b/o/"),
        ("ci_runner.elastic.min_workers", "1"),
        ("ci_runner.elastic.max_workers", "3"),
        ("ci_runner.env.EPOCHS", "3"),
    ]


def test_the_ci_job_tag_goes_only_to_the_gitlab_the_job_runs_on() -> None:
    assert ("gitlab.CI_JOB_ID", "4242") in payloads.run_tags(PLAN, job_link=True)
    assert "gitlab.CI_JOB_ID" not in dict(payloads.run_tags(PLAN))
    api = "https://gitlab.example.com/api/v4"
    ctx = replace(PLAN.context, api_url=api)
    outside = replace(PLAN.context, api_url=None)
    gitlab = Target("gitlab", f"{api}/projects/7/ml/mlflow")
    assert on_this_gitlab(gitlab, outside) is True
    # MLFLOW_TRACKING_URI set to this GitLab's MLflow API, as GitLab's docs show it
    assert on_this_gitlab(Target("mlflow", f"{api}/projects/7/ml/mlflow"), ctx) is True
    assert on_this_gitlab(Target("mlflow", "https://mlflow.example.com"), ctx) is False
    other = "https://other-gitlab.example.com/api/v4/projects/7/ml/mlflow"
    assert on_this_gitlab(Target("mlflow", other), ctx) is False
    assert on_this_gitlab(Target("mlflow", f"{api}/projects/7/ml/mlflow"), outside) is False
