"""ci_runner.config.builders: the checks across several fields, and the defaults they fill in."""

from __future__ import annotations

import pytest

from ci_runner.config.schema import load_config
from testing.config_cases import BASE, problems

CROSS_FIELD_PROBLEMS = [
    (
        "elastic: {min_workers: 2, max_workers: 4}",
        "train.yaml:4: workers: must be from 2 to 4 (elastic.min_workers to "
        "elastic.max_workers), got 1; fix: set workers to how many workers to start with, "
        "from 2 to 4",
    ),
    (
        "workers: 5\nelastic: {min_workers: 2, max_workers: 4}",
        "train.yaml:4: workers: must be from 2 to 4 (elastic.min_workers to "
        "elastic.max_workers), got 5; fix: set workers to how many workers to start with, "
        "from 2 to 4",
    ),
    (
        "kubernetes: {tolerations: [{key: gpu, operator: Exists, value: x}]}",
        "train.yaml:4: kubernetes.tolerations[0].value: must not be set when operator is "
        "Exists; fix: remove value, or use operator: Equal",
    ),
    (
        "kubernetes: {tolerations: [{effect: NoSchedule}]}",
        "train.yaml:4: kubernetes.tolerations[0].key: is required when operator is Equal "
        "(the default); fix: add the taint's key, or use operator: Exists to tolerate "
        "every taint",
    ),
    (
        "kubernetes: {tolerations: [{key: gpu, toleration_seconds: 5}]}",
        "train.yaml:4: kubernetes.tolerations[0].toleration_seconds: needs effect: "
        "NoExecute; fix: set effect: NoExecute, or remove toleration_seconds",
    ),
]


@pytest.mark.parametrize(("snippet", "expected"), CROSS_FIELD_PROBLEMS)
def test_each_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    assert problems(BASE + snippet + "\n") == [expected]


@pytest.mark.parametrize(
    ("resources", "slots"),
    [("{gpu: 4}", 4), ("{gpu: 0}", 1), ("{cpu: 2}", 1)],
)
def test_slots_per_worker_defaults_to_gpus(resources: str, slots: int) -> None:
    assert load_config(BASE + f"resources: {resources}\n").slots_per_worker == slots


def test_cross_field_checks_run_beside_field_errors() -> None:
    text = BASE + (
        "workers: 9\n"  # 4
        "secrets: [TOKEN]\n"  # 5
        "env: {TOKEN: x}\n"  # 6
        "elastic: {min_workers: 2, max_workers: 4}\n"  # 7
        "kubernetes:\n"  # 8
        "  tolerations:\n"  # 9
        "    - operator: Exists\n"  # 10
        "      value: x\n"  # 11
        "      toleration_seconds: 5\n"  # 12
        "      bogus: 1\n"  # 13
    )
    assert problems(text) == [
        "train.yaml:4: workers: must be from 2 to 4 (elastic.min_workers to elastic.max_workers), "
        "got 9; fix: set workers to how many workers to start with, from 2 to 4",
        "train.yaml:5: secrets[0]: TOKEN is also set in env; fix: keep it in one place: secrets "
        "for CI variables, env for plain values",
        "train.yaml:11: kubernetes.tolerations[0].value: must not be set when operator is "
        "Exists; fix: remove value, or use operator: Equal",
        "train.yaml:12: kubernetes.tolerations[0].toleration_seconds: needs effect: NoExecute; "
        "fix: set effect: NoExecute, or remove toleration_seconds",
        "train.yaml:13: kubernetes.tolerations[0].bogus: unknown key; fix: remove it; allowed "
        "keys: key, operator, value, effect, toleration_seconds",
    ]


def test_an_invalid_value_is_not_also_checked_against_other_fields() -> None:
    assert problems(BASE + "workers: two\nelastic: {min_workers: 2, max_workers: 4}\n") == [
        "train.yaml:4: workers: must be a whole number, got the string 'two'; "
        "fix: write a whole number, e.g. workers: 2"
    ]


TORCHRUN = BASE + "distributed: torchrun\n"
TORCHRUN_NAMES = (
    "RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, "
    "JOB_COMPLETION_INDEX and PET_*, TORCHELASTIC_*, TORCH_ELASTIC_*"
)
TORCHRUN_PROBLEMS = [
    (
        "elastic: {min_workers: 1, max_workers: 4}",
        "train.yaml:5: elastic: is Elastic Horovod's; torchrun runs a fixed number of nodes; "
        "fix: remove elastic (workers is the number of nodes), or set distributed: horovod",
    ),
    (
        "kubernetes:\n  namespace: ml\n  queue: research",
        "train.yaml:7: kubernetes.queue: is a gang queue of the MPIJob's schedulingPolicy; "
        "torchrun's Indexed Job has none; fix: remove kubernetes.queue, or set distributed: "
        "horovod",
    ),
    (
        "env: {EPOCHS: 3, RANK: 0}",
        "train.yaml:5: env.RANK: RANK is set by torchrun for every rank; fix: choose another "
        f"name ({TORCHRUN_NAMES} are torchrun's), or set distributed: horovod",
    ),
    (
        "env:\n  PET_NNODES: 2",
        "train.yaml:6: env.PET_NNODES: PET_NNODES is set by torchrun for every rank; fix: "
        f"choose another name ({TORCHRUN_NAMES} are torchrun's), or set distributed: horovod",
    ),
    (
        "secrets:\n  - WANDB_API_KEY\n  - JOB_COMPLETION_INDEX",
        "train.yaml:7: secrets[1]: JOB_COMPLETION_INDEX is set by the Indexed Job for every "
        f"rank; fix: choose another name ({TORCHRUN_NAMES} are torchrun's), or set "
        "distributed: horovod",
    ),
]


@pytest.mark.parametrize(("snippet", "expected"), TORCHRUN_PROBLEMS)
def test_each_torchrun_refusal_is_worded_exactly(snippet: str, expected: str) -> None:
    assert problems(TORCHRUN + snippet + "\n") == [expected]
    load_config(BASE + snippet + "\n")  # Horovod's job takes the same


@pytest.mark.parametrize(
    "name",
    [
        *("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK"),
        *("MASTER_ADDR", "MASTER_PORT", "JOB_COMPLETION_INDEX"),
        *("PET_RDZV_ENDPOINT", "TORCHELASTIC_RUN_ID", "TORCH_ELASTIC_X"),
    ],
)
def test_torchrun_refuses_each_variable_it_sets(name: str) -> None:
    (problem,) = problems(f"{TORCHRUN}env: {{{name}: x}}\n")
    assert problem.startswith(f"train.yaml:5: env.{name}: {name} is set by ")
    (problem,) = problems(f"{TORCHRUN}secrets: [{name}]\n")
    assert problem.startswith(f"train.yaml:5: secrets[0]: {name} is set by ")


def test_every_torchrun_refusal_in_one_run_in_line_order() -> None:
    text = TORCHRUN + (
        "env: {WORLD_SIZE: 4}\n"
        "elastic: {min_workers: 1, max_workers: 2}\n"
        "kubernetes: {queue: q}\n"
        "secrets: [MASTER_PORT]\n"
    )
    assert [line.split(": ")[0] for line in problems(text)] == [
        "train.yaml:5",
        "train.yaml:6",
        "train.yaml:7",
        "train.yaml:8",
    ]


def test_torchrun_names_nodes_and_processes_as_workers_and_slots() -> None:
    config = load_config(TORCHRUN + "workers: 3\nresources: {gpu: 4}\nenv: {RANKING: top}\n")
    assert (config.distributed, config.workers, config.slots_per_worker, config.ranks) == (
        "torchrun",
        3,
        4,
        12,
    )
    assert load_config(BASE).distributed == "horovod"
    assert problems(BASE + "distributed: torchrun2\n") == [
        "train.yaml:4: distributed: must be one of horovod, torchrun, got 'torchrun2'; fix: did "
        "you mean 'torchrun'?"
    ]


KUEUE_PROBLEMS = [
    (
        "kubernetes:\n  local_queue: team-a\n  queue: research",
        "train.yaml:6: kubernetes.queue: names Volcano's or scheduler-plugins' gang queue, and "
        "local_queue Kueue's: a job is admitted by one of them; fix: keep local_queue for "
        "Kueue, or queue for Volcano or scheduler-plugins",
    ),
    (
        "kubernetes:\n  workload_priority_class: high",
        "train.yaml:5: kubernetes.workload_priority_class: is for a job in Kueue's queue, and "
        "kubernetes.local_queue names none; fix: set kubernetes.local_queue to the LocalQueue "
        "the job waits in, or remove kubernetes.workload_priority_class",
    ),
    (
        "kubernetes:\n  queue_timeout: 1h",
        "train.yaml:5: kubernetes.queue_timeout: is for a job in Kueue's queue, and "
        "kubernetes.local_queue names none; fix: set kubernetes.local_queue to the LocalQueue "
        "the job waits in, or remove kubernetes.queue_timeout",
    ),
    (
        "kubernetes:\n  local_queue: Team.A",
        "train.yaml:5: kubernetes.local_queue: must be a Kubernetes LocalQueue name (lowercase "
        "letters, digits and '-', starting and ending with a letter or digit, at most 63 "
        "characters), got 'Team.A'; fix: write e.g. team-a",
    ),
]


@pytest.mark.parametrize(("snippet", "expected"), KUEUE_PROBLEMS)
def test_each_kueue_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    assert problems(BASE + snippet + "\n") == [expected]


@pytest.mark.parametrize("base", [BASE, TORCHRUN])
def test_both_kinds_of_job_may_wait_in_kueue(base: str) -> None:
    config = load_config(
        base + "kubernetes:\n  local_queue: team-a\n  workload_priority_class: low\n"
        "  queue_timeout: 90m\n"
    )
    k8s = config.kubernetes
    assert (k8s.local_queue, k8s.workload_priority_class, k8s.queue_timeout) == (
        "team-a",
        "low",
        5400,
    )
