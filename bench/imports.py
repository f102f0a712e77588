"""2. Commands that need no cluster stay light.

``ci-runner validate`` and ``ci-runner render`` on the example (a committed train.yaml, as in a
user's project) must import neither the kubernetes client, python-gitlab nor boto3, and each
must take at most twice as long as ``python -c "import yaml, jinja2"``. The three commands run
interleaved, the same number of times each, and the ratio is of the medians.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.common import INFO, PYTHON, VENV, Row, check, median, run_quiet, say, spread, timed
from bench.fixture import CONFIG, example_repo

NAME = "2 light commands"
HEAVY = ("kubernetes", "gitlab", "boto3", "botocore")
MAX_RATIO = 2.0
COMMANDS = ("validate", "render")

# Runs the command in-process; prints the heavy top-level packages it imported and how long
# importing ci_runner.cli and running the command took.
PROBE = """
import time
started = time.perf_counter()
import contextlib, io, json, sys
from ci_runner.cli import main
imported = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(sys.argv[1:])
done = time.perf_counter()
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(HEAVY)))
print(json.dumps({"code": code, "heavy": heavy, "import": imported - started,
                  "run": done - imported}))
"""


def probe(command: str, repo: Path) -> dict[str, Any]:
    """The heavy packages in ``sys.modules`` after ``ci-runner <command>`` ran, and timings."""
    code = PROBE.replace("json.loads(HEAVY)", repr(list(HEAVY)))
    proc = run_quiet([str(PYTHON), "-c", code, command, "--config", CONFIG], cwd=repo)
    answer: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if answer["code"] != 0:
        raise RuntimeError(f"ci-runner {command} exited with {answer['code']}")
    return answer


Entry = tuple[int, str, float]  # depth, module, cumulative milliseconds


def import_tree(command: str, repo: Path) -> list[Entry]:
    """``python -X importtime`` of ``ci-runner <command>``, one entry per module imported."""
    proc = subprocess.run(
        [str(PYTHON), "-X", "importtime", "-m", "ci_runner", command, "--config", CONFIG],
        cwd=repo,
        capture_output=True,
        text=True,
        check=False,
    )
    entries: list[Entry] = []
    for line in proc.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if (
            not line.startswith("import time:")
            or len(fields) != 3
            or not fields[1].strip().isdigit()
        ):
            continue
        name = fields[2]
        stripped = name.lstrip(" ")
        entries.append(((len(name) - len(stripped) - 1) // 2, stripped, int(fields[1]) / 1000))
    return entries


def import_chain(entries: list[Entry], module: str) -> str:
    """``a -> b -> module``: who imported ``module`` first.

    Each line is printed when its import finishes, indented two spaces per level: a module's
    parent is the next line below it that is one level less deep.
    """
    start = next((i for i, entry in enumerate(entries) if entry[1] == module), None)
    if start is None:
        return f"{module} (not in the -X importtime output)"
    chain = [module]
    depth = entries[start][0]
    for level, name, _ in entries[start + 1 :]:
        if level < depth:
            chain.append(name)
            depth = level
    return " -> ".join(reversed(chain))


def biggest_children(entries: list[Entry], module: str, count: int = 4) -> str:
    """The modules ``module`` imported directly, the costliest first, with cumulative ms."""
    index = next((i for i, entry in enumerate(entries) if entry[1] == module), None)
    if index is None:
        return f"{module} not imported"
    depth = entries[index][0]
    children: list[tuple[float, str]] = []
    for level, name, cumulative in reversed(entries[:index]):
        if level <= depth:
            break
        if level == depth + 1:
            children.append((cumulative, name))
    children.sort(reverse=True)
    return ", ".join(f"{name} {ms:.0f} ms" for ms, name in children[:count])


def _seconds(argv: list[str], cwd: Path) -> float:
    return timed(lambda: run_quiet(argv, cwd=cwd))


def run(quick: bool) -> list[Row]:
    repeats = 7 if quick else 21
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="ci-runner-bench-") as tmp:
        repo = example_repo(Path(tmp) / "project")
        for command in COMMANDS:
            probes = [probe(command, repo) for _ in range(5 if quick else 9)]
            heavy = probes[0]["heavy"]
            imported = [p["import"] * 1000 for p in probes]
            ran = [p["run"] * 1000 for p in probes]
            rows.append(
                Row(
                    NAME,
                    f"`{command}` in-process: import ci_runner.cli / the command",
                    f"{median(imported):.0f} ms / {median(ran):.0f} ms (n={len(probes)})",
                )
            )
            tree = import_tree(command, repo)
            rows.append(
                Row(
                    NAME,
                    f"`{command}`: what ci_runner.cli imports (-X importtime)",
                    biggest_children(tree, "ci_runner.cli"),
                )
            )
            if heavy:
                chains = "; ".join(import_chain(tree, m) for m in heavy)
                rows.append(
                    Row(
                        NAME,
                        f"`{command}` heavy imports",
                        ", ".join(heavy),
                        "none",
                        check(False),
                        f"import chain: {chains}",
                    )
                )
            else:
                rows.append(
                    Row(
                        NAME,
                        f"`{command}` imports kubernetes/gitlab/boto3",
                        "none",
                        "none",
                        check(True),
                    )
                )
        say(f"timing validate / render / import yaml, jinja2, {repeats} times each, interleaved")
        baseline_argv = [str(PYTHON), "-c", "import yaml, jinja2"]
        argvs = {
            command: [str(VENV / "bin" / "ci-runner"), command, "--config", CONFIG]
            for command in COMMANDS
        }
        times: dict[str, list[float]] = {"baseline": [], **{c: [] for c in COMMANDS}}
        for argv in (baseline_argv, *argvs.values()):  # warm the page cache and .pyc files
            run_quiet(argv, cwd=repo)
        for _ in range(repeats):
            times["baseline"].append(_seconds(baseline_argv, repo))
            for command, argv in argvs.items():
                times[command].append(_seconds(argv, repo))
    base = median(times["baseline"])
    rows.append(
        Row(
            NAME,
            '`python -c "import yaml, jinja2"`',
            spread(times["baseline"], digits=3),
            verdict=INFO,
        )
    )
    for command in COMMANDS:
        ratio = median(times[command]) / base
        rows.append(
            Row(NAME, f"`ci-runner {command}` (whole command)", spread(times[command], digits=3))
        )
        rows.append(
            Row(
                NAME,
                f"`{command}` / import yaml, jinja2",
                f"{ratio:.2f}x",
                f"<= {MAX_RATIO:.0f}x",
                check(ratio <= MAX_RATIO),
            )
        )
    return rows
