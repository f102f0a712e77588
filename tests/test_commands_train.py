"""``ci-runner train --local`` through ``cli.main``, with the stand-in horovodrun."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from ci_runner.backends.local.backend import dirty_refusal
from ci_runner.commands import train
from testing.agent_kubeconfig import CONTEXTS, gitlab_kubeconfig
from testing.cli_runs import TRAIN_YAML, environ, run_cli

GitRepo = Callable[..., tuple[Path, str]]

TRAIN_PY = """\
import os
rank = int(os.environ["HOROVOD_RANK"])
for step in range(3):
    print(f"loss {(3 - step) * (rank + 1)} step {step}", flush=True)
print("OUTPUT_URI=" + os.environ["OUTPUT_URI"], flush=True)
"""


def test_train_local_streams_the_log_and_prints_a_summary(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path
) -> None:
    repo, _ = git_repo(
        {"train.yaml": TRAIN_YAML, "train.py": TRAIN_PY, "requirements.txt": "PyYAML\n"}
    )
    out_dir = repo / "out"  # relative to where ci-runner runs, not to the pinned worktree

    code, out, err = run_cli(
        ["train", "--local", "--outputs", "out", "--output-dir", "ci"], repo, environ(tmp_path)
    )

    assert code == 0, err
    assert sorted(out.splitlines()) == [
        f"[0]<stdout>:OUTPUT_URI={out_dir.as_uri()}",
        "[0]<stdout>:loss 1 step 2",
        "[0]<stdout>:loss 2 step 1",
        "[0]<stdout>:loss 3 step 0",
        f"[1]<stdout>:OUTPUT_URI={out_dir.as_uri()}",
        "[1]<stdout>:loss 2 step 2",
        "[1]<stdout>:loss 4 step 1",
        "[1]<stdout>:loss 6 step 0",
    ]
    summary = err.splitlines()[-4:]
    job = re.fullmatch(r"\[ci-runner\] training succeeded in \d+s: job (toy-\S+)", summary[0])
    assert job, summary
    log = repo / "ci" / "train.log"
    assert summary[1:] == [
        "[ci-runner] loss: 1.5 (final, mean over ranks; best 1)",
        f"[ci-runner] log: {log}",
        f"[ci-runner] outputs: {out_dir.as_uri()}",
    ]
    assert log.read_text() == out
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored after the run


def test_the_metrics_are_parsed_as_the_log_streams_not_from_the_saved_log(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ci_runner.results import metrics, publish

    def refused(*_: object) -> None:
        raise AssertionError("the saved log was read again")

    monkeypatch.setattr(metrics, "parse_log_file", refused)
    monkeypatch.setattr(publish, "parse_log_file", refused)
    repo, _ = git_repo(
        {"train.yaml": TRAIN_YAML, "train.py": TRAIN_PY, "requirements.txt": "PyYAML\n"}
    )

    code, _, err = run_cli(["train", "--local", "--output-dir", "ci"], repo, environ(tmp_path))

    assert code == 0, err
    assert "[ci-runner] loss: 1.5 (final, mean over ranks; best 1)" in err.splitlines()
    assert '"final": 1.5' in (repo / "ci" / "metrics.json").read_text()


def test_train_local_refuses_a_dirty_tree(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": TRAIN_PY, "requirements.txt": ""})
    (repo / "train.py").write_text("print('edited')\n")

    code, out, err = run_cli(["train", "--local"], repo, environ(tmp_path))

    assert (code, out) == (1, "")
    assert err == f"ci-runner: error: {dirty_refusal(repo)}\n"


def test_allow_dirty_reads_train_yaml_from_the_working_tree(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": TRAIN_PY, "requirements.txt": ""})
    edited = TRAIN_YAML.replace("workers: 2", "workers: 1").replace("requirements.txt", "req.txt")
    (repo / "train.yaml").write_text(edited)

    code, _, err = run_cli(["train", "--local", "--allow-dirty"], repo, environ(tmp_path))

    assert code == 1
    assert err == (
        "ci-runner: error: train.yaml:5: requirements: req.txt does not exist in the working tree; "
        "fix: create it, or give its path relative to the repository root\n"
    )
    (repo / "req.txt").write_text("")
    code, out, err = run_cli(["train", "--local", "--allow-dirty"], repo, environ(tmp_path))
    assert code == 0, err
    assert "[1]<stdout>" not in out  # one worker, as the edited train.yaml says
    assert "[0]<stdout>:loss 3 step 0\n" in out


def test_a_failed_training_exits_1_with_the_reason(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path
) -> None:
    repo, _ = git_repo(
        {"train.yaml": TRAIN_YAML, "train.py": "raise SystemExit(4)\n", "requirements.txt": ""}
    )

    code, _, err = run_cli(["train", "--local"], repo, environ(tmp_path))

    assert code == 1
    lines = err.splitlines()
    assert re.fullmatch(r"\[ci-runner\] training failed in \d+s: job toy-\S+", lines[-4])
    assert lines[-3:-1] == [
        "[ci-runner] reason: horovodrun exited with code 4",
        "[ci-runner] loss: not found in the log",
    ]


def test_train_on_a_cluster_needs_a_repository_url_for_the_pods(
    git_repo: GitRepo, tmp_path: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": TRAIN_PY, "requirements.txt": ""})

    code, out, err = run_cli(["train"], repo, environ(tmp_path))

    assert (code, out) == (1, "")
    assert err == (
        "ci-runner: error: no repository URL for the pods to fetch the code from; fix: pass "
        "--repo-url https://<gitlab>/<group>/<project>.git, add an 'origin' remote, or run in "
        "GitLab CI\n"
    )


def test_train_on_a_cluster_without_one_says_how_to_give_it(
    git_repo: GitRepo, tmp_path: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": TRAIN_PY, "requirements.txt": ""})

    code, out, err = run_cli(
        ["train", "--repo-url", "https://gitlab.example.com/g/p.git"], repo, environ(tmp_path)
    )

    assert (code, out) == (1, "")
    assert err == (
        "ci-runner: error: no Kubernetes cluster to run on: this CI job is not in a pod with a "
        "service account and KUBECONFIG is not set; fix: add a KUBECONFIG CI/CD variable of type "
        "File holding a kubeconfig, or run the job on a Kubernetes runner\n"
    )
    assert not (repo / "ci-runner-out").exists()  # nothing started, nothing written


def test_train_with_several_agent_contexts_and_none_chosen_stops_before_anything(
    git_repo: GitRepo, tmp_path: Path
) -> None:
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": TRAIN_PY, "requirements.txt": ""})
    path = gitlab_kubeconfig(tmp_path)
    env = {**environ(tmp_path), "KUBECONFIG": str(path)}

    code, out, err = run_cli(
        ["train", "--repo-url", "https://gitlab.example.com/g/p.git"], repo, env
    )

    assert (code, out) == (1, "")
    assert err == (
        f"ci-runner: error: the kubeconfig {path} has 3 contexts and none is current: "
        f"{CONTEXTS}; fix: choose one with the CI/CD variable KUBE_CONTEXT, --kube-context or "
        "kubernetes.context in train.yaml, e.g. KUBE_CONTEXT=ml/k8s-agents:cpu-cluster\n"
    )
    assert not (repo / "ci-runner-out").exists()  # nothing started, nothing written

    code, out, err = run_cli(
        ["train", "--repo-url", "https://gitlab.example.com/g/p.git", "--kube-context", "nope"],
        repo,
        {**env, "KUBE_CONTEXT": "ml/k8s-agents:gpu-cluster"},
    )
    assert (code, err) == (
        1,
        f"ci-runner: error: --kube-context chooses the context 'nope', which the kubeconfig "
        f"{path} does not have; fix: use one of its contexts: {CONTEXTS}\n",
    )


@pytest.mark.parametrize(
    "where", [["--local"], ["--repo-url", "https://gitlab.example.com/g/p.git"]]
)
def test_a_missing_secret_is_one_line_before_anything_starts(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path, where: list[str]
) -> None:
    yaml = TRAIN_YAML + "secrets: [API_KEY]\n"
    repo, _ = git_repo({"train.yaml": yaml, "train.py": TRAIN_PY, "requirements.txt": ""})
    env = {**environ(tmp_path), "FAKE_HOROVODRUN_RECORD": str(tmp_path / "calls.jsonl")}

    code, out, err = run_cli(["train", *where], repo, env)

    assert (code, out) == (1, "")
    assert err == (
        "ci-runner: error: train.yaml: secrets: CI variable API_KEY is not set; fix: define "
        "API_KEY as a masked variable in the project's Settings > CI/CD > Variables (or export "
        "it when running outside CI)\n"
    )
    assert not (tmp_path / "calls.jsonl").exists()  # not even horovodrun's build check ran
    assert not (repo / "ci-runner-out").exists()  # nothing started, nothing written


def test_horovodrun_is_found_beside_python_first(tmp_path: Path) -> None:
    beside = tmp_path / "env" / "bin"
    beside.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for directory in (beside, elsewhere):
        (directory / "horovodrun").write_text("#!/bin/sh\n")
        (directory / "horovodrun").chmod(0o755)

    assert train.find_horovodrun(beside / "python", str(elsewhere)) == (beside / "horovodrun")
    (beside / "horovodrun").unlink()
    assert train.find_horovodrun(beside / "python", str(elsewhere)) == (elsewhere / "horovodrun")
    assert train.find_horovodrun(beside / "python", str(tmp_path)) is None


def test_plain_paths_become_file_uris() -> None:
    cwd = Path("/home/dev/project")
    assert train.as_uri("data/", cwd) == "file:///home/dev/project/data/"
    assert train.as_uri("/abs/model", cwd) == "file:///abs/model"
    assert train.as_uri("s3://bucket/key/", cwd) == "s3://bucket/key/"
    assert train.as_uri(None, cwd) is None


def test_credentials_are_masked_in_the_training_log(
    git_repo: GitRepo, tmp_path: Path, fake_horovodrun: Path
) -> None:
    train_py = "import os\nprint('key=' + os.environ['AWS_SECRET_ACCESS_KEY'], flush=True)\n"
    repo, _ = git_repo({"train.yaml": TRAIN_YAML, "train.py": train_py, "requirements.txt": ""})
    env = {**environ(tmp_path), "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG"}

    code, out, err = run_cli(["train", "--local", "--output-dir", "ci"], repo, env)

    assert code == 0, err
    assert sorted(out.splitlines()) == ["[0]<stdout>:key=[MASKED]", "[1]<stdout>:key=[MASKED]"]
    assert (repo / "ci" / "train.log").read_text() == out
