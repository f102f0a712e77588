"""ci_runner.config.kubernetes: train.yaml's ``kubernetes`` mapping, through the schema."""

from __future__ import annotations

from ci_runner.config.schema import load_config
from ci_runner.config.types import Toleration
from testing.config_cases import BASE, problems


def test_anchors_may_share_a_toleration() -> None:
    text = BASE + (
        "kubernetes:\n"
        "  tolerations:\n"
        "    - &gpu {key: gpu, operator: Exists, effect: NoSchedule}\n"
        "    - *gpu\n"
    )
    toleration = Toleration(key="gpu", operator="Exists", effect="NoSchedule")
    assert load_config(text).kubernetes.tolerations == (toleration, toleration)


def test_a_non_root_sshd_needs_an_unprivileged_port() -> None:
    assert problems(BASE + "kubernetes:\n  run_as_user: 1000\n") == [
        "train.yaml:5: kubernetes.ssh_port: sshd as user 1000 cannot listen on port 22 (below "
        "1024, and no capability is given); fix: set kubernetes.ssh_port: 2222 (or another port "
        "from 1024 up), as images built on mpioperator/base do",
    ]
    options = load_config(BASE + "kubernetes: {run_as_user: 1000, ssh_port: 2222}\n").kubernetes
    assert (options.run_as_user, options.ssh_port) == (1000, 2222)
