"""`ci-runner train` as a GitLab merge-request pipeline runs it, end to end.

A real ``ci-runner`` process with an MR pipeline's CI variables, in a local git repository, talks
over real HTTP to the fake GitLab, S3 and the scripted cluster's real kube-apiserver, controllers
and MPI Operator (testing/mr_pipeline.py), as the ServiceAccount examples/rbac.yaml binds. The
test plays the nodes' part: workers start, the launcher logs, the launcher exits.
"""

from __future__ import annotations

import io
import json
import subprocess
from contextlib import redirect_stderr
from pathlib import Path

import pytest
import requests

from ci_runner.cli import main
from testing.agent_kubeconfig import CONTEXTS, gitlab_kubeconfig
from testing.agent_kubeconfig import JOB_TOKEN as AGENT_JOB_TOKEN
from testing.backend_harness import KINDS
from testing.ci_log import CiLog
from testing.mr_pipeline import (
    AWS_SECRET,
    GITLAB_TOKEN,
    JOB_TOKEN,
    LOG,
    MODEL,
    Pipeline,
    upload_model,
)
from testing.scripted_cluster.faults import FaultProxy
from testing.scripted_cluster.kas import kas_credentials
from testing.scripted_cluster.scenarios import JobScenario
from testing.waiting import WAIT

pytestmark = [pytest.mark.slow, pytest.mark.control_plane]
SEEN_KINDS = [*(k for k in KINDS if k != "secrets"), "events"]


def run_to_the_launcher(pipeline: Pipeline) -> tuple[subprocess.Popen[str], CiLog, JobScenario]:
    """Start `ci-runner train`; the workers and the launcher come up and the launcher logs."""
    process, log = pipeline.start_train()
    job = pipeline.submitted_job(log)
    log.wait_for(job.submitted)
    started = pipeline.notes()[0]  # the comment (an earlier run's replies follow it)
    assert "Training started" in started, started
    assert job.name in started
    job.to_the_launcher(log, *LOG)
    return process, log, job


def finished(process: subprocess.Popen[str], log: CiLog) -> int:
    code = process.wait(timeout=WAIT)
    log.join()
    return code


def leftovers(pipeline: Pipeline, settle: float = WAIT) -> list[tuple[str, str]]:
    """What a run left in the namespace, once the garbage collector has had up to ``settle``
    seconds (Events go by themselves, after kube-apiserver's --event-ttl, 1 h by default)."""
    return pipeline.cluster.leftovers(settle)


def namespace_objects(pipeline: Pipeline) -> list[dict[str, object]]:
    """Every object of the namespace but its Secrets (what anyone with list rights sees)."""
    paths = {**KINDS, "events": "/api/v1/namespaces/{ns}/events"}
    found: list[dict[str, object]] = []
    for kind in SEEN_KINDS:
        found += pipeline.cluster.admin.list(paths[kind].format(ns=pipeline.namespace))[0]
    return found


def assert_no_secret_anywhere(
    pipeline: Pipeline, log: CiLog, seen: list[dict[str, object]]
) -> None:
    """No secret in the CI log, the comments, the output files, or the namespace's objects
    (``seen`` while the job ran, and what is there now)."""
    outputs = [
        "\n".join(log.lines),
        *pipeline.notes(),
        *(p.read_text() for p in pipeline.output_dir().iterdir()),
        json.dumps(seen + namespace_objects(pipeline)),
    ]
    for secret in (GITLAB_TOKEN, JOB_TOKEN, AWS_SECRET):
        assert not [text for text in outputs if secret in text], secret


def test_mr_pipeline_trains_and_keeps_one_comment_up_to_date(pipeline: Pipeline) -> None:
    """Scripted: on real nodes as test_the_example_trains_on_two_workers_over_ssh_between_pods;
    here the exact metrics of a fixed log, a second pipeline editing the same comment, and
    nothing left."""
    process, log, job = run_to_the_launcher(pipeline)
    key = upload_model(pipeline, job)
    # Manifests name the Secret; its values live only in the Secret, which the MPIJob owns.
    secret = pipeline.cluster.admin.get(
        f"/api/v1/namespaces/{pipeline.namespace}/secrets/{job.name}-secrets"
    )
    assert secret is not None
    assert secret["metadata"]["ownerReferences"][0]["name"] == job.name
    seen = namespace_objects(pipeline)
    job.launcher_exits(0)

    assert finished(process, log) == 0, "\n".join(log.lines)
    assert f"[ci-runner] MPIJob {job.name} succeeded" in log.lines
    assert f"[ci-runner] deleted MPIJob {job.name}, its pods and its Secret" in log.lines
    assert "[ci-runner] train_loss: 934.879 (final, mean over ranks; best 934.226)" in log.lines
    comment, reply = pipeline.notes()
    assert reply.startswith(
        "<!-- ci-runner-result:job-5005 -->\n✅ **Training succeeded**: `simple-ml` · "
        "`train_loss` **934.879** (-65.12 (-6.5%) 🟢 better against `main`) · "
    )
    assert comment.startswith(
        "<!-- ci-runner:simple-ml -->\n### ✅ Training succeeded: `simple-ml`"
    )
    assert (
        "| `train_loss` | lower is better | **934.879** | 934.226 (step 1, rank 1) | 1000 | "
        "-65.12 (-6.5%) 🟢 better | 4 |"
    ) in comment
    assert "xychart-beta" in comment
    assert 'line "mean" [1243.7,934.9]' in comment
    link = next(line for line in comment.splitlines() if "model.pt" in line)
    url = link[link.index("](") + 2 : link.rindex(")")]
    assert requests.get(url, timeout=10).content == MODEL
    assert key in url
    out = pipeline.output_dir()
    assert sorted(p.name for p in out.iterdir()) == [
        "annotations.json",
        "metrics.json",
        "metrics.txt",
        "report.md",
        "train.log",
    ]
    # the job page links the model too (artifacts:reports:annotations)
    [annotation] = json.loads((out / "annotations.json").read_text())["ci-runner"]
    assert annotation["external_link"]["label"] == "Model output: model.pt"
    assert requests.get(annotation["external_link"]["url"], timeout=10).content == MODEL
    assert (out / "train.log").read_text().splitlines() == LOG
    assert json.loads((out / "metrics.json").read_text())["metrics"]["train_loss"]["final"] == (
        pytest.approx(934.8792437337936)
    )
    assert_no_secret_anywhere(pipeline, log, seen)
    # The log saved, nothing of the run is left in the namespace (Events expire by themselves).
    assert leftovers(pipeline) == []

    # A second pipeline on the same MR edits the same comment and keeps this run in its history.
    second = pipeline.for_job(5006)
    process, log, job2 = run_to_the_launcher(second)
    assert job2.name != job.name
    upload_model(second, job2)
    job2.launcher_exits(0)
    assert finished(process, log) == 0, "\n".join(log.lines)
    # ... and its end is a new note (GitLab notifies of those), the MR's third
    comment, _, second_reply = pipeline.notes()
    assert "<summary>Previous runs (1)</summary>" in comment
    assert "[job #5005]" in comment
    assert second_reply.startswith("<!-- ci-runner-result:job-5006 -->\n✅ **Training succeeded**")
    assert [e.action for e in pipeline.gitlab.notifications()] == ["created"] * 3


def test_the_gitlab_agent_context_kube_context_names_is_the_one_trained_on(
    pipeline: Pipeline, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """GitLab injects a kubeconfig with a context per authorized agent and none current; the
    agent server here (testing/scripted_cluster/kas.py) lets only the gpu-cluster agent's
    token through, as KAS routes by token, and calls kube-apiserver as that agent's
    ServiceAccount (examples/rbac.yaml's).

    Scripted: what is tested is the agent server's routing by token (a FaultProxy with
    kas_credentials); the node only stands in.
    """
    cluster = pipeline.cluster
    kas = FaultProxy(
        cluster.plane.url, cluster.plane.ca, kas_credentials(12, AGENT_JOB_TOKEN, cluster.token)
    ).start()
    request.addfinalizer(kas.stop)
    kubeconfig = gitlab_kubeconfig(tmp_path, kas.url)
    agent = Pipeline(
        **{**pipeline.__dict__, "env": {**pipeline.env, "KUBECONFIG": str(kubeconfig)}}
    )

    process, log = agent.start_train()
    assert finished(process, log) == 1
    assert log.lines[-1] == (
        f"ci-runner: error: the kubeconfig {kubeconfig} has 3 contexts and none is current: "
        f"{CONTEXTS}; fix: choose one with the CI/CD variable KUBE_CONTEXT, --kube-context or "
        "kubernetes.context in train.yaml, e.g. KUBE_CONTEXT=ml/k8s-agents:cpu-cluster"
    )
    assert leftovers(pipeline, settle=0) == []
    assert kas.requests == []  # it stopped before it reached the cluster

    chosen = Pipeline(
        **{**agent.__dict__, "env": {**agent.env, "KUBE_CONTEXT": "ml/k8s-agents:gpu-cluster"}}
    )
    process, log, job = run_to_the_launcher(chosen)
    upload_model(chosen, job)
    job.launcher_exits(0)
    assert finished(process, log) == 0, "\n".join(log.lines)
    assert f"[ci-runner] MPIJob {job.name} succeeded" in log.lines
    assert kas.requests and kas.refused == 0  # every request came through the agent


def test_failed_run_exits_1_and_says_why_in_the_comment(pipeline: Pipeline) -> None:
    """Scripted: on real nodes as test_a_training_command_that_exits_non_zero; here the launcher's
    stderr tail in the comment and no secret in the namespace's objects."""
    process, log, job = run_to_the_launcher(pipeline)
    launcher = job.launcher_pod
    seen = namespace_objects(pipeline)
    job.launcher_log("[1]<stderr>:ValueError: bad batch")
    job.launcher_exits(1)

    assert finished(process, log) == 1
    reason = f"launcher {launcher} exited with code 1"
    assert f"[ci-runner] MPIJob {job.name} failed: {reason}" in log.lines
    assert f"[ci-runner] reason: {reason}" in log.lines
    comment, reply = pipeline.notes()
    assert f"reason: `{reason}`" in reply
    assert "### ❌ Training failed: `simple-ml`" in comment
    assert f"**Reason:** `{reason}`" in comment
    assert "[1]<stderr>:ValueError: bad batch" in comment  # the log tail
    assert "Model and outputs" not in comment
    assert_no_secret_anywhere(pipeline, log, seen)


def test_cancelled_run_leaves_nothing_in_the_cluster(pipeline: Pipeline) -> None:
    """Scripted: on real nodes as
    test_a_cancelled_or_timed_out_job_leaves_no_pod_and_no_process[canceled]; here the in-process
    cancel's reply, the saved log tail and report.md."""
    process, log, job = run_to_the_launcher(pipeline)
    # GitLab stops the job's script (SIGTERM may never reach it), then runs after_script.
    process.kill()
    finished(process, log)
    assert job.pods()

    stdout, stderr = io.StringIO(), io.StringIO()
    with redirect_stderr(stderr):
        code = main(
            ["cancel"],
            env={**pipeline.env, "CI_JOB_STATUS": "canceled"},
            cwd=pipeline.repo,
            stdout=stdout,
            stderr=stderr,
        )

    assert code == 0, stderr.getvalue()
    assert f"[ci-runner] cancelled: MPIJob {job.name} and everything it owned deleted" in (
        stderr.getvalue().splitlines()
    )
    assert leftovers(pipeline) == []
    comment, reply = pipeline.notes()
    assert "Training cancelled" in comment
    assert reply.startswith("<!-- ci-runner-result:job-5005 -->\n🚫 **Training cancelled**")
    assert LOG[-1] in comment  # the tail of the log `train` had saved
    assert (pipeline.output_dir() / "report.md").is_file()


def test_fork_merge_request_is_refused_before_anything_runs(pipeline: Pipeline) -> None:
    """Scripted: what is tested is the fork check, which refuses before any request reaches the
    cluster."""
    env = {
        **pipeline.env,
        "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "999",
        "CI_MERGE_REQUEST_PROJECT_PATH": "group/proj",
        "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "alice/proj",
    }
    stdout, stderr = io.StringIO(), io.StringIO()

    code = main(["train"], env=env, cwd=pipeline.repo, stdout=stdout, stderr=stderr)

    assert code == 1
    assert stderr.getvalue() == (
        "ci-runner: error: merge request !7 of group/proj comes from the fork alice/proj: its "
        "code would run with group/proj's cluster credentials; fix: review it, then set the "
        "component input allow_fork_merge_requests: true, or push its branch to group/proj and "
        "open the merge request from there\n"
    )
    assert leftovers(pipeline, settle=0) == []
    assert pipeline.notes() == []


def test_fork_merge_request_pipeline_in_the_fork_says_so(pipeline: Pipeline) -> None:
    """Scripted: what is tested is the fork check, which refuses before any request reaches the
    cluster."""
    env = {
        **pipeline.env,
        "CI_PROJECT_ID": "999",
        "CI_PROJECT_PATH": "alice/proj",
        "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "999",
        "CI_MERGE_REQUEST_PROJECT_PATH": "group/proj",
        "CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "alice/proj",
    }
    stdout, stderr = io.StringIO(), io.StringIO()

    code = main(["train"], env=env, cwd=pipeline.repo, stdout=stdout, stderr=stderr)

    assert code == 1
    assert stderr.getvalue() == (
        "ci-runner: error: merge request !7 of group/proj comes from the fork alice/proj and "
        "this pipeline runs in the fork, with the fork's CI/CD variables, not group/proj's; fix: "
        "a maintainer of group/proj reviews the code, then runs the pipeline from the merge "
        "request's Pipelines tab (it runs in group/proj) with the component input "
        "allow_fork_merge_requests: true\n"
    )
    assert leftovers(pipeline, settle=0) == []  # nothing was submitted


def test_manual_run_overrides_workers_and_arguments(pipeline: Pipeline) -> None:
    """Scripted: what is tested is the submitted MPIJob's spec; the run is killed before any pod
    runs."""
    manual = pipeline.for_job(5007)
    manual.env.update(
        {"CI_PIPELINE_SOURCE": "web", "CI_RUNNER_WORKERS": "3", "CI_RUNNER_ARGS": "--epochs 2"}
    )
    del manual.env["CI_MERGE_REQUEST_IID"]
    process, log = manual.start_train()
    job = manual.submitted_job(log)
    log.wait_for(job.submitted)
    process.kill()
    finished(process, log)

    specs = job.mpijob["spec"]["mpiReplicaSpecs"]
    assert specs["Worker"]["replicas"] == 3
    launcher_args = specs["Launcher"]["template"]["spec"]["containers"][0]["args"]
    assert launcher_args[:5] == ["mpirun", "--allow-run-as-root", "--tag-output", "-np", "3"]
    assert launcher_args[-4:] == ["python", "train.py", "--epochs", "2"]


def test_invalid_override_is_one_line_and_submits_nothing(pipeline: Pipeline) -> None:
    """Scripted: what is tested is the override check, which refuses before the cluster is
    touched."""
    env = {**pipeline.env, "CI_PIPELINE_SOURCE": "web", "CI_RUNNER_WORKERS": "lots"}
    stderr = io.StringIO()

    code = main(["train"], env=env, cwd=pipeline.repo, stdout=io.StringIO(), stderr=stderr)

    assert code == 1
    assert stderr.getvalue() == (
        "ci-runner: error: CI_RUNNER_WORKERS: must be a whole number, got 'lots'; fix: set "
        "CI_RUNNER_WORKERS to a number from 1 to 512, e.g. 2\n"
    )
    assert leftovers(pipeline, settle=0) == []
    assert pipeline.notes() == []
