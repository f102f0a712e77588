"""7. What ci-runner costs at scale: a 64-rank and a 256-rank job on the real control plane.

The control plane of the scripted cluster (``testing/scripted_cluster``: the real kube-apiserver,
controllers, scheduler and MPI Operator v0.8.2 of ``testing/control_plane``), its scripted kubelet
playing :data:`NODES` nodes with room for 256 workers and the launcher. ``ci-runner train`` runs as
an MR pipeline's CI job (``testing/mr_pipeline``: the fake GitLab for the comment, the account
of examples/rbac.yaml), as a child process (:mod:`bench.scale_child`) so its CPU and peak RSS are
its own; it talks to kube-apiserver through the scripted cluster's fault proxy, which counts its
requests and the watch events it receives.

Per size: ci-runner submits the MPIJob, the kubelet starts every worker, then the launcher, whose
log is generated at a training's rate: every :data:`STEP_SECONDS` each rank writes one line with its
loss, as ``mpirun --tag-output`` prefixes it (``[1,17]<stdout>:step 42 loss 0.731``). After
:data:`WARM_UP` seconds of that, the CI job's CPU (utime + stime from ``/proc/<pid>/stat``) is read,
and again after the window (:data:`WINDOW` seconds, ``--quick``: :data:`QUICK_WINDOW`): CPU per
training hour is the window's CPU times 3600 / the window's seconds. Then the launcher exits 0: the
time from its Succeeded status to the process's exit, the requests of the whole job, the peak RSS
(``getrusage`` in the child at its end), the comment (its size; every chart's size, drawn by the
real Mermaid 10.7 GitLab ships in headless Chromium, ``testing/mermaid``), and the metrics parse of
the saved log timed against ``grep -E -c`` of the same lines.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from bench.common import INFO, REPO, Row, check, say
from ci_runner.config.quantity import binary_quantity, quantity_value
from ci_runner.config.types import DISK

if TYPE_CHECKING:
    from testing.node_objects import NodeSpec

NAME = "7 scale"
SIZES = (64, 256)
QUICK_SIZES = (8, 32)
STEP_SECONDS = 1.0  # each rank logs one line a step, a step a second
WARM_UP = 15.0  # seconds of log before the CPU window opens
WINDOW = 150.0
QUICK_WINDOW = 20.0
NODES = 4
PODS_PER_NODE = 110  # the kubelet's default maxPods
HOUR = 3600.0
# Targets (issue 37).
MAX_CPU_PER_HOUR = 36.0  # 1% of a core
MAX_RSS = 150e6
RSS_FLAT = 0.20  # 64 -> 256 ranks within ±20%
MAX_REQUESTS = 40
MAX_EXIT_SECONDS = 2.0
MAX_COMMENT_BYTES = 50_000
MAX_CHART_CHARS = 2000
WAIT = 300.0  # real seconds for a step of the cluster or the CI job
TICK = os.sysconf("SC_CLK_TCK")
PATTERN = r"step (?P<step>\d+) loss (?P<value>[0-9.]+)"
GREP_PATTERN = r"step [0-9]+ loss [0-9.]+"
CHART = re.compile(r"```mermaid\n(.*?)```", re.DOTALL)
TRAIN_YAML = """\
name: scale
image: horovod/horovod:0.28.1
command: python train.py
workers: {workers}
slots_per_worker: 1
resources: {{cpu: 100m, memory: 128Mi, setup: none, launcher: {{cpu: 100m, memory: 128Mi}}}}
metrics:
  loss:
    pattern: '{pattern}'
    goal: min
kubernetes:
  namespace: {namespace}
"""


@dataclass
class Run:
    """What one size's CI job cost."""

    ranks: int
    window_cpu: float  # CPU seconds of the CI job over the window
    window_seconds: float
    window_lines: int
    cpu: float  # CPU seconds of the whole job
    max_rss: float  # bytes
    requests: dict[str, int]
    watch_events: int
    exit_seconds: float
    comment: str
    log: Path
    wall: float

    @property
    def cpu_per_hour(self) -> float:
        return self.window_cpu * HOUR / self.window_seconds

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())


def why_not_here() -> str | None:
    """Why the scripted cluster or the Mermaid drawing cannot run on this machine, or None."""
    from testing.control_plane import binaries
    from testing.mermaid.browser import missing_tools

    if os.geteuid() != 0:
        return "needs root (the control plane runs in a network namespace and a cgroup)"
    if not binaries.built():
        return "the control-plane binaries are not built (make control-plane)"
    return missing_tools()


def cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def log_line(rank: int, step: int) -> str:
    """Rank ``rank``'s line at ``step``, as Horovod's mpirun --tag-output prints it: a loss that
    falls with the steps, a little different on each rank."""
    loss = 2.0 * math.exp(-step / 400) + 0.05 * math.sin(rank * 0.7 + step * 0.1) + 0.1
    return f"[1,{rank}]<stdout>:step {step} loss {loss:.6f}"


class CiJob:
    """The child process and its CI log, read on a thread (lines counted, the rest dropped)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines = 0
        self.kept: list[str] = []  # ci-runner's own lines
        self.kept_at: list[float] = []  # when each came (monotonic)
        self.last = ""
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._cond:
                self.lines += 1
                self.last = line.rstrip("\n")
                if not line.startswith("[1,"):
                    self.kept.append(self.last)
                    self.kept_at.append(time.monotonic())
                self._cond.notify_all()

    def wait_for(self, wanted: str) -> None:
        """Until a line starting with ``wanted`` was printed."""

        def seen() -> bool:
            return self.last.startswith(wanted) or any(k.startswith(wanted) for k in self.kept)

        with self._cond:
            if not self._cond.wait_for(seen, timeout=WAIT):
                tail = "\n".join(self.kept[-30:])
                raise RuntimeError(f"the CI job never printed {wanted!r}; its lines:\n{tail}")

    def join(self) -> None:
        self._thread.join(timeout=WAIT)


def one_size(scripted: object, work: Path, ranks: int, window: float) -> Run:
    """One CI job of ``ranks`` ranks on the scripted cluster; what it cost."""
    from testing.backend_harness import cluster_on
    from testing.control_plane import accounts
    from testing.git import run_git
    from testing.mr_pipeline import mr_pipeline
    from testing.scripted_cluster.cluster import ScriptedCluster

    assert isinstance(scripted, ScriptedCluster)
    with cluster_on(scripted, work) as cluster:
        repo = work / "repo"
        repo.mkdir()
        text = TRAIN_YAML.format(workers=ranks, pattern=PATTERN, namespace=cluster.namespace)
        (repo / "train.yaml").write_text(text)
        (repo / "train.py").write_text("print('training')\n")
        run_git(["init", "-q", "-b", "main"], repo)
        run_git(["add", "-A"], repo)
        run_git(["commit", "-q", "-m", f"{ranks} ranks"], repo)
        sha = run_git(["rev-parse", "HEAD"], repo)
        with mr_pipeline(work, repo, sha, cluster) as pipe:
            kubeconfig = work / "kubeconfig-proxy"
            config = accounts.kubeconfig(
                cluster.api.url, cluster.plane.ca, cluster.token, cluster.namespace
            )
            kubeconfig.write_text(yaml.safe_dump(config))
            env = {**pipe.env, "KUBECONFIG": str(kubeconfig), "PYTHONPATH": str(REPO)}
            usage_file = work / "usage.json"
            started = time.monotonic()
            process = subprocess.Popen(
                [sys.executable, "-m", "bench.scale_child", str(usage_file)],
                cwd=repo,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
            )
            ci = CiJob(process)
            try:
                run = _drive(pipe, cluster, ci, ranks, window)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
            usage = json.loads(usage_file.read_text())
            run.cpu = usage["user"] + usage["system"]
            run.max_rss = usage["max_rss"]
            run.wall = time.monotonic() - started
            run.requests = cluster.api.counts()
            run.watch_events = cluster.api.watch_events
            notes = pipe.notes()
            if not notes:
                raise RuntimeError("the CI job posted no comment")
            run.comment = notes[0]
            run.log = work / "train.log"
            (repo / "ci-runner-out" / "train.log").rename(run.log)
            return run


def _drive(pipe: object, cluster: object, ci: CiJob, ranks: int, window: float) -> Run:
    """The nodes' part: workers, launcher, its log at the rate; the CI job's CPU over the
    window and its time from the launcher's end to its exit."""
    job = pipe.submitted_job(timeout=WAIT)  # type: ignore[attr-defined]
    ci.wait_for(f"[ci-runner] submitted MPIJob {job.name}")
    say(f"  {ranks} ranks: starting the workers")
    job.workers_running()
    ci.wait_for(f"[ci-runner] workers ready {ranks}/{ranks}")
    job.launcher_running()
    ci.wait_for("[ci-runner] launcher running")
    pod = job.launcher_pod
    container = job._main(pod)
    kubelet = cluster.kubelet  # type: ignore[attr-defined]
    namespace = cluster.namespace  # type: ignore[attr-defined]
    pid = ci.process.pid
    say(f"  {ranks} ranks: the launcher logs {ranks} lines every {STEP_SECONDS:.0f} s")
    began = time.monotonic()
    opened = closed = None
    cpu_open = cpu_close = 0.0
    lines_open = lines_close = 0
    step = 0
    while True:
        due = began + step * STEP_SECONDS
        now = time.monotonic()
        if now < due:
            time.sleep(due - now)
        now = time.monotonic()
        if opened is None and now - began >= WARM_UP:
            opened, cpu_open, lines_open = now, cpu_seconds(pid), ci.lines
        if opened is not None and now - opened >= window:
            closed, cpu_close, lines_close = now, cpu_seconds(pid), ci.lines
            break
        lines = tuple(log_line(rank, step) for rank in range(ranks))
        kubelet.log(namespace, pod, container, lines, at=time.time_ns())
        step += 1
    ci.wait_for(log_line(ranks - 1, step - 1))
    job.launcher_exits(0)
    ended = time.monotonic()
    code = ci.process.wait(timeout=WAIT)
    exit_seconds = time.monotonic() - ended
    ci.join()
    for at, line in zip(ci.kept_at, ci.kept, strict=True):
        if at >= ended:  # where the time to exit goes
            say(f"  +{at - ended:.2f} s {line[:100]}")
    if code != 0:
        tail = "\n".join(ci.kept[-30:])
        raise RuntimeError(f"ci-runner train exited with {code}:\n{tail}")
    assert opened is not None and closed is not None
    return Run(
        ranks=ranks,
        window_cpu=cpu_close - cpu_open,
        window_seconds=closed - opened,
        window_lines=lines_close - lines_open,
        cpu=0.0,
        max_rss=0.0,
        requests={},
        watch_events=0,
        exit_seconds=exit_seconds,
        comment="",
        log=Path(),
        wall=0.0,
    )


def node_specs() -> list[NodeSpec]:
    """:data:`NODES` nodes, each with room for :data:`PODS_PER_NODE` of the job's workers, so that
    pods per node is the only limit. The workers ask for ci-runner's default disk (``DISK`` of
    ephemeral-storage, as a job that sets none does): with NodeSpec's default of 500Gi a node
    held 25 of them, the 4 nodes 100, and worker 100 of 256 was never scheduled."""
    from testing.node_objects import NodeSpec

    disk = binary_quantity(PODS_PER_NODE * int(quantity_value(DISK)))
    return [
        NodeSpec(f"node-{i}", cpu="64", memory="512Gi", disk=disk, gpus=0, pods=PODS_PER_NODE)
        for i in range(1, NODES + 1)
    ]


@contextmanager
def scripted_cluster(state: Path) -> Iterator[object]:
    """The scripted cluster with the nodes of :func:`node_specs`."""
    from testing.scripted_cluster.cluster import ScriptedCluster

    scripted = ScriptedCluster(state, node_specs()).start()
    try:
        yield scripted
    finally:
        scripted.stop()


def drawn(sources: list[str], work: Path) -> list[str | None]:
    """Each chart drawn by GitLab's Mermaid (10.7) in headless Chromium: None, or why not."""
    from testing.mermaid.browser import GITLAB_MERMAID, probe

    return [d.error for d in probe(sources, GITLAB_MERMAID, "neutral", work / "mermaid")]


def parse_against_grep(log: Path) -> tuple[float, float, int, int]:
    """(parse seconds, grep seconds, points parsed, lines grep counted) over the saved log."""
    from ci_runner.config.types import MetricSpec
    from ci_runner.results.metrics import parse_log_file

    spec = MetricSpec(name="loss", pattern=re.compile(PATTERN), goal="min")
    started = time.perf_counter()
    summary = parse_log_file(log, [spec])
    parse = time.perf_counter() - started
    started = time.perf_counter()
    grep = subprocess.run(
        ["grep", "-E", "-c", GREP_PATTERN, str(log)], capture_output=True, text=True, check=True
    )
    grep_seconds = time.perf_counter() - started
    metric = summary.get("loss")
    return parse, grep_seconds, metric.count if metric else 0, int(grep.stdout)


def _rows(runs: list[Run], work: Path) -> list[Row]:
    rows: list[Row] = []
    small, large = runs[0], runs[-1]
    for run in runs:
        n = f"{run.ranks} ranks"
        rows.append(
            Row(
                NAME,
                f"{n}: CI job CPU per training hour",
                f"{run.cpu_per_hour:.1f} s ({run.window_cpu:.2f} s over "
                f"{run.window_seconds:.0f} s, {run.window_lines:,} log lines)",
                f"<= {MAX_CPU_PER_HOUR:.0f} s",
                check(run.cpu_per_hour <= MAX_CPU_PER_HOUR),
            )
        )
        rows.append(
            Row(NAME, f"{n}: CI job CPU, whole job", f"{run.cpu:.1f} s in {run.wall:.0f} s")
        )
        rows.append(Row(NAME, f"{n}: CI job peak RSS", f"{run.max_rss / 1e6:.0f} MB"))
        top = sorted(run.requests.items(), key=lambda item: -item[1])
        rows.append(
            Row(
                NAME,
                f"{n}: Kubernetes API requests, whole job",
                f"{run.total_requests} ({', '.join(f'{k} {v}' for k, v in top)})",
                f"<= {MAX_REQUESTS}",
                check(run.total_requests <= MAX_REQUESTS),
            )
        )
        rows.append(Row(NAME, f"{n}: watch events received", f"{run.watch_events:,}"))
        rows.append(
            Row(
                NAME,
                f"{n}: launcher Succeeded -> exit",
                f"{run.exit_seconds:.2f} s",
                f"<= {MAX_EXIT_SECONDS:.0f} s",
                check(run.exit_seconds <= MAX_EXIT_SECONDS),
            )
        )
    rows.append(
        Row(
            NAME,
            f"peak RSS at {large.ranks} ranks",
            f"{large.max_rss / 1e6:.0f} MB",
            f"<= {MAX_RSS / 1e6:.0f} MB",
            check(large.max_rss <= MAX_RSS),
        )
    )
    change = large.max_rss / small.max_rss - 1
    rows.append(
        Row(
            NAME,
            f"peak RSS {small.ranks} -> {large.ranks} ranks",
            f"{change:+.0%}",
            f"within ±{RSS_FLAT:.0%}",
            check(abs(change) <= RSS_FLAT),
        )
    )
    size = len(large.comment.encode())
    rows.append(
        Row(
            NAME,
            f"comment at {large.ranks} ranks",
            f"{size / 1000:.1f} KB",
            f"<= {MAX_COMMENT_BYTES // 1000} KB",
            check(size <= MAX_COMMENT_BYTES),
        )
    )
    sources = CHART.findall(large.comment)
    errors = drawn(sources, work) if sources else []
    longest = max((len(s) for s in sources), default=0)
    lines = [re.findall(r'^line "([^"]*)"', s, re.MULTILINE) for s in sources]
    rows.append(
        Row(
            NAME,
            f"charts at {large.ranks} ranks: longest, drawn by Mermaid 10.7",
            f"{len(sources)} chart(s), {longest:,} chars, "
            + (", ".join(e for e in errors if e) or "all drawn"),
            f"<= {MAX_CHART_CHARS:,} chars, drawn",
            check(bool(sources) and longest <= MAX_CHART_CHARS and not any(errors)),
        )
    )
    rows.append(
        Row(
            NAME,
            f"chart lines at {large.ranks} ranks",
            "; ".join(", ".join(names) for names in lines) or "no chart",
            "a band and the mean",
            check(
                bool(lines)
                and all(names == ["lowest rank", "highest rank", "mean"] for names in lines)
            ),
        )
    )
    parse, grep, points, counted = parse_against_grep(large.log)
    megabytes = large.log.stat().st_size / 1e6
    rows.append(
        Row(
            NAME,
            f"metrics parse of the {large.ranks}-rank log ({megabytes:.1f} MB)",
            f"{parse:.3f} s, {points:,} points; grep -E -c {grep:.3f} s, {counted:,} lines: "
            f"{parse / grep:.1f}x grep",
            "",
            INFO if points == counted else check(False),
            "" if points == counted else "the parser and grep disagree on the points",
        )
    )
    return rows


def run(quick: bool) -> list[Row]:
    problem = why_not_here()
    if problem is not None:
        return [Row(NAME, "skipped", problem)]
    sizes = QUICK_SIZES if quick else SIZES
    window = QUICK_WINDOW if quick else WINDOW
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="ci-runner-bench-scale-") as tmp:
        work = Path(tmp)
        say(f"starting the control plane and {NODES} scripted nodes")
        with scripted_cluster(work / "state") as scripted:
            for ranks in sizes:
                say(f"{ranks} ranks: ci-runner train, {window:.0f} s window")
                place = work / f"ranks-{ranks}"
                place.mkdir()
                runs.append(one_size(scripted, place, ranks, window))
        return _rows(runs, work)
