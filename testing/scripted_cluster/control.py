"""One scripted-cluster control plane: :class:`testing.control_plane.run.ControlPlane` on
127.0.0.1 at a free port, the operator in a loopback-only namespace, every process in a cgroup
and every file in a temp directory named for this process (:mod:`.names`). ``start()`` first
removes what killed runs left; ``stop()`` removes everything of this run."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

from testing.control_plane.kueue import Mode
from testing.control_plane.run import ControlPlane
from testing.host import cgroups
from testing.host.cgroups import Cgroup
from testing.ports import free_port
from testing.scripted_cluster import leftovers
from testing.scripted_cluster.names import RunNames
from testing.scripted_cluster.operator_netns import LoopbackOperatorNetwork

ADDRESS = "127.0.0.1"


def _run_cgroup(names: RunNames) -> Cgroup:
    """``<our cgroup>/ci-runner-scripted-<pid>/control-plane`` in the memory hierarchy (no
    limit: only to find and kill every process of the run)."""
    root, v2 = cgroups.hierarchy()
    path = cgroups.own_cgroup(root, v2) / names.cgroup / "control-plane"
    path.mkdir(parents=True, exist_ok=True)
    return Cgroup(path)


class ScriptedControlPlane:
    """``with ScriptedControlPlane() as plane:`` a started control plane (``plane.control``).
    ``kueue``: Kueue's CRDs by default (Workloads, LocalQueues... can be created, nothing
    reconciles them); :attr:`Mode.RUNNING` runs Kueue too, about 5 s more to start."""

    def __init__(self, kueue: Mode = Mode.CRDS) -> None:
        self.names = RunNames.mine()
        self.kueue = kueue
        self.control: ControlPlane | None = None
        self.state: Path | None = None

    @property
    def plane(self) -> ControlPlane:
        assert self.control is not None, "start() first"
        return self.control

    def start(self) -> ScriptedControlPlane:
        leftovers.remove_dead_runs()
        self.state = self.names.state_dir()
        port = free_port()
        self.control = ControlPlane(
            self.state / "control-plane",
            _run_cgroup(self.names),
            address=ADDRESS,
            port=port,
            operator_network=LoopbackOperatorNetwork(self.names.operator_netns, port),
            kueue_mode=self.kueue,
        )
        try:
            self.control.start()
            self.control.wait_operator_leads()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.control is not None:
            with contextlib.suppress(Exception):
                self.control.stop()
        leftovers.remove(self.names.run)
        if self.state is not None:
            shutil.rmtree(self.state, ignore_errors=True)

    def __enter__(self) -> ScriptedControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
