"""A stand-in for ``horovodrun`` in fast tests: same arguments, same ``[rank]<stdout>:`` prefixes.

Like the real launcher it starts every rank in a session of its own, and like a launcher that is
killed hard it does not stop its ranks on SIGTERM: ci-runner must find and stop them itself.
``--check-build`` prints ``$FAKE_HOROVOD_BUILD`` (default: a build with PyTorch and Gloo).
Each invocation's argv is appended (one JSON list a line) to ``$FAKE_HOROVODRUN_RECORD`` if set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if not __package__:  # run as a script, outside ci-runner's environment: testing/ is beside it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testing.fake_launcher import record_argv, run_ranks

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


def main(argv: list[str]) -> int:
    record_argv("FAKE_HOROVODRUN_RECORD", argv)
    if argv == ["--check-build"]:
        print(os.environ.get("FAKE_HOROVOD_BUILD", FULL_BUILD))
        return 0
    np, i = 1, 0
    while i < len(argv) and argv[i].startswith("-"):
        if argv[i] == "-np":
            np = int(argv[i + 1])
        i += 2 if argv[i] in _VALUED else 1
    command = argv[i:]
    out = sys.stdout.buffer
    codes = run_ranks(
        command,
        [{**os.environ, "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(np)} for rank in range(np)],
        lambda rank: ((f"[{rank}]<stdout>:".encode(), out), (f"[{rank}]<stderr>:".encode(), out)),
    )
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
