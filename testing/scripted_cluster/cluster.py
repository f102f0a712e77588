"""The scripted cluster of one test module: the control plane with three scripted GPU nodes.

:class:`ScriptedCluster` (one per test module: it takes seconds to start; :func:`module_cluster`
is a module fixture's body); :func:`testing.backend_harness.cluster_on` gives one test a
namespace of it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.control_plane import binaries
from testing.control_plane.kueue import Mode
from testing.node_objects import NodeSpec
from testing.rights import verdict
from testing.scripted_cluster.control import ScriptedControlPlane
from testing.scripted_cluster.kubelet import ScriptedKubelet

NODES = [NodeSpec(f"node-{i}") for i in range(1, 4)]


class ScriptedCluster:
    """The control plane and the scripted kubelet of one test module (``nodes``: its nodes,
    :data:`NODES` unless given; ``kueue``: Kueue's CRDs only, unless given)."""

    def __init__(
        self, state: Path, nodes: list[NodeSpec] | None = None, kueue: Mode = Mode.CRDS
    ) -> None:
        self.plane = ScriptedControlPlane(kueue)
        self.state = state
        self.nodes = NODES if nodes is None else nodes
        self.kubelet: ScriptedKubelet | None = None

    def start(self) -> ScriptedCluster:
        self.plane.start()
        try:
            self.kubelet = ScriptedKubelet(self.plane.plane, self.nodes, self.state).start()
        except BaseException:
            self.plane.stop()
            raise
        return self

    def stop(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        self.plane.stop()


def module_cluster(state: Path, kueue: Mode = Mode.CRDS) -> Iterator[ScriptedCluster]:
    """A module fixture's body: the started scripted cluster, stopped after. Without root or the
    control-plane binaries it skips, or fails where ``CI_RUNNER_REQUIRE_CLUSTER_RIGHTS=1`` (.ci/run)
    says they are there (:func:`testing.rights.verdict`)."""
    missing = [] if os.geteuid() == 0 else ["root (a network namespace and a cgroup)"]
    if not binaries.built():
        missing.append("the control-plane binaries (make control-plane)")
    outcome = verdict(missing, os.environ, "the scripted cluster")
    if outcome is not None:
        action, reason = outcome
        (pytest.fail if action == "fail" else pytest.skip)(reason)
    scripted = ScriptedCluster(state, kueue=kueue).start()
    try:
        yield scripted
    finally:
        scripted.stop()
