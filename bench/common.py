"""What every benchmark shares: the result row, medians, timers and the repository's paths."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The environment running the benchmarks (``make bench`` runs them with $(VENV)/bin/python).
VENV = Path(sys.prefix)
PYTHON = VENV / "bin" / "python"
MET = "met"
NOT_MET = "NOT MET"
INFO = "-"


@dataclass(frozen=True)
class Row:
    """One figure of the table: what was measured, the value, the target and the verdict."""

    bench: str  # e.g. "1 first step"
    figure: str
    value: str
    target: str = ""
    verdict: str = INFO  # MET, NOT_MET or INFO (a figure shown for context)
    note: str = ""


def check(ok: bool) -> str:
    return MET if ok else NOT_MET


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float], unit: str = "s", digits: int = 2) -> str:
    """``median (min–max, n=N)`` for a table cell."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f} {unit} (n=1)"
    return (
        f"{median(values):.{digits}f} {unit} "
        f"({min(values):.{digits}f}–{max(values):.{digits}f}, n={len(values)})"
    )


def timed(action: Callable[[], object]) -> float:
    """Wall seconds ``action`` took."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run_quiet(
    argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` capturing its output; raise with the output when it fails."""
    proc = subprocess.run(
        list(argv),
        env=None if env is None else dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv)} exited with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def child_json(argv: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, object]:
    """Run a helper that prints one JSON object as its last line of stdout; that object."""
    proc = run_quiet(argv, env)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def say(message: str) -> None:
    """Progress on stderr (the table goes to stdout)."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)
