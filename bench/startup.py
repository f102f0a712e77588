"""1. Time to first training step, locally, for the example (examples/simple_ml).

From starting the command to the first ``Training. Epoch N, MSE loss`` line on its output:

* ``ci-runner train --local`` cold: an empty cache directory (no requirements virtualenv, no
  worktree, Horovod's build not yet checked), as on a machine's first run;
* ``ci-runner train --local`` warm: the same cache again (what every later run costs);
* plain ``horovodrun -np 2 -H localhost:2 --gloo python examples/simple_ml/main_with_horovod.py``
  in the ready environment (.venv with torch, Horovod and the example's libraries);
* the seed's way: ``git clone``, a new virtualenv, ``pip install -r requirements.txt`` into it
  (no pip cache, as in a fresh container; pip's configured local mirrors), the launcher's fixed
  ``sleep 1m`` counted (not slept), then horovodrun's own time to the first step, the plain
  figure of the same round.

Every variant trains the same committed example repository (bench.fixture) with ``EPOCHS=2``
on the same local copy of the data; rounds interleave the variants. Targets: warm at most 20%
over plain horovodrun; warm at least 10x faster than the seed's way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from bench.common import PYTHON, REPO, VENV, Row, check, median, run_quiet, say, spread, timed
from bench.fixture import CONFIG, EXAMPLE, example_repo

NAME = "1 first step"
FIRST_STEP = re.compile(rb"Training\. Epoch \d+, MSE loss: ")
SEED_SLEEP = 60.0
MAX_OVERHEAD = 0.20
MIN_SPEEDUP = 10.0
RUN_TIMEOUT = 600.0
LAUNCH_MARKER = b"[ci-runner] starting "  # the status line just before horovodrun starts


def ensure_horovod() -> None:
    """Horovod with PyTorch + Gloo in the venv: the project's set-up script (idempotent)."""
    if (VENV / "bin" / "horovodrun").is_file() and (VENV / ".ci-runner-horovod-check").is_file():
        return
    say("Horovod is not installed: running scripts/setup-horovod.sh (builds it once)")
    subprocess.run([str(REPO / "scripts" / "setup-horovod.sh"), str(VENV)], check=True, cwd=REPO)


def time_to_first_step(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], launch_marker: bytes | None = None
) -> tuple[float, float | None]:
    """Seconds from starting ``argv`` to its first loss line, and to the first line on stderr
    containing ``launch_marker``; the run must then succeed."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stderr is not None
    errors: list[bytes] = []
    launched: list[float] = []

    def read_errors(stream: IO[bytes]) -> None:
        for line in stream:
            if launch_marker is not None and not launched and launch_marker in line:
                launched.append(time.perf_counter() - started)
            errors.append(line)

    reader = threading.Thread(target=read_errors, args=(proc.stderr,), daemon=True)
    reader.start()
    first: float | None = None
    output: list[bytes] = []
    for line in proc.stdout:
        if first is None and FIRST_STEP.search(line):
            first = time.perf_counter() - started
        output.append(line)
    code = proc.wait(timeout=RUN_TIMEOUT)
    reader.join(timeout=RUN_TIMEOUT)
    if code != 0 or first is None:
        raise RuntimeError(
            f"{' '.join(argv)} exited with {code} (first loss line: {first}):\n"
            f"{b''.join(output[-30:]).decode(errors='replace')}\n"
            f"{b''.join(errors[-30:]).decode(errors='replace')}"
        )
    return first, launched[0] if launched else None


class Setup:
    """The example repository, its data and the environments of one benchmark run."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.repo = example_repo(work / "project")
        self.data = work / "data"
        run_quiet(
            [str(PYTHON), str(REPO / EXAMPLE / "prepare_data.py"), self.data.as_uri()],
            cwd=REPO / EXAMPLE,
        )
        self.runs = 0

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CI_")}
        env.update(EPOCHS="2", PYTHONUNBUFFERED="1", **extra)
        return env

    def fresh(self, name: str) -> Path:
        self.runs += 1
        path = self.work / f"{name}-{self.runs}"
        path.mkdir()
        return path

    def ci_runner(self, cache: Path) -> tuple[float, float | None]:
        """(seconds to the first loss line, seconds until ci-runner starts horovodrun)"""
        out = self.fresh("out")
        argv = [
            str(VENV / "bin" / "ci-runner"),
            "train",
            "--local",
            "--config",
            CONFIG,
            "--data",
            self.data.as_uri(),
            "--outputs",
            out.as_uri(),
        ]
        env = self.env(CI_RUNNER_CACHE=str(cache))
        return time_to_first_step(argv, self.repo, env, LAUNCH_MARKER)

    def horovodrun(self, repo: Path | None = None) -> float:
        out = self.fresh("out")
        argv = [
            str(VENV / "bin" / "horovodrun"),
            "-np",
            "2",
            "-H",
            "localhost:2",
            "--gloo",
            "python",
            f"{EXAMPLE}/main_with_horovod.py",
        ]
        env = self.env(
            DATA_URI=self.data.as_uri(),
            OUTPUT_URI=out.as_uri(),
            PATH=f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        )
        return time_to_first_step(argv, repo or self.repo, env)[0]

    def seed_install(self) -> float:
        """The seed's set-up before horovodrun: clone, new virtualenv, pip install."""
        place = self.fresh("seed")
        clone, venv = place / "simple_ml", place / "venv"

        def install() -> None:
            run_quiet(["git", "clone", "-q", str(self.repo), str(clone)])
            run_quiet([str(PYTHON), "-m", "venv", str(venv)])
            run_quiet(
                [
                    str(venv / "bin" / "python"),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "-r",
                    str(clone / EXAMPLE / "requirements.txt"),
                ]
            )

        seconds = timed(install)
        shutil.rmtree(place)
        return seconds


def run(quick: bool) -> list[Row]:
    ensure_horovod()
    # Cold runs and the seed's installs take half a minute each: fewer of them.
    rounds, fewer = (2, 1) if quick else (5, 3)
    times: dict[str, list[float]] = {"plain": [], "warm": [], "cold": [], "seed": []}
    installs: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ci-runner-bench-start-") as tmp:
        setup = Setup(Path(tmp))
        warm_cache = setup.fresh("cache-warm")
        say("priming the warm cache (one ci-runner train --local run, not counted)")
        setup.ci_runner(warm_cache)
        launches: list[float] = []
        for i in range(rounds):
            say(
                f"round {i + 1} of {rounds}: plain horovodrun, warm"
                + (", cold, the seed's way" if i < fewer else "")
            )
            plain = setup.horovodrun()
            times["plain"].append(plain)
            warm, launch = setup.ci_runner(warm_cache)
            times["warm"].append(warm)
            if launch is not None:
                launches.append(launch)
            if i < fewer:
                times["cold"].append(setup.ci_runner(setup.fresh("cache-cold"))[0])
                install = setup.seed_install()
                installs.append(install)
                times["seed"].append(install + SEED_SLEEP + plain)
    plain, warm = median(times["plain"]), median(times["warm"])
    # The load of a shared machine drifts: each ratio is also taken within a round (the
    # variants run back to back) and the median of those decides, shown beside the ratio of
    # the medians.
    overhead = median([w / p - 1 for w, p in zip(times["warm"], times["plain"], strict=False)])
    speedup = median([s / w for s, w in zip(times["seed"], times["warm"], strict=False)])
    overall_overhead = warm / plain - 1
    overall_speedup = median(times["seed"]) / warm
    return [
        Row(NAME, "plain horovodrun, ready env", spread(times["plain"])),
        Row(NAME, "ci-runner train --local, warm", spread(times["warm"])),
        Row(
            NAME,
            "  of which ci-runner before starting horovodrun",
            spread(launches) if launches else "(no launch line seen)",
        ),
        Row(NAME, "ci-runner train --local, cold (empty cache)", spread(times["cold"])),
        Row(NAME, "seed: clone + venv + pip install -r", spread(installs)),
        Row(NAME, "seed's way (install + 60 s sleep + horovodrun)", spread(times["seed"])),
        Row(
            NAME,
            "warm overhead over plain horovodrun",
            f"{overhead:+.0%} per round (ratio of medians {overall_overhead:+.0%})",
            f"<= +{MAX_OVERHEAD:.0%}",
            check(overhead <= MAX_OVERHEAD),
        ),
        Row(
            NAME,
            "seed's way / warm",
            f"{speedup:.1f}x per round (ratio of medians {overall_speedup:.1f}x)",
            f">= {MIN_SPEEDUP:.0f}x",
            check(speedup >= MIN_SPEEDUP),
        ),
    ]
