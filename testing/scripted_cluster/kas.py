"""The GitLab agent server (KAS) in front of the scripted cluster, as a CI job reaches it: a
:class:`~testing.scripted_cluster.faults.FaultProxy` with :func:`kas_credentials`."""

from __future__ import annotations

from collections.abc import Callable


def kas_credentials(
    agent_id: int, job_token: str, account_token: str
) -> Callable[[str], str | None]:
    """What the GitLab agent server does with a CI job's ``ci:<agent id>:<job token>``
    (gitlabhq app/services/ci/generate_kubeconfig_service.rb makes it): it asks GitLab which
    agents the job token may use (lib/api/internal/kubernetes.rb, ``GET
    /api/v4/job/allowed_agents``) and proxies to that agent, which calls kube-apiserver as its
    own ServiceAccount (ci_access without ``access_as``, i.e. ``access_as: agent``, the
    default: docs.gitlab.com/user/clusters/agent/ci_cd_workflow/). Here: only ``agent_id``
    with ``job_token`` is let through, with ``account_token`` (the agent's account)."""
    expected = f"ci:{agent_id}:{job_token}"
    return lambda token: account_token if token == expected else None
