"""ci_runner.config.outputs: train.yaml's outputs with {project}, {sha} and {job} filled in."""

from __future__ import annotations

import pytest

from ci_runner.config.outputs import expand_outputs


def test_expand_outputs() -> None:
    assert (
        expand_outputs(
            "s3://models/{project}/{sha}/{job}/{{x}}/",
            project="group/proj",
            sha="0123abcd",
            job="simple-ml-0123abcd-42",
        )
        == "s3://models/group/proj/0123abcd/simple-ml-0123abcd-42/{x}/"
    )


def test_expand_outputs_inserts_values_literally() -> None:
    assert expand_outputs("{job}", project="p", sha="s", job="{sha}") == "{sha}"


def test_expand_outputs_refuses_what_validation_refuses() -> None:
    with pytest.raises(ValueError, match="unknown placeholder in outputs: 'branch'"):
        expand_outputs("s3://m/{branch}", project="p", sha="s", job="j")
