"""Status lines: said once by their identity (what they are about), never by their wording."""

from __future__ import annotations

from ci_runner.backends.kubernetes import status_lines
from ci_runner.backends.kubernetes.podstatus import Role
from ci_runner.backends.kubernetes.status_lines import LineKey, Said, StatusLine, Topic


def test_a_line_is_said_once_by_its_identity_whatever_its_wording() -> None:
    said = Said()
    key = LineKey(Topic.STARTED, ("j-launcher-b2c4d",))
    assert said.once(StatusLine(key, "launcher running (pod j-launcher-b2c4d)")) == [
        "launcher running (pod j-launcher-b2c4d)"
    ]
    assert said.once(StatusLine(key, "the launcher started in pod j-launcher-b2c4d")) == []
    other = LineKey(Topic.STARTED, ("j-launcher-x7k2p",))
    assert said.once(StatusLine(other, "launcher running (pod j-launcher-b2c4d)")) == [
        "launcher running (pod j-launcher-b2c4d)"
    ]
    said.forget()
    assert said.once(StatusLine(key, "again")) == ["again"]


def test_pending_lines_are_one_per_role_and_scheduler_message() -> None:
    workers = status_lines.pending(Role.WORKER, "no GPU")
    assert workers.text == "workers pending: no GPU"
    assert status_lines.pending(Role.LAUNCHER, "no GPU").text == "launcher pending: no GPU"
    assert status_lines.pending(Role.LAUNCHER, "no GPU").key != workers.key
    assert status_lines.pending(Role.WORKER, "no CPU").key != workers.key
    assert status_lines.pending(Role.WORKER, "no GPU") == workers


def test_a_held_launcher_is_said_again_only_when_what_holds_it_changes() -> None:
    end = {"exitCode": 0}
    first = status_lines.held("j-launcher-b2c4d", "launcher", end, ["istio-proxy"], 60)
    assert first.text.startswith(
        "launcher container launcher in pod j-launcher-b2c4d exited with code 0, but container "
        "istio-proxy keeps the pod running"
    )
    longer = status_lines.held("j-launcher-b2c4d", "launcher", end, ["istio-proxy"], 90)
    assert longer.key == first.key  # the grace is our wording, not what happened
    both = ["istio-proxy", "linkerd-proxy"]
    assert status_lines.held("j-launcher-b2c4d", "launcher", end, both, 60).key != first.key
