"""Child process of bench 3: one log through the log saver and the metrics parser, as a backend
and the report step do it, then its own timings and peak RSS as one JSON line.

Usage: python -m bench.log_worker LOG OUT_DIR
  LOG      a horovodrun-style log (bench.logs writes one)
  OUT_DIR  where the LogSink saves its copy

The log is read in the local backend's pipe-sized chunks (64 KiB) and fed to a
:class:`~ci_runner.backends.logsink.LogSink` whose echo (the CI log) is a buffered write to
/dev/null; then :func:`~ci_runner.results.metrics.parse_log_file` reads the saved copy with the
example's metrics.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

from bench.logs import CHUNK, SPECS, TOKEN
from ci_runner.backends.logsink import LogSink
from ci_runner.masking import SecretMasker
from ci_runner.results.metrics import parse_log_file


def peak_rss() -> int:
    """This process's peak resident set size in bytes.

    Linux's ``VmHWM``: ``ru_maxrss`` would also count the parent's size at the fork, which
    lingers through the exec.
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) * 1024


def main(argv: list[str]) -> int:
    log, out_dir = Path(argv[1]), Path(argv[2])
    saved = out_dir / "saved.log"
    with open(os.devnull, "w", encoding="utf-8") as ci_log:

        def echo(text: str) -> None:
            ci_log.write(text)

        started = time.perf_counter()
        with LogSink(saved, echo, SecretMasker([TOKEN])) as sink, log.open("rb") as src:
            while chunk := src.read(CHUNK):
                sink.feed(chunk)
        sink_seconds = time.perf_counter() - started
    started = time.perf_counter()
    summary = parse_log_file(saved, SPECS)
    parse_seconds = time.perf_counter() - started
    train = summary.get("train_loss")
    print(
        json.dumps(
            {
                "sink_seconds": sink_seconds,
                "parse_seconds": parse_seconds,
                "peak_rss_bytes": peak_rss(),
                "lines": summary.lines,
                "points": train.count if train else 0,
                "saved_bytes": saved.stat().st_size,
            }
        )
    )
    saved.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
