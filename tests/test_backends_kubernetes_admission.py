"""Admission refusals: one rule for each, one wording, whoever was refused (ci-runner's own
request, a 403, or a pod the operator or the launcher Job could not create, an Event)."""

from __future__ import annotations

import pytest

from ci_runner.backends.kubernetes import admission, explain
from ci_runner.backends.kubernetes.errors import Forbidden
from ci_runner.backends.kubernetes.resources import PODS
from ci_runner.backends.result import Failure, FailureKind

UNDECLARED = (
    'pods "j-launcher" is forbidden: failed quota: compute: must specify limits.memory for: '
    "istio-proxy,launcher; requests.cpu for: fetch-code"
)
EXCEEDED = (
    'pods "j-worker-1" is forbidden: exceeded quota: gpu, requested: requests.nvidia.com/gpu=1, '
    "used: requests.nvidia.com/gpu=1, limited: requests.nvidia.com/gpu=1"
)
RESTRICTED = (
    'pods "j-worker-0" is forbidden: violates PodSecurity "restricted:latest": '
    'runAsNonRoot != true (pod or container "worker" must set securityContext.runAsNonRoot=true)'
)
BASELINE = (
    'pods "j-launcher-x7k2p" is forbidden: violates PodSecurity "baseline:latest": privileged '
    '(container "istio-proxy" must not set securityContext.privileged=true)'
)
WEBHOOK = 'admission webhook "policy.example.com" denied the request: no latest tags'


def test_a_quota_refusal_names_what_to_set_for_each_container() -> None:
    assert admission.refusal_fix(UNDECLARED, "ml") == (
        "the namespace's ResourceQuota counts cpu and memory, so every container must declare "
        "them: set resources.setup and resources.launcher in train.yaml; ask the cluster's "
        "administrators for a LimitRange with defaults, or for requests and limits on the "
        "containers an admission webhook adds (istio-proxy)"
    )


@pytest.mark.parametrize(
    ("message", "rule"),
    [
        (UNDECLARED, "the namespace's ResourceQuota counts cpu and memory"),
        (EXCEEDED, "a ResourceQuota in namespace ml is used up: wait for other jobs to finish"),
        (RESTRICTED, "namespace ml enforces PodSecurity restricted"),
        (BASELINE, "namespace ml enforces PodSecurity baseline"),
        (WEBHOOK, "an admission policy of the cluster refused it"),
        ('admission webhook "p" denied the request without explanation', "an admission policy"),
        ('User "ci" cannot create resource "secrets"', ""),
    ],
)
def test_each_refusal_has_one_rule(message: str, rule: str) -> None:
    fix = admission.refusal_fix(message, "ml")
    assert fix.startswith(rule) if rule else fix == ""


def test_pod_security_wins_over_the_webhook_s_generic_words() -> None:
    """A PodSecurity refusal mentions a mutating admission webhook in its own fix, and may in its
    message: the level it names makes its fix the more precise one."""
    message = f"{BASELINE} (added by admission webhook)"
    assert admission.refusal_fix(message, "ml").startswith("namespace ml enforces PodSecurity")


@pytest.mark.parametrize("message", [UNDECLARED, EXCEEDED, RESTRICTED, WEBHOOK])
def test_a_refused_request_and_a_refused_pod_get_the_same_fix(message: str) -> None:
    fix = admission.refusal_fix(message, "ml")
    ours = Forbidden("create", PODS, "ml", 403, message)
    assert str(ours) == (
        f"Kubernetes refused to create pods in namespace ml (403 Forbidden: {message}); fix: {fix}"
    )
    event = {
        "type": "Warning",
        "reason": "MPIJobFailed",
        "metadata": {"namespace": "ml"},
        "message": f"worker pod created failed: {message}",
    }
    assert explain.operator_failure(event) == Failure(
        FailureKind.REFUSED,
        f"MPI Operator cannot create the job's pods: worker pod created failed: {message}; "
        f"fix: {fix}",
    )


def test_a_pod_refused_by_a_used_up_quota_gets_the_fix() -> None:
    event = {
        "type": "Warning",
        "reason": "FailedCreate",
        "metadata": {"namespace": "ml"},
        "message": f"Error creating: {EXCEEDED}",
    }
    assert explain.launcher_job_failure(event) == Failure(
        FailureKind.REFUSED,
        f"the launcher Job cannot create the launcher's pod: Error creating: {EXCEEDED}; fix: a "
        "ResourceQuota in namespace ml is used up: wait for other jobs to finish, ask for less "
        "(workers, resources), or have the quota raised",
    )
