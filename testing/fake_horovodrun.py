"""A stand-in for ``horovodrun`` in fast tests: same arguments, same ``[rank]<stdout>:`` prefixes.

Like the real launcher it starts every rank in a session of its own, and like a launcher that is
killed hard it does not stop its ranks on SIGTERM: ci-runner must find and stop them itself.
``--check-build`` prints ``$FAKE_HOROVOD_BUILD`` (default: a build with PyTorch and Gloo).
Each invocation's argv is appended (one JSON list a line) to ``$FAKE_HOROVODRUN_RECORD`` if set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import IO

FULL_BUILD = """Horovod v0.28.1:

Available Frameworks:
    [ ] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [ ] MPI
    [X] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [ ] MPI
    [X] Gloo
"""

_VALUED = {"-np", "-H", "--min-np", "--max-np", "--host-discovery-script", "-p"}
_lock = threading.Lock()


def _relay(stream: IO[bytes], rank: int, name: str) -> None:
    for line in iter(stream.readline, b""):
        with _lock:
            _write_all(f"[{rank}]<{name}>:".encode() + line)
            sys.stdout.buffer.flush()


def _write_all(data: bytes) -> None:
    """Write every byte of ``data``: ci-runner gives horovodrun PYTHONUNBUFFERED=1, which makes
    ``sys.stdout.buffer`` a raw FileIO, and a raw write to a pipe may write only part (seen here
    under load: 60 KB of a 530 KB line, the rest lost)."""
    view = memoryview(data)
    while view:
        written = sys.stdout.buffer.write(view)
        view = view[written or 0 :]


def main(argv: list[str]) -> int:
    record = os.environ.get("FAKE_HOROVODRUN_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(json.dumps(argv) + "\n")
    if argv == ["--check-build"]:
        print(os.environ.get("FAKE_HOROVOD_BUILD", FULL_BUILD))
        return 0
    np, i = 1, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "-np":
            np = int(argv[i + 1])
        i += 2 if argv[i] in _VALUED else 1
    command = argv[i:]
    ranks = []
    threads = []
    for rank in range(np):
        env = {**os.environ, "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(np)}
        proc = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        ranks.append(proc)
        for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            assert stream is not None
            thread = threading.Thread(target=_relay, args=(stream, rank, name))
            thread.start()
            threads.append(thread)
    codes = [proc.wait() for proc in ranks]
    for thread in threads:
        thread.join()
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
