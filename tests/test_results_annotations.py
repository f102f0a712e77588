"""annotations.json: the job page's links, the MLflow run's and the model outputs' in one file."""

from __future__ import annotations

import json
from pathlib import Path

from ci_runner.results.annotations import add_links, output_links
from ci_runner.results.artifacts import ArtifactLink, ArtifactListing
from ci_runner.tracking.stage import write_annotations

RUN = "http://mlflow.example/#/experiments/1/runs/abc"


def read(out_dir: Path) -> object:
    return json.loads((out_dir / "annotations.json").read_text())


def test_the_model_outputs_join_the_mlflow_runs_link(tmp_path: Path) -> None:
    write_annotations(tmp_path, RUN)
    listing = ArtifactListing(
        "s3://models/p/sha/job/",
        links=(ArtifactLink("model.pt", "https://s3.example/model.pt?X-Amz-Signature=1", 10),),
    )
    add_links(tmp_path, output_links(listing))
    add_links(tmp_path, output_links(listing))  # written again (cancel after train): once
    assert read(tmp_path) == {
        "ci-runner": [
            {"external_link": {"label": "MLflow run", "url": RUN}},
            {
                "external_link": {
                    "label": "Model output: model.pt",
                    "url": "https://s3.example/model.pt?X-Amz-Signature=1",
                }
            },
        ]
    }


def test_paths_on_the_runner_are_no_links_and_a_garbled_file_is_replaced(tmp_path: Path) -> None:
    local = ArtifactListing(
        "/tmp/out", links=(ArtifactLink("m.pt", "/tmp/out/m.pt", 1),), local=True
    )
    assert output_links(local) == []
    assert output_links(None) == []
    (tmp_path / "annotations.json").write_text("[1, 2")
    add_links(tmp_path, [("MLflow run", RUN)])
    assert read(tmp_path) == {"ci-runner": [{"external_link": {"label": "MLflow run", "url": RUN}}]}


def test_at_most_ten_model_files_on_the_job_page(tmp_path: Path) -> None:
    links = tuple(ArtifactLink(f"f{i}", f"https://s3.example/f{i}", 1) for i in range(12))
    assert [label for label, _ in output_links(ArtifactListing("s3://b/", links=links))] == [
        f"Model output: f{i}" for i in range(10)
    ]
