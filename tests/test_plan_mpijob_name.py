"""The MPIJob's name: short, DNS-1035 safe, stable per CI job, unique across CI jobs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ci_runner.config.types import Elastic, TrainConfig
from ci_runner.context import CIContext
from ci_runner.plan.mpijob_name import DNS_1035_LABEL, max_name_length, mpijob_name

SHA = "0123456789abcdef0123456789abcdef01234567"
CONFIG = TrainConfig(name="simple-ml", image="img", command=("python", "t.py"), workers=2)
CI = CIContext(sha=SHA, project_path="g/p", job_id="5005")
LOCAL = CIContext(sha=SHA, project_path="g/p", ref_name="main")


def _valid(label: str) -> bool:
    return bool(DNS_1035_LABEL.fullmatch(label)) and len(label) <= 63


def test_config_name_short_sha_and_ci_job_id() -> None:
    assert mpijob_name(CONFIG, CI) == "simple-ml-01234567-5005"


def test_the_same_ci_job_always_gets_the_same_name() -> None:
    assert mpijob_name(CONFIG, CI) == mpijob_name(CONFIG, replace(CI, pipeline_id="9"))


def test_another_ci_job_gets_another_name() -> None:
    assert mpijob_name(CONFIG, replace(CI, job_id="5006")) == "simple-ml-01234567-5006"


def test_outside_ci_a_stable_hash_of_the_context() -> None:
    name = mpijob_name(CONFIG, LOCAL)
    assert name == mpijob_name(CONFIG, LOCAL)
    assert name.startswith("simple-ml-01234567-l") and len(name) == len("simple-ml-01234567-") + 7
    assert mpijob_name(CONFIG, replace(LOCAL, ref_name="other")) != name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("My_Model.v2", "my-model-v2-01234567-5005"),
        ("2nd-try", "j-2nd-try-01234567-5005"),
        ("---", "j-01234567-5005"),
        ("Ünïcode ✓", "n-code-01234567-5005"),
    ],
)
def test_config_names_are_made_dns_safe(name: str, expected: str) -> None:
    assert mpijob_name(replace(CONFIG, name=name), CI) == expected


@pytest.mark.parametrize(
    ("workers", "elastic_max", "limit"),
    [(1, None, 48), (2, None, 48), (10**6, None, 48), (10**8, None, 47), (2, 10**9, 46)],
)
def test_length_leaves_room_for_worker_and_launcher_pod_names(
    workers: int, elastic_max: int | None, limit: int
) -> None:
    config = replace(
        CONFIG,
        name="a-very-long-model-name-that-goes-on-and-on-and-on-forever",
        workers=workers,
        elastic=Elastic(1, elastic_max) if elastic_max else None,
    )
    assert max_name_length(config) == limit
    name = mpijob_name(config, CI)
    assert limit - 1 <= len(name) <= limit and name.endswith("-01234567-5005")
    last = max(workers, elastic_max or 0) - 1
    assert _valid(f"{name}-worker-{last}")
    assert _valid(f"{name}-launcher-abcde")


def test_an_absurd_job_id_keeps_its_end() -> None:
    name = mpijob_name(CONFIG, replace(CI, job_id="9" * 80))
    assert name == "s-" + "9" * 46
    assert _valid(name)


@given(
    name=st.text(min_size=1, max_size=200),
    job_id=st.one_of(st.none(), st.text(alphabet="0123456789", min_size=1, max_size=40)),
    workers=st.integers(min_value=1, max_value=10**7),
)
def test_any_name_is_a_valid_label_with_room_for_every_pod(
    name: str, job_id: str | None, workers: int
) -> None:
    config = replace(CONFIG, name=name, workers=workers)
    job = mpijob_name(config, replace(CI, job_id=job_id))
    assert _valid(job)
    assert _valid(f"{job}-worker-{workers - 1}")
    assert _valid(f"{job}-launcher-abcde")
