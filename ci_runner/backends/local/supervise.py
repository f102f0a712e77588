"""Running the launcher (horovodrun, or torchrun): start it as the leader of its own process
group, feed its output to the log until it ends, the job's ``timeout`` passes or a cancel comes,
and stop every rank then."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from ci_runner.backends.local.proctree import stop_process_tree
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome
from ci_runner.backends.timed_out import local_timeout_failure
from ci_runner.clock import Clock
from ci_runner.console import StatusOutput

_READ_CHUNK: Final = 65536
_POLL_SECONDS: Final = 1.0

# Starts argv in cwd with env, stdout and stderr on one pipe, as the leader of a new process group.
Launch = Callable[[Sequence[str], Path, Mapping[str, str]], "subprocess.Popen[bytes]"]


def launch_process(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str]
) -> subprocess.Popen[bytes]:
    """The real :data:`Launch`."""
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # one group to signal: horovodrun and whatever stays in it
    )


def supervise(
    proc: subprocess.Popen[bytes],
    *,
    sink: LogSink,
    console: StatusOutput,
    clock: Clock,
    timeout: int | None,
    cancelled: Callable[[], bool],
    grace_seconds: float,
    launcher: str = "horovodrun",
) -> tuple[Outcome, Failure | None]:
    """Follow ``proc`` (the ``launcher``: horovodrun or torchrun) to its end: how it ended, and
    why when it failed.

    Ctrl-C (KeyboardInterrupt) or ``cancelled()`` turning true stops every rank (CANCELLED);
    so does ``timeout`` seconds passing (FAILED). No rank outlives this call.
    """
    try:
        deadline = clock.monotonic() + timeout if timeout else None
        finished = pump(proc, sink, clock, deadline, cancelled)
    except (KeyboardInterrupt, Cancelled):
        console.status("interrupted: stopping every rank")
        stop_process_tree(proc, grace_seconds)
        sink.flush()
        console.status("every rank stopped")
        return Outcome.CANCELLED, Failure(
            FailureKind.CANCELLED, "stopped by Ctrl-C, SIGTERM or a cancel request"
        )
    except BaseException:  # e.g. the console went away: no rank may outlive ci-runner
        stop_process_tree(proc, grace_seconds)
        raise
    if not finished:
        console.status(f"timeout {timeout}s reached: stopping every rank")
        stop_process_tree(proc, grace_seconds)
        return Outcome.FAILED, local_timeout_failure(timeout)
    code = proc.wait()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # nothing left in its group may outlive the job
    if code == 0:
        return Outcome.SUCCEEDED, None
    return Outcome.FAILED, Failure(
        FailureKind.EXIT_CODE, f"{launcher} exited with code {code}", exit_code=code
    )


class Cancelled(Exception):
    """``cancelled()`` turned true while the ranks ran."""


def pump(
    proc: subprocess.Popen[bytes],
    sink: LogSink,
    clock: Clock,
    deadline: float | None,
    cancelled: Callable[[], bool],
) -> bool:
    """Feed ``proc``'s output to ``sink`` until it ends (True) or ``deadline`` passes (False);
    raise :class:`Cancelled` as soon as ``cancelled()`` says so (checked at least every second).
    """
    assert proc.stdout is not None  # launched with stdout=PIPE
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if cancelled():
                raise Cancelled
            wait = _POLL_SECONDS
            if deadline is not None:
                remaining = deadline - clock.monotonic()
                if remaining <= 0:
                    return False
                wait = min(wait, remaining)
            if not selector.select(wait):
                continue
            chunk = os.read(fd, _READ_CHUNK)
            if not chunk:
                return True
            sink.feed(chunk)
