"""Stopping a process and every process it started, found through /proc (Horovod's launcher
starts each rank in a session of its own, so signalling the process group is not enough)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Final

# Seconds to wait for every process of a killed rank's tree to be gone after SIGKILL.
_GONE_SECONDS: Final = 10.0


def stop_process_tree(proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
    """Stop ``proc`` (a process group leader) and every process it started, then wait for them.

    Horovod's launcher starts each rank in a session of its own, so signalling the group is not
    enough: descendants are found through /proc first, then SIGTERM, then SIGKILL after the grace.
    """
    family = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    _signal_all(family, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_seconds)
    family |= _descendants(proc.pid) if proc.poll() is None else set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    _signal_all(family, signal.SIGKILL)
    proc.wait()
    _wait_gone(family, timeout=_GONE_SECONDS)


def _signal_all(pids: set[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _parent_pids() -> dict[int, int]:
    """pid → parent pid of every process visible in /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry.name)] = int(fields[1])
    return parents


def _descendants(root: int) -> set[int]:
    parents = _parent_pids()
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def process_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: set[int], timeout: float) -> None:
    # Real time on purpose: this waits for the kernel to reap processes, not for a schedule.
    end = time.monotonic() + timeout
    while any(process_alive(pid) for pid in pids) and time.monotonic() < end:
        time.sleep(0.05)
