"""The results stage's warnings: GitLab or the log failing never changes the training result."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
import requests

from ci_runner.backends.result import Failure, FailureKind, Outcome, RunResult
from ci_runner.clock import ManualClock
from ci_runner.config.types import TrainConfig
from ci_runner.console import Console
from ci_runner.context import CIContext
from ci_runner.masking import MASK, SecretMasker
from ci_runner.plan.run_plan import OutputPaths, RunPlan
from ci_runner.results.destination import GitLabDestination, open_gitlab
from ci_runner.results.publish import RunRecord, announce, finish
from ci_runner.results.report import ReportInput
from ci_runner.results.report_markdown import extract_history
from ci_runner.settings import read_settings
from testing.fake_gitlab.model import Project as FakeProject
from testing.fake_gitlab.server import DROP, FakeGitLab
from testing.metric_specs import TEST
from testing.plan_cases import trusted_plan
from testing.report_runtime import ReportingRuntime

TOKEN = "glpat-reporting-CANARY-1"
SHA = "3f786850e387550fdab836ed7e6dc881de23001b"
CONFIG = TrainConfig(name="toy", image="img:1", command=("python", "train.py"))
NOW = datetime(2026, 11, 30, tzinfo=timezone.utc)


@pytest.fixture
def project(gitlab_server: FakeGitLab) -> FakeProject:
    bot = gitlab_server.add_user("bot")
    gitlab_server.add_token(TOKEN, bot)
    project = gitlab_server.add_project("group/proj")
    gitlab_server.add_merge_request(project, 4, sha=SHA)
    return project


def ctx(gitlab_server: FakeGitLab) -> CIContext:
    return CIContext(
        sha=SHA,
        project_path="group/proj",
        server_url=gitlab_server.url,
        job_id="77",
        ci_job_name="train",
        mr_iid="4",
        mr_target_branch="main",
    )


def paths(tmp_path: Path) -> OutputPaths:
    return OutputPaths(tmp_path / "out", "ci-runner-out")


def result(log: Path, outcome: Outcome = Outcome.SUCCEEDED) -> RunResult:
    failure = Failure(FailureKind.EXIT_CODE, "boom") if outcome is Outcome.FAILED else None
    return RunResult(outcome=outcome, mpijob_name="toy-3f786850-77", log_path=log, failure=failure)


class Said:
    """What the stage printed, through a console as ``train`` gives it one (masking nothing)."""

    def __init__(self) -> None:
        self.err = io.StringIO()
        self.console = Console(io.StringIO(), self.err)

    def warnings(self) -> list[str]:
        lines = self.err.getvalue().splitlines()
        return [line for line in lines if line.startswith("[ci-runner] warning: ")]


class NoWarnings:
    """A console on which any warning fails the test."""

    def status(self, message: str) -> None:
        pass

    def warning(self, message: str) -> None:
        pytest.fail(f"unexpected warning: {message}")


def run_finish(
    gitlab_server: FakeGitLab, tmp_path: Path, run: RunResult, gitlab: GitLabDestination | None
) -> list[str]:
    said = Said()
    plan = trusted_plan(CONFIG, ctx(gitlab_server), outputs=paths(tmp_path))
    record = RunRecord(replace(plan, masker=SecretMasker([TOKEN])), run)
    finish(ReportingRuntime(said.console, ManualClock(NOW)), record, gitlab)
    return said.warnings()


def finish_quietly(plan: RunPlan, log: Path, gitlab: GitLabDestination | None) -> ReportInput:
    """``finish`` of a succeeded run whose log is ``log``; any warning fails the test."""
    record = RunRecord(replace(plan, masker=SecretMasker([TOKEN])), result(log))
    return finish(ReportingRuntime(NoWarnings(), ManualClock(NOW)), record, gitlab)


def test_no_token_is_one_warning_and_nothing_is_posted(gitlab_server: FakeGitLab) -> None:
    said = Said()
    assert (
        open_gitlab(ctx(gitlab_server), read_settings({"CI_JOB_TOKEN": "job"}), said.console)
        is None
    )
    assert said.warnings() == [
        "[ci-runner] warning: not commenting on GitLab: cannot post the report to GitLab: neither "
        "CI_RUNNER_GITLAB_TOKEN nor GITLAB_TOKEN is set (CI_JOB_TOKEN cannot post merge-request "
        "comments); fix: store a valid project or personal access token with the api scope in "
        "the masked CI/CD variable CI_RUNNER_GITLAB_TOKEN"
    ]


def test_outside_ci_nothing_is_said(gitlab_server: FakeGitLab) -> None:
    said = Said()
    local = CIContext(sha=SHA, project_path="group/proj")
    assert open_gitlab(local, read_settings({}), said.console) is None
    assert said.err.getvalue() == ""


def test_a_garbled_baseline_is_a_warning(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    gitlab_server.set_artifact(project, "main", "train", "ci-runner-out/metrics.json", b"not json")
    gitlab = open_gitlab(
        ctx(gitlab_server), read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), NoWarnings()
    )
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    assert warnings == [
        "[ci-runner] warning: no baseline from main: metrics.json is not valid JSON: "
        "'Expecting value: line 1 column 1 (char 0)'"
    ]
    assert (tmp_path / "out" / "report.md").is_file()


def test_a_garbled_baseline_is_quoted_short(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    garbled = b'{"version": 1, "metrics": {"' + b"x" * 5000 + b'": 3}}'
    gitlab_server.set_artifact(project, "main", "train", "ci-runner-out/metrics.json", garbled)
    gitlab = open_gitlab(
        ctx(gitlab_server), read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), NoWarnings()
    )
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    assert warnings == [
        "[ci-runner] warning: no baseline from main: metrics.json: metric '"
        + "x" * 76
        + "... is not an object"
    ]


def test_a_missing_log_is_a_warning_and_the_report_still_written(
    gitlab_server: FakeGitLab, tmp_path: Path
) -> None:
    log = tmp_path / "gone.log"

    warnings = run_finish(gitlab_server, tmp_path, result(log, Outcome.FAILED), None)

    assert warnings == [f"[ci-runner] warning: no training log at {log}: the report has no metrics"]
    assert "boom" in (tmp_path / "out" / "report.md").read_text()


def test_a_refused_comment_is_a_warning_and_the_token_is_never_shown(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    gitlab = open_gitlab(
        ctx(gitlab_server), read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), NoWarnings()
    )
    gitlab_server.revoke_token(TOKEN)
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    fix = (
        "GitLab rejected the access token (401 Unauthorized); fix: store a valid project or "
        "personal access token with the api scope in the masked CI/CD variable "
        "CI_RUNNER_GITLAB_TOKEN"
    )
    assert warnings == [
        "[ci-runner] warning: no baseline from main: cannot download the baseline "
        f"ci-runner-out/metrics.json of job train on main in group/proj: {fix}",
        "[ci-runner] warning: the comment was not posted: cannot read the comments of merge "
        f"request !4 of group/proj: {fix}",
    ]
    assert project.merge_requests[4].notes == []


def test_gitlab_gone_after_training_is_one_warning_within_the_budget(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    clock = ManualClock()
    env = {"CI_RUNNER_GITLAB_TOKEN": TOKEN, "CI_RUNNER_GITLAB_TIMEOUT": "3"}
    gitlab = open_gitlab(ctx(gitlab_server), read_settings(env), NoWarnings(), clock)
    url = gitlab_server.url
    gitlab_server.inject(DROP, times=100)  # from now on every connection is dropped unanswered
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    assert warnings == [
        "[ci-runner] warning: no baseline from main: cannot download the baseline "
        f"ci-runner-out/metrics.json of job train on main in group/proj: GitLab at {url} did "
        "not answer within the 3 s ci-runner gives it; fix: check CI_SERVER_URL and the "
        "runner's network, or give it more time in CI_RUNNER_GITLAB_TIMEOUT (seconds)"
    ]
    assert clock.sleeps == [0.5, 1.0]  # 0.5 + 1.0 of the 3 s; the next wait would not fit
    assert (tmp_path / "out" / "report.md").is_file()


def test_a_fork_merge_request_is_commented_in_its_target_project_with_its_baseline(
    gitlab_server: FakeGitLab, tmp_path: Path
) -> None:
    gitlab_server.add_token(TOKEN, gitlab_server.add_user("bot"))
    upstream = gitlab_server.add_project("team/ml", project_id=42)
    fork = gitlab_server.add_project("alice/ml", project_id=43, forked_from=upstream)
    gitlab_server.add_merge_request(upstream, 4, sha=SHA, source_project=fork)
    metrics = b'{"version": 1, "metrics": {"loss": {"final": 0.5}}}'
    green = gitlab_server.add_pipeline(
        upstream, "main", jobs={"train": {"ci-runner-out/metrics.json": metrics}}
    )
    fork_ctx = replace(
        ctx(gitlab_server),
        project_path="alice/ml",
        project_id="43",
        mr_project_id="42",
        mr_source_project_id="43",
    )
    gitlab = open_gitlab(fork_ctx, read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), NoWarnings())
    log = tmp_path / "train.log"
    log.write_text("")

    report = finish_quietly(trusted_plan(CONFIG, fork_ctx, outputs=paths(tmp_path)), log, gitlab)

    [note, reply] = gitlab_server.notes(upstream, 4)
    assert note.body.startswith("<!-- ci-runner:toy -->\n### ✅ Training succeeded: `toy`")
    assert reply.body == (
        "<!-- ci-runner-result:job-77 -->\n✅ **Training succeeded**: `toy` · job #77 · "
        f"[full report]({gitlab_server.url}/team/ml/-/merge_requests/4#note_{note.id})"
    )
    assert report.baseline == {"loss": 0.5}
    url = f"{gitlab_server.url}/team/ml/-/pipelines/{green.id}"
    assert report.baseline_pipeline == (green.id, url)
    assert gitlab_server.count("GET", "/projects/43") == 0


def branch_ctx(gitlab_server: FakeGitLab) -> CIContext:
    """A branch (push) pipeline: GitLab gives no CI_MERGE_REQUEST_* variables."""
    return replace(
        ctx(gitlab_server),
        mr_iid=None,
        mr_target_branch=None,
        pipeline_source="push",
        ref_name="feature",
        default_branch="main",
    )


def metrics_json(loss: float) -> bytes:
    return b'{"version": 1, "metrics": {"test_loss": {"final": %.1f}}}' % loss


def test_a_branch_pipeline_compares_each_mr_with_its_own_target_branch(
    gitlab_server: FakeGitLab, tmp_path: Path
) -> None:
    gitlab_server.add_token(TOKEN, gitlab_server.add_user("bot"))
    project = gitlab_server.add_project("group/proj")
    gitlab_server.add_merge_request(project, 4, sha=SHA, target_branch="develop")
    gitlab_server.add_merge_request(project, 5, sha=SHA, target_branch="main")
    gitlab_server.add_merge_request(project, 6, sha=SHA, target_branch="develop")
    path = "ci-runner-out/metrics.json"
    main = gitlab_server.add_pipeline(project, "main", jobs={"train": {path: metrics_json(0.9)}})
    develop = gitlab_server.add_pipeline(
        project, "develop", jobs={"train": {path: metrics_json(0.5)}}
    )
    branch = branch_ctx(gitlab_server)
    gitlab = open_gitlab(branch, read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), NoWarnings())
    log = tmp_path / "train.log"
    log.write_text("[0]<stdout>:Testing. MSE loss: 0.25\n")

    report = finish_quietly(
        trusted_plan(replace(CONFIG, metrics=(TEST,)), branch, outputs=paths(tmp_path)), log, gitlab
    )

    develop_url = f"{gitlab_server.url}/group/proj/-/pipelines/{develop.id}"
    develop_line = f"Baseline: `develop` at [pipeline #{develop.id}]({develop_url})."
    for iid in (4, 6):
        [note, reply] = gitlab_server.notes(project, iid)
        assert develop_line in note.body.splitlines()
        assert reply.body.splitlines()[1].startswith(
            "✅ **Training succeeded**: `toy` · `test_loss` **0.25** (-0.25 (-50.0%) 🟢 better "
            "against `develop`) · job #77 · "
        )
    [note, reply] = gitlab_server.notes(project, 5)
    assert [line for line in note.body.splitlines() if line.startswith("Baseline:")] == [
        f"Baseline: `main` at [pipeline #{main.id}]({gitlab_server.url}/group/proj/-/pipelines/"
        f"{main.id})."
    ]
    assert "`test_loss` **0.25** (-0.65 (-72.2%) 🟢 better against `main`)" in reply.body
    assert report.baseline_ref == "develop"  # report.md: the first MR's (!4) target
    assert report.baseline == {"test_loss": 0.5}
    # one baseline download per distinct target branch
    assert gitlab_server.count("GET", r"/projects/\d+/pipelines$") == 2


def start_and_finish(
    gitlab_server: FakeGitLab,
    tmp_path: Path,
    pipeline: CIContext,
    during_training: Callable[[], object],
) -> None:
    """``train``'s GitLab steps: the destination and "training started", then (after
    ``during_training``) the result."""
    gitlab = open_gitlab(pipeline, read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), NoWarnings())
    plan = trusted_plan(replace(CONFIG, metrics=(TEST,)), pipeline, outputs=paths(tmp_path))
    announce(gitlab, plan, SecretMasker([TOKEN]), NoWarnings())
    during_training()
    log = tmp_path / "train.log"
    log.write_text("[0]<stdout>:Testing. MSE loss: 0.25\n")
    finish_quietly(plan, log, gitlab)


SUCCEEDED = "<!-- ci-runner:toy -->\n### ✅ Training succeeded: `toy`\n"
STARTED = "<!-- ci-runner:toy -->\n### ⏳ Training started: `toy`\n"
REPLY = "<!-- ci-runner-result:job-77 -->"


def test_an_mr_opened_during_training_gets_the_comment_and_the_commit_its_result(
    gitlab_server: FakeGitLab, tmp_path: Path
) -> None:
    gitlab_server.add_token(TOKEN, gitlab_server.add_user("bot"))
    project = gitlab_server.add_project("group/proj")
    gitlab_server.add_commit(project, SHA)

    def open_mr() -> None:
        [discussion] = project.discussions
        assert discussion.notes[0].body.startswith(STARTED)
        gitlab_server.add_merge_request(project, 8, sha=SHA, target_branch="develop")

    start_and_finish(gitlab_server, tmp_path, branch_ctx(gitlab_server), open_mr)

    [note, reply] = gitlab_server.notes(project, 8)
    assert note.body.startswith(SUCCEEDED)
    assert "No baseline from `develop`: no `metrics.json` from a successful target run." in (
        note.body
    )
    assert "`test_loss` **0.25** (no baseline from `develop`)" in reply.body
    [discussion] = project.discussions
    [summary, commit_reply] = discussion.notes
    assert summary.body.startswith(SUCCEEDED)
    assert commit_reply.body.startswith(f"{REPLY}\n✅ **Training succeeded**: `toy` · ")


def test_an_mr_commented_at_the_start_has_its_comment_edited_not_a_second_one(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    def check_started() -> None:
        [note] = gitlab_server.notes(project, 4)
        assert note.body.startswith(STARTED)

    start_and_finish(gitlab_server, tmp_path, branch_ctx(gitlab_server), check_started)

    [note, reply] = gitlab_server.notes(project, 4)
    assert note.body.startswith(SUCCEEDED)
    assert reply.body.startswith(REPLY)
    assert project.discussions == []
    assert gitlab_server.count("POST", r"/merge_requests/4/notes$") == 2  # comment, result


def test_ci_open_merge_requests_names_an_mr_whose_commits_gitlab_has_not_listed_yet(
    gitlab_server: FakeGitLab, tmp_path: Path
) -> None:
    gitlab_server.add_token(TOKEN, gitlab_server.add_user("bot"))
    project = gitlab_server.add_project("group/proj")
    gitlab_server.add_commit(project, SHA)
    # the MR's commit list is refreshed asynchronously after the push: it does not hold SHA yet
    gitlab_server.add_merge_request(project, 9, sha="c" * 40, target_branch="develop")
    gitlab_server.add_merge_request(project, 10, sha="d" * 40, state="closed")
    pipeline = replace(
        branch_ctx(gitlab_server), open_merge_requests="group/proj!9,group/proj!10,other/proj!3"
    )

    start_and_finish(gitlab_server, tmp_path, pipeline, lambda: None)

    [note, reply] = gitlab_server.notes(project, 9)
    assert note.body.startswith(SUCCEEDED)
    assert reply.body.startswith(REPLY)
    assert "No baseline from `develop`" in note.body
    assert gitlab_server.notes(project, 10) == []
    assert project.discussions == []


def test_gitlabs_notes_rate_limit_is_one_warning_within_the_budget(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    gitlab_server.notes_create_limit = 0  # every note create answers GitLab's 429
    clock = ManualClock()
    env = {"CI_RUNNER_GITLAB_TOKEN": TOKEN, "CI_RUNNER_GITLAB_TIMEOUT": "5"}
    gitlab = open_gitlab(ctx(gitlab_server), read_settings(env), NoWarnings(), clock)
    log = tmp_path / "train.log"
    log.write_text("")

    warnings = run_finish(gitlab_server, tmp_path, result(log), gitlab)

    assert warnings == [
        "[ci-runner] warning: the comment was not posted: cannot post the report to merge "
        "request !4 of group/proj: GitLab kept answering 429 Too Many Requests, even after "
        "retries; fix: retry the job once GitLab answers again (the token is being "
        "rate-limited)"
    ]
    assert sum(clock.sleeps) <= 5
    assert project.merge_requests[4].notes == []


def run_and_report(
    gitlab_server: FakeGitLab,
    tmp_path: Path,
    pipeline: CIContext,
    outcome: Outcome = Outcome.SUCCEEDED,
    env: dict[str, str] | None = None,
    log_text: str = "[0]<stdout>:Testing. MSE loss: 0.25\n",
) -> None:
    """One CI job's GitLab steps: "training started", then the result with ``outcome``."""
    env = {"CI_RUNNER_GITLAB_TOKEN": TOKEN, **(env or {})}
    gitlab = open_gitlab(pipeline, read_settings(env), NoWarnings())
    plan = trusted_plan(replace(CONFIG, metrics=(TEST,)), pipeline, outputs=paths(tmp_path))
    announce(gitlab, plan, SecretMasker([TOKEN]), NoWarnings())
    finish_after(gitlab_server, plan, outcome, tmp_path, log_text)


def finish_after(
    gitlab_server: FakeGitLab,
    plan: RunPlan,
    outcome: Outcome,
    tmp_path: Path,
    log_text: str = "[0]<stdout>:Testing. MSE loss: 0.25\n",
    env: dict[str, str] | None = None,
    log_tail: tuple[str, ...] = (),
) -> None:
    """The result of ``plan``'s run, posted as ``train`` (or ``cancel``) posts it."""
    env = {"CI_RUNNER_GITLAB_TOKEN": TOKEN, **(env or {})}
    gitlab = open_gitlab(plan.context, read_settings(env), NoWarnings())
    log = tmp_path / "train.log"
    log.write_text(log_text)
    run = replace(result(log, outcome), log_tail=log_tail)
    record = RunRecord(replace(plan, masker=SecretMasker([TOKEN])), run)
    finish(ReportingRuntime(NoWarnings(), ManualClock(NOW)), record, gitlab)


def events(gitlab_server: FakeGitLab) -> list[tuple[str, str, int]]:
    return [(e.action, e.noteable, e.note_id) for e in gitlab_server.note_events]


def test_a_second_pipeline_keeps_one_comment_and_its_end_notifies_with_a_reply(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    first = replace(ctx(gitlab_server), job_id="77", pipeline_id="10")
    second = replace(ctx(gitlab_server), job_id="78", pipeline_id="11")
    metrics = b'{"version": 1, "metrics": {"test_loss": {"final": 0.5}}}'
    gitlab_server.add_pipeline(
        project, "main", jobs={"train": {"ci-runner-out/metrics.json": metrics}}
    )

    run_and_report(gitlab_server, tmp_path, first)
    run_and_report(gitlab_server, tmp_path, second, Outcome.FAILED)

    summary, reply_77, reply_78 = gitlab_server.notes(project, 4)
    assert [n.body.count("<!-- ci-runner:toy -->") for n in gitlab_server.notes(project, 4)] == [
        1,
        0,
        0,
    ]
    assert summary.body.startswith("<!-- ci-runner:toy -->\n### ❌ Training failed: `toy`")
    assert reply_78.body == (
        "<!-- ci-runner-result:job-78 -->\n❌ **Training failed**: `toy` · `test_loss` **0.25** "
        "(-0.25 (-50.0%) 🟢 better against `main`) · reason: `boom` · job #78 · "
        f"[full report]({gitlab_server.url}/group/proj/-/merge_requests/4#note_{summary.id})"
    )
    assert reply_77.body.startswith("<!-- ci-runner-result:job-77 -->\n✅ **Training succeeded**")
    # notes of their own: no thread, so nothing resolvable that could hold up the merge
    assert len({n.discussion_id for n in (summary, reply_77, reply_78)}) == 3
    assert summary.type is reply_77.type is reply_78.type is None
    # GitLab notifies of the created notes only: "started" once, then each run's end
    mr = "!4"
    assert events(gitlab_server) == [
        ("created", mr, summary.id),
        ("updated", mr, summary.id),
        ("created", mr, reply_77.id),
        ("updated", mr, summary.id),
        ("updated", mr, summary.id),
        ("created", mr, reply_78.id),
    ]
    assert [e.note_id for e in gitlab_server.notifications()] == [
        summary.id,
        reply_77.id,
        reply_78.id,
    ]


def test_cancel_after_train_posted_and_a_rerun_after_script_reply_only_once(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    pipeline = ctx(gitlab_server)
    plan = trusted_plan(replace(CONFIG, metrics=(TEST,)), pipeline, outputs=paths(tmp_path))

    run_and_report(gitlab_server, tmp_path, pipeline)  # train: its result and its reply
    finish_after(gitlab_server, plan, Outcome.CANCELLED, tmp_path)  # then after_script's cancel
    finish_after(gitlab_server, plan, Outcome.CANCELLED, tmp_path)  # and after_script again

    summary, reply = gitlab_server.notes(project, 4)
    assert summary.body.startswith("<!-- ci-runner:toy -->\n### 🚫 Training cancelled: `toy`")
    assert reply.body.startswith(f"{REPLY}\n✅ **Training succeeded**")
    assert [e.note_id for e in gitlab_server.notifications()] == [summary.id, reply.id]


def test_a_cancelled_job_replies_once_however_often_its_after_script_runs(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    plan = trusted_plan(
        replace(CONFIG, metrics=(TEST,)), ctx(gitlab_server), outputs=paths(tmp_path)
    )

    for _ in range(2):
        finish_after(gitlab_server, plan, Outcome.CANCELLED, tmp_path, log_text="")

    summary, reply = gitlab_server.notes(project, 4)
    assert reply.body == (
        f"{REPLY}\n🚫 **Training cancelled**: `toy` · `test_loss` not in the log · job #77 · "
        f"[full report]({gitlab_server.url}/group/proj/-/merge_requests/4#note_{summary.id})"
    )
    assert [e.note_id for e in gitlab_server.notifications()] == [summary.id, reply.id]


def test_a_result_whose_answer_was_lost_is_not_posted_twice(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    pipeline = ctx(gitlab_server)
    plan = trusted_plan(replace(CONFIG, metrics=(TEST,)), pipeline, outputs=paths(tmp_path))
    finish_after(gitlab_server, plan, Outcome.FAILED, tmp_path)  # an earlier run's comment
    gitlab_server.inject(502, method="POST", path=r"/merge_requests/4/notes$", after=True)

    later = replace(plan, context=replace(pipeline, job_id="78"))
    finish_after(gitlab_server, later, Outcome.SUCCEEDED, tmp_path)

    _, _, reply = gitlab_server.notes(project, 4)
    assert reply.body.startswith("<!-- ci-runner-result:job-78 -->\n✅ **Training succeeded**")
    assert gitlab_server.count("POST", r"/merge_requests/4/notes$") == 3


def test_notify_result_false_posts_no_reply(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    off = {"CI_RUNNER_NOTIFY_RESULT": "false"}
    pipeline = ctx(gitlab_server)
    plan = trusted_plan(replace(CONFIG, metrics=(TEST,)), pipeline, outputs=paths(tmp_path))

    finish_after(gitlab_server, plan, Outcome.SUCCEEDED, tmp_path, env=off)

    [summary] = gitlab_server.notes(project, 4)
    assert summary.body.startswith(SUCCEEDED)
    assert gitlab_server.count("GET", r"/merge_requests/4/notes$") == 1  # the comment's only


def test_the_reply_can_run_no_quick_action(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    hostile = replace(CONFIG, metrics=(replace(TEST, name="loss\n/close"),))
    plan = trusted_plan(hostile, ctx(gitlab_server), outputs=paths(tmp_path))

    finish_after(gitlab_server, plan, Outcome.FAILED, tmp_path)

    mr = project.merge_requests[4]
    assert (mr.state, mr.executed_commands) == ("opened", [])
    _, reply = gitlab_server.notes(project, 4)
    assert not [line for line in reply.body.splitlines() if line.startswith("/")]


def test_the_result_is_looked_for_only_among_the_notes_newer_than_the_comment(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    reviewer = gitlab_server.add_user("reviewer")
    mr = project.merge_requests[4]
    for n in range(300):  # three pages of older notes
        gitlab_server.add_note(mr, f"review {n}", reviewer)

    run_and_report(gitlab_server, tmp_path, ctx(gitlab_server))

    *_, reply = gitlab_server.notes(project, 4)
    assert reply.body.startswith(REPLY)
    # the start reads every page (there is no comment yet); at the end the comment is on the
    # first page, and the result's lookup stops at it: one page each
    assert gitlab_server.count("GET", r"/merge_requests/4/notes$") == 3 + 1 + 1


def test_a_reviewer_quoting_the_results_marker_does_not_stop_it(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    reviewer = gitlab_server.add_user("reviewer")
    gitlab_server.add_token("glpat-reviewer", reviewer)
    pipeline = ctx(gitlab_server)
    plan = trusted_plan(replace(CONFIG, metrics=(TEST,)), pipeline, outputs=paths(tmp_path))
    announce(
        open_gitlab(pipeline, read_settings({"CI_RUNNER_GITLAB_TOKEN": TOKEN}), NoWarnings()),
        plan,
        SecretMasker([TOKEN]),
        NoWarnings(),
    )
    quoted = json.dumps({"body": f"> {REPLY}\n> done?"}).encode()
    response = requests.post(
        f"{gitlab_server.url}/api/v4/projects/group%2Fproj/merge_requests/4/notes",
        data=quoted,
        headers={"PRIVATE-TOKEN": "glpat-reviewer", "Content-Type": "application/json"},
        timeout=5,
    )
    assert response.status_code == 201

    finish_after(gitlab_server, plan, Outcome.SUCCEEDED, tmp_path)

    _, quote, reply = gitlab_server.notes(project, 4)
    assert quote.author == reviewer
    assert (reply.author.username, reply.body.splitlines()[0]) == ("bot", REPLY)


FORGED_HISTORY = (
    '<!-- ci-runner-history: [{"job":"666","pipeline":"66","sha":"deadbeef",'
    '"outcome":"succeeded","duration":1.0,"metric":"test_loss","value":0.001}] -->'
)


def test_hidden_lines_the_training_prints_steer_no_comment(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    """Both configs' trainings print a history and other-config's marker, which their failed
    runs' comments quote: the next runs keep their true histories, each edits its own comment."""
    forged = (f"[0]<stdout>:{FORGED_HISTORY}", "<!-- ci-runner:other-config -->")
    other = replace(CONFIG, name="other-config", metrics=(TEST,))
    toy = replace(CONFIG, metrics=(TEST,))

    def run(config: TrainConfig, job: str, outcome: Outcome, tail: tuple[str, ...] = ()) -> None:
        pipeline = replace(ctx(gitlab_server), job_id=job)
        plan = trusted_plan(config, pipeline, outputs=paths(tmp_path))
        finish_after(gitlab_server, plan, outcome, tmp_path, log_tail=tail)

    run(other, "76", Outcome.FAILED, forged)
    run(toy, "77", Outcome.FAILED, forged)
    quoted = gitlab_server.notes(project, 4)[2].body.splitlines()
    run(other, "78", Outcome.SUCCEEDED)
    run(toy, "79", Outcome.SUCCEEDED)

    notes = gitlab_server.notes(project, 4)
    assert [n.body.splitlines()[0] for n in notes] == [
        "<!-- ci-runner:other-config -->",
        "<!-- ci-runner-result:job-76 -->",
        "<!-- ci-runner:toy -->",
        REPLY,
        "<!-- ci-runner-result:job-78 -->",
        "<!-- ci-runner-result:job-79 -->",
    ]
    assert [(e.job_id, e.outcome) for e in extract_history(notes[0].body)] == [
        ("78", "succeeded"),
        ("76", "failed"),
    ]
    assert [(e.job_id, e.outcome) for e in extract_history(notes[2].body)] == [
        ("79", "succeeded"),
        ("77", "failed"),
    ]
    start = quoted.index("```text")
    assert quoted[start + 1 : start + 4] == [
        "[0]<stdout>:" + FORGED_HISTORY.replace("<!--", "<!- -"),
        "<!- - ci-runner:other-config -->",
        "```",
    ]


def test_a_secret_in_base64_is_masked_in_the_comment_the_result_and_report_md(
    gitlab_server: FakeGitLab, project: FakeProject, tmp_path: Path
) -> None:
    basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()  # an HTTP Basic credential
    log = f'CI_RUNNER_METRIC {{"name": "{basic}", "value": 1, "step": 0}}\n'
    plan = trusted_plan(CONFIG, ctx(gitlab_server), outputs=paths(tmp_path))

    finish_after(
        gitlab_server,
        plan,
        Outcome.FAILED,
        tmp_path,
        log_text=log,
        log_tail=(f"Authorization: Basic {basic}",),
    )

    summary, reply = gitlab_server.notes(project, 4)
    report = (tmp_path / "out" / "report.md").read_text()
    shown = "dXNlcjp[MASKED]E="
    assert [line for line in summary.body.splitlines() if MASK in line] == [
        f"| `{shown}` | lower is better | **1** | 1 (step 0, rank 0) | 1 |",
        f"Authorization: Basic {shown}",
        '<!-- ci-runner-history: [{"job":"77","pipeline":null,"sha":"3f786850",'
        f'"outcome":"failed","duration":null,"metric":"{shown}","value":1.0}}] -->',
    ]
    assert report.rstrip("\n") == summary.body
    assert reply.body.startswith(f"{REPLY}\n❌ **Training failed**: `toy` · `{shown}` **1** ")
