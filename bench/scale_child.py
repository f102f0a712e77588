"""The CI job under measurement in :mod:`bench.scale`: ``ci-runner train`` in this process.

Run as a child of the benchmark (``python -m bench.scale_child RUSAGE_JSON``, in the training
repository with the CI job's environment) so that its CPU time and peak RSS are its own, not the
benchmark's, whose threads play the nodes and write the launcher's log. The CI log goes to
stdout as ``ci-runner train`` writes it; at the end this process's own resource usage
(``getrusage(RUSAGE_SELF)``) is written to ``RUSAGE_JSON``, then it exits with ci-runner's code.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

from ci_runner.cli import main


def usage() -> dict[str, float]:
    """CPU seconds (user, system) and peak RSS (bytes) of this process so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {"user": own.ru_utime, "system": own.ru_stime, "max_rss": own.ru_maxrss * 1024.0}


def run(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench.scale_child RUSAGE_JSON", file=sys.stderr)
        return 2
    code = main(["train"])
    sys.stdout.flush()
    Path(argv[0]).write_text(json.dumps(usage()))
    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
