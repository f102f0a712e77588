"""What the stand-in launchers (testing/fake_horovodrun.py, testing/fake_torchrun.py) share: the
record of their argv, every byte of a line written, and the ranks, each started in a session of
its own (like a launcher that is killed hard, they do not stop them on SIGTERM) with each line
of theirs relayed whole under one lock.

Standard library only: the launchers run as scripts, outside ci-runner's environment."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, BinaryIO

# A rank's stream: the prefix of each of its lines, and where they go.
Relay = tuple[bytes, BinaryIO]

_lock = threading.Lock()


def record_argv(variable: str, argv: list[str]) -> None:
    """Append ``argv`` (one JSON list a line) to the file ``$variable`` names, if set."""
    record = os.environ.get(variable)
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(json.dumps(argv) + "\n")


def write_all(out: BinaryIO, data: bytes) -> None:
    """Write every byte of ``data``: ci-runner gives the launcher PYTHONUNBUFFERED=1, which makes
    ``sys.stdout.buffer`` a raw FileIO, and a raw write to a pipe may write only part (seen here
    under load: 60 KB of a 530 KB line, the rest lost)."""
    view = memoryview(data)
    while view:
        written = out.write(view)
        view = view[written or 0 :]


def _relay(stream: IO[bytes], prefix: bytes, out: BinaryIO) -> None:
    for line in iter(stream.readline, b""):
        with _lock:
            write_all(out, prefix + line)
            out.flush()


def run_ranks(
    command: Sequence[str],
    environments: Sequence[Mapping[str, str]],
    relays: Callable[[int], tuple[Relay, Relay]],
) -> list[int]:
    """Start ``command`` once for each of ``environments`` (ranks 0, 1, ...), each in a session
    of its own, its stdout's and its stderr's lines relayed as ``relays(rank)`` says; the ranks'
    exit codes, once every line is relayed."""
    ranks, threads = [], []
    for rank, env in enumerate(environments):
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        ranks.append(proc)
        for stream, (prefix, out) in zip((proc.stdout, proc.stderr), relays(rank), strict=True):
            assert stream is not None
            thread = threading.Thread(target=_relay, args=(stream, prefix, out))
            thread.start()
            threads.append(thread)
    codes = [proc.wait() for proc in ranks]
    for thread in threads:
        thread.join()
    return codes
