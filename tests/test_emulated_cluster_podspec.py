"""How the emulated kubelet reads a pod spec: hostname, /etc/hosts, $(VAR), quantities, images."""

from __future__ import annotations

from decimal import Decimal

import pytest

from testing.emulated_cluster.imagestore import normalized
from testing.emulated_cluster.podspec import (
    expand,
    hostname,
    hosts_file,
    memory_limit,
    probe,
    quantity,
)


def test_hostname_is_spec_hostname_or_the_pod_name_cut_to_63() -> None:
    assert hostname({"metadata": {"name": "p"}, "spec": {"hostname": "h", "subdomain": "s"}}) == (
        "h",
        "s",
    )
    long = "a" * 62 + "-b"
    assert hostname({"metadata": {"name": long}, "spec": {}}) == ("a" * 62, "")


def test_hosts_file_has_the_fqdn_line_when_a_subdomain_is_set() -> None:
    pod = {
        "metadata": {"name": "w", "namespace": "ml"},
        "spec": {"hostname": "w", "subdomain": "j"},
    }
    assert hosts_file(pod, "10.98.76.20", "cluster.local").splitlines()[-1] == (
        "10.98.76.20\tw.j.ml.svc.cluster.local\tw"
    )


def test_expand_replaces_known_variables_keeps_unknown_ones_and_unescapes_dollars() -> None:
    assert expand("$(A)-$$(A)-$(B)-$", {"A": "1"}) == "1-$(A)-$(B)-$"


def test_an_exec_probe_is_expanded_against_the_env_entries_as_written() -> None:
    # prober.go: ExpandContainerCommandOnlyStatic, the entries' own values, "" for valueFrom.
    container = {
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)x"},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ]
    }
    spec = {"exec": {"command": ["sh", "-c", "$$(date) $(A) $(B) [$(S)] $(C)"]}}
    found = probe(spec, container)
    assert found is not None
    assert found.spec["exec"]["command"] == ["sh", "-c", "$(date) 1 $(A)x [] $(C)"]
    assert spec["exec"]["command"][2] == "$$(date) $(A) $(B) [$(S)] $(C)"  # the pod's, unchanged


def test_quantities() -> None:
    assert quantity("512Mi") == 512 * 2**20
    assert quantity("1G") == 10**9
    assert quantity("500m") == Decimal("0.5")
    assert memory_limit({"resources": {"limits": {"memory": "1.5Gi"}}}) == 3 * 2**29
    assert memory_limit({}) is None
    with pytest.raises(ValueError, match="quantities must match"):
        quantity("12 MB")


def test_image_names_are_normalized_as_containerd_names_them() -> None:
    assert normalized("ubuntu") == "docker.io/library/ubuntu:latest"
    assert normalized("horovod/horovod:0.28.1") == "docker.io/horovod/horovod:0.28.1"
    assert normalized("registry.example.com:5000/ml/train:3f2a") == (
        "registry.example.com:5000/ml/train:3f2a"
    )
    assert normalized("localhost/train") == "localhost/train:latest"
