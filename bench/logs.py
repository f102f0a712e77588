"""3. Log throughput and memory.

Generated horovodrun-style logs (8 ranks interleaved) of 1 GiB and of 100 MiB go through the log
saver and the metrics parser in a child process (:mod:`bench.log_worker`). Two kinds: the
example's own output, where every line is a loss line (the worst case: a metric point a line),
and a chatty one, where a loss line comes after 19 lines of progress bars and library output.
Targets: the time within 4x of ``grep -E -c`` with the metric patterns on the same file; the
child's peak RSS under 100 MB, and the same (+-20%) for both sizes. The logs live in a
temporary directory, deleted afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from bench.common import PYTHON, REPO, Row, check, child_json, median, say, spread, timed
from ci_runner.config.types import MetricSpec

NAME = "3 log throughput"
GIB = 1 << 30
MIB = 1 << 20
RANKS = 8
CHUNK = 64 * 1024  # what the local backend reads from horovodrun's pipe at a time
MAX_RATIO = 4.0
MAX_RSS = 100_000_000
RSS_TOLERANCE = 0.20
TOKEN = "glcbt-64-bench-job-token"  # a secret the sink masks (the CI job token, in the cluster)
# The example's train.yaml metrics.
TRAIN = r"Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)"
TEST = r"Testing\. MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)"
SPECS = (MetricSpec("train_loss", re.compile(TRAIN)), MetricSpec("test_loss", re.compile(TEST)))


def extended_regex(pattern: str) -> str:
    """A Python metric pattern as POSIX ERE for grep (named groups and ``\\d`` rewritten)."""
    return re.sub(r"\(\?P<\w+>", "(", pattern).replace(r"\d", "[0-9]")


GREP_PATTERN = f"{extended_regex(TRAIN)}|{extended_regex(TEST)}"
# Between two loss lines of a rank in the chatty log: what training libraries print.
CHATTER = (
    "[{r}]<stderr>:{p:3d}%|##########          | {p}/100 [00:{s:02d}<00:30, 3.21it/s, lr=0.001]",
    "[{r}]<stdout>:batch {p}: 64 samples, data loading 0.{s:03d}s, compute 0.{p:03d}s",
    "[{r}]<stderr>:[{s}] Gloo connectFullMesh: rank {r} connected to all peers",
    "[{r}]<stderr>:/opt/conda/lib/python3.11/site-packages/torch/nn/modules/loss.py:{p}: "
    "UserWarning: Using a target size that is different to the input size.",
)
LOG_KINDS = {"every line a metric": 1, "chatty, 1 line in 20 a metric": 20}


def generate_log(path: Path, size: int, metric_every: int = 1) -> int:
    """Write about ``size`` bytes of horovodrun output to ``path``; the lines written.

    Every epoch each rank prints its loss line (the order of the ranks varies, as it does when
    processes race), after ``metric_every - 1`` lines of other output; every 50th epoch rank 0
    also prints a warning on stderr.
    """
    lines = 0
    written = 0
    step = 0
    with path.open("w", encoding="utf-8") as out:
        while written < size:
            block: list[str] = []
            for _ in range(max(1000 // metric_every, 1)):
                shift = step % RANKS
                for i in range(RANKS):
                    rank = (i + shift) % RANKS
                    loss = 1000.0 / (step + 1) + rank + (step * 7919 + rank) % 97 / 97
                    for n in range(metric_every - 1):
                        chatter = CHATTER[n % len(CHATTER)]
                        block.append(chatter.format(r=rank, p=n % 100, s=step % 60) + "\n")
                    block.append(
                        f"[{rank}]<stdout>:Training. Epoch {step}, MSE loss: {loss!r}, "
                        f"Worker: {rank}\n"
                    )
                if step % 50 == 0:
                    block.append(
                        "[0]<stderr>:/usr/lib/python3/site-packages/torch/optim/lr_scheduler.py"
                        ":149: UserWarning: Detected call of `lr_scheduler.step()` before "
                        "`optimizer.step()`.\n"
                    )
                step += 1
            text = "".join(block)
            out.write(text)
            written += len(text)
            lines += len(block)
        out.write(
            "".join(f"[{r}]<stdout>:Testing. MSE loss: 219.68, Worker: {r}\n" for r in range(RANKS))
        )
    return lines + RANKS


def grep_count(path: Path) -> int:
    proc = subprocess.run(
        ["grep", "-E", "-c", GREP_PATTERN, str(path)], capture_output=True, text=True, check=True
    )
    return int(proc.stdout)


def measure(
    path: Path, work: Path, our_runs: int, grep_runs: int = 3
) -> tuple[list[float], list[dict[str, float]]]:
    """Interleaved runs of grep and of the worker on ``path``: their seconds, its reports."""
    grep_seconds: list[float] = []
    runs: list[dict[str, float]] = []
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [str(PYTHON), "-m", "bench.log_worker", str(path), str(work)]
    for i in range(max(our_runs, grep_runs)):
        if i < grep_runs:
            grep_seconds.append(timed(lambda: grep_count(path)))
        if i < our_runs:
            result = child_json(argv, env)
            runs.append({key: float(value) for key, value in result.items()})  # type: ignore[arg-type]
    return grep_seconds, runs


def run(quick: bool) -> list[Row]:
    sizes = (10 * MIB, 100 * MIB) if quick else (100 * MIB, GIB)
    # Over 1 GiB one run (the throughput does not depend on the size, so the two ratios
    # agree), three of the 100 MiB log; grep runs beside each.
    repeats = {sizes[0]: 3, sizes[1]: 1}
    rows: list[Row] = []
    peaks: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="ci-runner-bench-logs-") as tmp:
        work = Path(tmp)
        for kind, metric_every in LOG_KINDS.items():
            for size in sizes:
                label = f"{size // GIB} GiB" if size >= GIB else f"{size // MIB} MiB"
                log = work / "horovodrun.log"
                say(f"generating a {label} log, {kind}")
                generate_log(log, size, metric_every)
                first = size == sizes[0] and metric_every == 1
                measured, peak = _measure_log(log, work, f"{label}, {kind}", repeats[size], first)
                rows += measured
                if metric_every == 1:
                    peaks[size] = peak
                log.unlink()
    small, large = (peaks[s] for s in sizes)
    change = large / small - 1
    rows.append(
        Row(
            NAME,
            "peak RSS, large vs small log",
            f"{change:+.1%}",
            f"within ±{RSS_TOLERANCE:.0%}",
            check(abs(change) <= RSS_TOLERANCE),
        )
    )
    return rows


def _measure_log(
    log: Path, work: Path, label: str, repeats: int, show_pattern: bool
) -> tuple[list[Row], float]:
    """The rows of one log, and the median peak RSS."""
    actual = log.stat().st_size
    grep_count(log)  # the file in the page cache for everyone
    say(f"{label}: grep 3 times, log saver + parser {repeats} times")
    grep_seconds, runs = measure(log, work, repeats)
    expected = grep_count(log)
    points = int(runs[0]["points"]) + RANKS  # + the test_loss lines
    if points != expected:
        raise RuntimeError(f"the parser found {points} metric lines, grep {expected}")
    ours = [r["sink_seconds"] + r["parse_seconds"] for r in runs]
    sink = [r["sink_seconds"] for r in runs]
    parse = [r["parse_seconds"] for r in runs]
    peak = median([r["peak_rss_bytes"] for r in runs])
    ratio = median(ours) / median(grep_seconds)
    mb = actual / 1e6
    rows = [
        Row(
            NAME,
            f"{label}: `grep -E -c`",
            spread(grep_seconds),
            note=f"grep -E -c '{GREP_PATTERN}'" if show_pattern else "",
        ),
        Row(NAME, f"{label}: log saver (LogSink)", f"{spread(sink)}, {mb / median(sink):.0f} MB/s"),
        Row(
            NAME,
            f"{label}: metrics parser",
            f"{spread(parse)}, {mb / median(parse):.0f} MB/s, "
            f"{int(runs[0]['lines']):,} lines, {points:,} points",
        ),
        Row(
            NAME,
            f"{label}: (saver + parser) / grep",
            f"{ratio:.1f}x",
            f"<= {MAX_RATIO:.0f}x",
            check(ratio <= MAX_RATIO),
        ),
        Row(
            NAME,
            f"{label}: peak RSS",
            f"{peak / 1e6:.1f} MB",
            f"< {MAX_RSS // 10**6} MB",
            check(peak < MAX_RSS),
        ),
    ]
    return rows, peak
