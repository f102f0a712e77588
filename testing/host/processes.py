"""Ending a process a test cluster started."""

from __future__ import annotations

import subprocess


def end(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM a process we started, SIGKILL after ``grace`` seconds."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
