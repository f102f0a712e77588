"""podstatus: what a pod's or an MPIJob's status says, from the API's dicts."""

from __future__ import annotations

from typing import Any

from ci_runner.backends.kubernetes import podstatus

JSON = dict[str, Any]


def test_condition_needs_status_true() -> None:
    job = {"status": {"conditions": [{"type": "Running", "status": "False"}]}}
    assert podstatus.condition(job, "Running") is None
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "x"}]}}
    assert podstatus.condition(failed, "Failed") == {
        "type": "Failed",
        "status": "True",
        "reason": "x",
    }


def test_pod_status_checks() -> None:
    running = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "main", "state": {"running": {}}},
                {"name": "sidecar", "state": {"terminated": {"exitCode": 0}}},
            ],
        },
    }
    assert podstatus.is_ready(running)
    assert not podstatus.is_running(running)  # a container of it has ended
    assert podstatus.container_started(running)
    assert not podstatus.has_ended(running)
    assert podstatus.containers_ended(running, "sidecar")
    assert not podstatus.containers_ended(running, "main")
    assert not podstatus.containers_ended(running)
    ended = {"status": {"phase": "Failed", "containerStatuses": []}}
    assert podstatus.containers_ended(ended)
    assert not podstatus.containers_ended({"status": {"phase": "Pending"}})
    assert not podstatus.is_ready(
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )


def test_unschedulable_message() -> None:
    pending: JSON = {"status": {"phase": "Pending"}}
    assert podstatus.unschedulable_message(pending) is None
    pending["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}
    ]
    assert podstatus.unschedulable_message(pending) == "no"
    assert not podstatus.is_scheduled(pending)
    assert podstatus.is_scheduled({"spec": {"nodeName": "node-1"}, "status": {}})


def test_the_first_failed_termination_and_the_containers_in_order() -> None:
    pod: JSON = {
        "status": {
            "initContainerStatuses": [
                {"name": "fetch-code", "state": {"terminated": {"exitCode": 0}}}
            ],
            "containerStatuses": [
                {
                    "name": "worker",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        }
    }
    assert [what for what, _ in podstatus.statuses(pod)] == ["init container", "container"]
    assert podstatus.terminated(pod) == {"exitCode": 137, "reason": "OOMKilled"}
    assert podstatus.terminated({"status": {}}) is None


def test_a_suspended_job_and_a_stalled_resume() -> None:
    suspended = {"type": "Suspended", "status": "True"}
    queued = {"spec": {"runPolicy": {"suspend": True}}, "status": {}}
    assert podstatus.is_suspended(queued)
    assert not podstatus.resume_stalled(queued)
    stalled = {"spec": {"runPolicy": {"suspend": False}}, "status": {"conditions": [suspended]}}
    assert not podstatus.is_suspended(stalled)
    assert podstatus.resume_stalled(stalled)
    assert podstatus.is_suspended({"spec": {}, "status": {"conditions": [suspended]}})


def test_a_pod_held_running_by_its_sidecars_once_its_container_ended() -> None:
    def pod(phase: str, *states: tuple[str, str]) -> JSON:
        statuses = [{"name": name, "state": {state: {"exitCode": 0}}} for name, state in states]
        return {"metadata": {}, "status": {"phase": phase, "containerStatuses": statuses}}

    held = pod("Running", ("launcher", "terminated"), ("proxy", "running"), ("agent", "running"))
    assert podstatus.held_by_sidecars(held, "launcher") == ({"exitCode": 0}, ["agent", "proxy"])
    assert podstatus.held_by_sidecars(held, "proxy") is None  # still running
    ended = pod("Succeeded", ("launcher", "terminated"), ("proxy", "running"))
    assert podstatus.held_by_sidecars(ended, "launcher") is None
    alone = pod("Running", ("launcher", "terminated"), ("proxy", "terminated"))
    assert podstatus.held_by_sidecars(alone, "launcher") is None
    deleted = {**held, "metadata": {"deletionTimestamp": "2026-12-04T00:00:00Z"}}
    assert podstatus.held_by_sidecars(deleted, "launcher") is None
