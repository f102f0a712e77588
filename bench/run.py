"""``make bench``: every benchmark, then one table with each figure next to its target.

Usage (from the repository root)::

    .venv/bin/python -m bench.run [--quick] [--only NAME ...]

``--quick`` uses small sizes and few repeats (for development; its figures are not the ones
the targets are about). NAME is one of: startup, imports, logs, kube, report, cluster, scale.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import datetime, timezone

from bench.common import INFO, NOT_MET, Row, say

CRASHED = "benchmark failed"
# Name -> module with ``run(quick: bool) -> list[Row]``, in the README's order.
BENCHMARKS = {
    "startup": "bench.startup",
    "imports": "bench.imports",
    "logs": "bench.logs",
    "kube": "bench.kube_api",
    "report": "bench.report_size",
    "cluster": "bench.cluster_startup",
    "scale": "bench.scale",
}


def table(rows: Sequence[Row]) -> str:
    """The rows as a Markdown table (readable as plain text too)."""
    header = ("measurement", "figure", "value", "target", "result")
    cells = [header] + [(r.bench, r.figure, r.value, r.target, r.verdict) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    notes = [f"- {r.bench}, {r.figure}: {r.note}" for r in rows if r.note]
    return "\n".join(lines + (["", *notes] if notes else []))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these")
    args = parser.parse_args(argv)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    rows: list[Row] = []
    for name in args.only or list(BENCHMARKS):
        say(f"{name} ...")
        begun = time.monotonic()
        try:
            rows += importlib.import_module(BENCHMARKS[name]).run(args.quick)
        except Exception as error:  # one broken benchmark must not hide the others' figures
            traceback.print_exc()
            rows.append(
                Row(
                    name,
                    CRASHED,
                    type(error).__name__,
                    "",
                    NOT_MET,
                    str(error).splitlines()[0] if str(error) else "",
                )
            )
        say(f"{name}: done in {time.monotonic() - begun:.0f}s")
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    mode = " --quick" if args.quick else ""
    print(
        f"\nci-runner benchmarks{mode}, {when}, {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, took "
        f"{time.monotonic() - started:.0f}s, load average {load_before:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end\n"
    )
    print(table(rows))
    failed = [r for r in rows if r.verdict == NOT_MET and r.figure != CRASHED]
    print(f"\n{len(failed)} of {sum(r.verdict != INFO for r in rows)} targets NOT MET")
    # A target not met is a finding; a benchmark that could not run is an error.
    return 1 if any(r.figure == CRASHED for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
