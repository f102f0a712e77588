"""Unusual but valid input works end to end.

Non-ASCII text everywhere it is allowed, a repository path with spaces, a train.yaml in a
subdirectory used from another subdirectory, 1 worker, 64 workers x 8 slots, metrics that never
appear, and a 10 MB log line through the LogSink, the metrics parser and the report.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import tracemalloc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ci_runner import cli
from ci_runner.backends.logsink import LogSink
from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.config.schema import load_config
from ci_runner.context import CIContext
from ci_runner.errors import ConfigError
from ci_runner.masking import MASK, SecretMasker
from ci_runner.plan.mpijob_name import DNS_1035_LABEL
from ci_runner.render import render_mpijob
from ci_runner.results.metrics import parse_log_file
from ci_runner.results.metrics_file import summary_to_json
from ci_runner.results.report import ReportInput
from ci_runner.results.report_markdown import render_report
from testing.fake_kube.crd import validate_mpijob
from testing.git import run_git
from testing.plan_cases import trusted_plan

GitRepo = Callable[..., tuple[Path, str]]
SHA = "0123456789abcdef0123456789abcdef01234567"

UNICODE_YAML = """\
name: modele-uni
image: registry.example.com/équipe/horovod:0.28.1
command: [python, train.py, --titre, "Modèle ünïcödé 名前 🙂"]
workers: 2
env:
  LANGUE: "français — 日本語 — العربية"
  EMOJI: "🙂🚀"
  ZWJ: "👩‍💻"
metrics:
  loss: {pattern: '损失 (?P<value>[0-9.]+) 步 (?P<step>\\d+)'}
"""
UNICODE_TRAIN_PY = """\
import os, sys
rank = int(os.environ["HOROVOD_RANK"])
print("args:", " ".join(sys.argv[1:]), os.environ["LANGUE"], os.environ["ZWJ"], flush=True)
for step in range(3):
    print(f"损失 {3 - step + rank} 步 {step}", flush=True)
"""


def environ(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CI_RUNNER_CACHE": str(tmp_path / "ca che (ü)"),
        "CI_RUNNER_SETUP_IMAGE": "registry.example.com/group/ci-runner:1.2.0",
    }


def run_cli(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(args, env=env, cwd=cwd, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def commit(repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    run_git(["add", "-A"], repo)
    run_git(["commit", "-q", "-m", "Ünïcödé commit 🙂"], repo)
    return run_git(["rev-parse", "HEAD"], repo)


def new_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    run_git(["init", "-q", "-b", "main"], path)
    run_git(["remote", "add", "origin", "https://gitlab.example.com/grüppe/pröject.git"], path)
    return path


def test_non_ascii_text_in_a_path_with_spaces_trains_locally(
    tmp_path: Path, fake_horovodrun: Path
) -> None:
    repo = new_repo(tmp_path / "my projects (ü)" / "the repo")
    commit(repo, {"train.yaml": UNICODE_YAML, "train.py": UNICODE_TRAIN_PY})
    run_git(["checkout", "-q", "-b", "fonctionnalité/ünï"], repo)

    code, out, err = run_cli(
        ["train", "--local", "--output-dir", "sortie é"], repo, environ(tmp_path)
    )

    assert code == 0, err
    args = "--titre Modèle ünïcödé 名前 🙂 français — 日本語 — العربية 👩‍💻"
    assert sorted(out.splitlines()) == [
        f"[0]<stdout>:args: {args}",
        "[0]<stdout>:损失 1 步 2",
        "[0]<stdout>:损失 2 步 1",
        "[0]<stdout>:损失 3 步 0",
        f"[1]<stdout>:args: {args}",
        "[1]<stdout>:损失 2 步 2",
        "[1]<stdout>:损失 3 步 1",
        "[1]<stdout>:损失 4 步 0",
    ]
    assert "[ci-runner] loss: 1.5 (final, mean over ranks; best 1)" in err.splitlines()
    out_dir = repo / "sortie é"
    assert (out_dir / "train.log").read_text(encoding="utf-8") == out
    report = (out_dir / "report.md").read_text(encoding="utf-8")
    assert "| `loss` | lower is better | **1.5** |" in report
    assert "`fonctionnalité/ünï`" in report
    metrics = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
    assert list(metrics["metrics"]) == ["loss"]


def test_non_ascii_values_render_an_accepted_manifest(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "dir with spaces" / "repo")
    commit(repo, {"train.yaml": UNICODE_YAML})
    run_git(["checkout", "-q", "-b", "fonctionnalité/ünï"], repo)

    code, out, err = run_cli(["render"], repo, environ(tmp_path))

    assert code == 0, err
    manifest = next(yaml.safe_load_all(out))  # the MPIJob, then its ConfigMap and Secret
    assert validate_mpijob(manifest) == []
    labels = manifest["metadata"]["labels"]
    assert labels["ci-runner/project"] == "gr-ppe-pr-ject"
    annotations = manifest["metadata"]["annotations"]
    assert annotations["ci-runner/ref"] == "fonctionnalité/ünï"
    assert annotations["ci-runner/project"] == "grüppe/pröject"
    launcher = manifest["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in launcher["env"]}
    assert env["LANGUE"] == "français — 日本語 — العربية"
    assert env["ZWJ"] == "👩‍💻"
    assert launcher["args"][-2:] == ["--titre", "Modèle ünïcödé 名前 🙂"]


def test_a_non_ascii_job_name_is_refused_with_an_ascii_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(UNICODE_YAML.replace("name: modele-uni", "name: Modèle Ünï"))
    assert caught.value.lines() == [
        "train.yaml:1: name: must be lowercase letters, digits and '-', start with a letter and "
        "end with a letter or digit, got 'Modèle Ünï'; fix: write name: modele-uni"
    ]


def test_train_yaml_in_a_subdirectory_from_another_subdirectory(
    tmp_path: Path, fake_horovodrun: Path
) -> None:
    repo = new_repo(tmp_path / "repo with space")
    config = (
        "name: nested\nimage: img\ncommand: python jobs/big/train.py\nworkers: 1\n"
        "requirements: jobs/big/requirements.txt\n"
        "metrics:\n  loss: {pattern: 'loss (?P<value>[0-9.]+)'}\n"
    )
    sha = commit(
        repo,
        {
            "jobs/big/train.yaml": config,
            "jobs/big/requirements.txt": "",
            "jobs/big/train.py": "print('loss 0.25', flush=True)\n",
            "tools/README": "tools\n",
        },
    )
    cwd = repo / "tools"

    code, out, err = run_cli(
        ["validate", "--config", "../jobs/big/train.yaml"], cwd, environ(tmp_path)
    )
    assert (code, err) == (0, "")
    assert out.startswith(f"[ci-runner] jobs/big/train.yaml at {sha[:8]} is valid: MPIJob nested-")
    assert out.endswith(", 1 worker x 1 slot = 1 rank\n")

    code, out, err = run_cli(
        ["train", "--local", "--config", "../jobs/big/train.yaml", "--output-dir", "out"],
        cwd,
        environ(tmp_path),
    )
    assert code == 0, err
    assert out == "[0]<stdout>:loss 0.25\n"
    assert (cwd / "out" / "train.log").read_text() == out  # relative to where it ran
    assert "[ci-runner] loss: 0.25 (final, mean over ranks; best 0.25)" in err.splitlines()


def test_metrics_that_never_appear(
    tmp_path: Path, fake_horovodrun: Path, git_repo: GitRepo
) -> None:
    repo, _ = git_repo(
        {
            "train.yaml": "name: quiet\nimage: img\ncommand: python train.py\nworkers: 1\n"
            "metrics:\n"
            "  loss: {pattern: 'loss (?P<value>[0-9.]+)'}\n"
            "  accuracy: {pattern: 'acc (?P<value>[0-9.]+)', goal: max}\n",
            "train.py": "print('training without a word about metrics', flush=True)\n",
        }
    )

    code, _, err = run_cli(["train", "--local", "--output-dir", "out"], repo, environ(tmp_path))

    assert code == 0, err
    assert err.splitlines()[-3:] == [
        "[ci-runner] loss: not found in the log",
        "[ci-runner] accuracy: not found in the log",
        f"[ci-runner] log: {repo / 'out' / 'train.log'}",
    ]
    report = (repo / "out" / "report.md").read_text()
    assert "| `loss` | lower is better | not in the log | – | 0 |" in report
    assert "| `accuracy` | higher is better | not in the log | – | 0 |" in report
    assert "```mermaid" not in report
    metrics = json.loads((repo / "out" / "metrics.json").read_text())
    assert [(name, m["final"], m["count"]) for name, m in metrics["metrics"].items()] == [
        ("loss", None, 0),
        ("accuracy", None, 0),
    ]
    assert "loss" not in (repo / "out" / "metrics.txt").read_text().replace("# ", "")


# ---------------------------------------------------------------------------------------------
# Sizes: 1 worker, 64 workers x 8 slots.

CTX = CIContext(
    sha=SHA,
    project_path="group/project",
    job_id="98765432101",
    pipeline_id="1234567",
    mr_iid="4242",
    ref_name="feature/x",
    repo_url="https://gitlab.example.com/group/project.git",
)


@pytest.mark.parametrize(
    ("extra", "workers", "slots", "ranks"),
    [
        ("workers: 1\n", 1, 1, 1),
        ("workers: 64\nslots_per_worker: 8\n", 64, 8, 512),
        ("workers: 64\nresources: {gpu: 8}\n", 64, 8, 512),
        ("workers: 8\nslots_per_worker: 8\nelastic: {min_workers: 1, max_workers: 64}\n", 8, 8, 64),
    ],
    ids=["1-worker", "64x8", "64x8-gpus", "elastic-to-64"],
)
def test_sizes_render_accepted_manifests_whose_names_fit(
    extra: str, workers: int, slots: int, ranks: int
) -> None:
    config = load_config(
        "name: abcdefghijklmnopqrstuvwx\nimage: img\ncommand: python t.py\n" + extra
    )
    plan = trusted_plan(config, CTX)
    manifest = render_mpijob(plan)

    assert validate_mpijob(manifest) == []
    name = manifest["metadata"]["name"]
    assert DNS_1035_LABEL.fullmatch(name)
    most = config.elastic.max_workers if config.elastic else workers
    for index in range(most):
        hostname = f"{name}-worker-{index}"
        assert len(hostname) <= 63 and DNS_1035_LABEL.fullmatch(hostname), hostname
    assert len(f"{name}-launcher-abcde") <= 63
    assert CTX.short_sha in name and "98765432101" in name  # still tells runs apart
    spec = manifest["spec"]
    assert spec["slotsPerWorker"] == slots
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == workers
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    args = launcher["args"]  # mpirun, or horovodrun for an elastic job
    assert args[0] == ("horovodrun" if "elastic" in extra else "mpirun")
    assert args[args.index("-np") + 1] == str(ranks)
    assert config.ranks == ranks


def test_64_by_8_through_validate(git_repo: GitRepo, tmp_path: Path) -> None:
    repo, sha = git_repo(
        {"train.yaml": "name: big\nimage: img\ncommand: python t.py\nworkers: 64\n"
         "resources: {gpu: 8, cpu: '64', memory: 512Gi}\n"}
    )  # fmt: skip
    run_git(["remote", "add", "origin", "https://gitlab.example.com/g/p.git"], repo)
    code, out, err = run_cli(["validate"], repo, environ(tmp_path))
    assert (code, err) == (0, "")
    assert re.fullmatch(
        rf"\[ci-runner\] train\.yaml at {sha[:8]} is valid: MPIJob big-{sha[:8]}-l[0-9a-f]{{6}}, "
        r"64 workers x 8 slots = 512 ranks\n",
        out,
    )


# ---------------------------------------------------------------------------------------------
# A 10 MB log line.

LINE_BYTES = 10 * 1024 * 1024
SECRET = "glpat-ten-megabyte-secret-0001"


class CountingMasker(SecretMasker):
    """A masker that counts the characters it is given: the work a sink does on a line."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__(secrets)
        self.scanned = 0

    def mask(self, text: str) -> str:
        self.scanned += len(text)
        return super().mask(text)


def test_a_10_mb_line_through_the_sink_the_parser_and_the_report(tmp_path: Path) -> None:
    filler = "x" * 997
    body = "".join(f"{filler}{SECRET if i % 3 == 0 else 'abc'}" for i in range(LINE_BYTES // 1024))
    line = f"[0]<stdout>:{body} loss 0.125\n"
    data = line.encode()
    pieces, rng, position = [], random.Random(8), 0
    while position < len(data):
        size = rng.choice([1, 7, 4096, 65536, 65537, 1_000_003])
        pieces.append(data[position : position + size])
        position += size
    echoed: list[int] = []
    masked_total = [0]

    def echo(text: str) -> None:
        echoed.append(len(text))
        masked_total[0] += text.count(MASK)

    masker = CountingMasker([SECRET])
    tracemalloc.start()
    try:
        with LogSink(tmp_path / "train.log", echo, masker) as sink:
            for piece in pieces:
                sink.feed(piece)
            sink.feed("[1]<stdout>:loss 0.5\n")
            tail = sink.tail
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    saved = (tmp_path / "train.log").read_text()
    assert SECRET not in saved
    assert saved.count(MASK) == masked_total[0] == len(range(0, LINE_BYTES // 1024, 3))
    assert saved.endswith(" loss 0.125\n[1]<stdout>:loss 0.5\n")
    # Each character masked once (and a secret's length held back at each cut), never the
    # whole pending line again at every piece.
    assert masker.scanned < len(data) + len(pieces) * len(SECRET)
    assert max(echoed) < 2 * 1024 * 1024  # passed on in pieces, never as one 10 MB string
    assert peak < 60 * 1024 * 1024
    assert all(len(item) <= 2000 for item in tail)

    config = load_config(
        "name: big-line\nimage: img\ncommand: c\nworkers: 2\n"
        "metrics:\n  loss: {pattern: 'loss (?P<value>[0-9.]+)$'}\n"
    )
    summary = parse_log_file(tmp_path / "train.log", config.metrics)
    (loss,) = summary.metrics
    assert loss.count == 2
    assert loss.final == pytest.approx((0.125 + 0.5) / 2)
    assert json.dumps(summary_to_json(summary))

    result = RunResult(
        outcome=Outcome.FAILED,
        mpijob_name="big-line-01234567-5005",
        log_path=tmp_path / "train.log",
        log_tail=tail,
        failure=Failure(FailureKind.EXIT_CODE, "exit 1", exit_code=1),
    )
    report = render_report(
        ReportInput.from_run(config, replace(CTX, job_id="5005"), result, metrics=summary)
    )
    assert len(report) < 60_000
    assert "| `loss` | lower is better | **0.3125** |" in report
