"""The names one scripted-cluster run gives what it creates on this machine, each carrying the
pid of the process that started it, so a later start can tell a killed run's leftovers (pid
dead) from a live run's (left alone)."""

from __future__ import annotations

import itertools
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

NETNS_PREFIX = "cirs-"  # "ci-runner scripted"; the emulated cluster's are cire-
CGROUP_PREFIX = "ci-runner-scripted-"
STATE_PREFIX = "ci-runner-scripted-"
_RUN = re.compile(r"^(?:cirs-|ci-runner-scripted-)((\d+)-\d+)(?:-|$)")
_serials = itertools.count(1)


def run_of(name: str) -> str | None:
    """The run (``<pid>-<serial>``) in one of our names, or None for a name not ours."""
    match = _RUN.match(name)
    return match.group(1) if match else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class RunNames:
    """The names of one run: the pid of the process that started it and a serial (one process
    may run several)."""

    pid: int
    serial: int

    @classmethod
    def mine(cls) -> RunNames:
        return cls(os.getpid(), next(_serials))

    @property
    def run(self) -> str:
        return f"{self.pid}-{self.serial}"

    @property
    def operator_netns(self) -> str:
        return f"{NETNS_PREFIX}{self.run}-mpiop"

    @property
    def cgroup(self) -> str:
        return f"{CGROUP_PREFIX}{self.run}"

    def state_dir(self) -> Path:
        """A fresh directory for this run's files (etcd data, certificates, logs)."""
        return Path(tempfile.mkdtemp(prefix=f"{STATE_PREFIX}{self.run}-"))
