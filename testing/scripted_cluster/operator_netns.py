"""The MPI Operator's network namespace on the scripted cluster: only ``lo``, and a
:class:`~.relay.Relay` on its 127.0.0.1 at kube-apiserver's port to the host's (so the URL and
the serving certificate's 127.0.0.1 are the same inside and out)."""

from __future__ import annotations

from testing.host import network
from testing.scripted_cluster.relay import Relay, listen_in


class LoopbackOperatorNetwork:
    """A :class:`testing.control_plane.run.OperatorNetwork` without any link to the host."""

    def __init__(self, netns: str, api_port: int) -> None:
        self.netns = netns
        self.api_port = api_port
        self.relay: Relay | None = None

    def up(self, api_url: str) -> str:
        network.ip("netns", "add", self.netns)
        network.ip("netns", "exec", self.netns, "ip", "link", "set", "lo", "up")
        self.relay = Relay(listen_in(self.netns, self.api_port), self.api_port).start()
        return api_url

    def down(self) -> None:
        if self.relay is not None:
            self.relay.close()
            self.relay = None
        network.ip("netns", "del", self.netns, check=False)
