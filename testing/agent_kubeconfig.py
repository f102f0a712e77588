"""The KUBECONFIG GitLab gives a CI job through the GitLab agent for Kubernetes, for three agents
(so no context is current until one is chosen)."""

from __future__ import annotations

from pathlib import Path

import yaml

# The GitLab agent for Kubernetes: the KUBECONFIG GitLab gives every job of a project an agent's
# ci_access authorizes. Its shape, rule by rule (gitlabhq):
# - one cluster "gitlab", server the agent server's (KAS) proxy URL, no CA when it has none
#   (app/services/ci/generate_kubeconfig_service.rb:12-15,43-44; entry/cluster.rb:27-31);
# - per agent a user "agent:<agent id>" whose token is "ci:<agent id>:<job token>"
#   (generate_kubeconfig_service.rb:20-23,47-48,55-56; entry/user.rb:16-20);
# - per agent a context "<agent configuration project path>:<agent name>" with that cluster and
#   user, and a namespace only when ci_access sets default_namespace
#   (generate_kubeconfig_service.rb:25-29,51-52; entry/context.rb:9,27-31);
# - no current-context at all (lib/gitlab/kubernetes/kubeconfig/template.rb:35-43).
# Through the agent, requests are made as the identity the agent impersonates: with
# access_as ci_job, "gitlab:ci_job:<job id>"
# (https://docs.gitlab.com/user/clusters/agent/ci_cd_workflow/#restrict-project-and-group-access-by-using-impersonation).

JOB_TOKEN = "glcbt-64_job-token-value"
AGENTS = (  # (agent id, agent configuration project, agent name, default_namespace)
    (11, "ml/k8s-agents", "cpu-cluster", None),
    (12, "ml/k8s-agents", "gpu-cluster", "ml-training"),
    (31, "platform/shared/agents", "sandbox", "sandbox"),
)
CONTEXTS = "ml/k8s-agents:cpu-cluster, ml/k8s-agents:gpu-cluster, platform/shared/agents:sandbox"


def gitlab_kubeconfig(
    tmp_path: Path, server: str = "https://kas.gitlab.example.com/k8s-proxy/"
) -> Path:
    """tmp_path/KUBECONFIG as GitLab writes it for :data:`AGENTS`, every cluster at ``server``."""
    users, contexts = [], []
    for agent_id, project, name, namespace in AGENTS:
        users.append({"name": f"agent:{agent_id}", "user": {"token": f"ci:{agent_id}:{JOB_TOKEN}"}})
        context = {"cluster": "gitlab", "user": f"agent:{agent_id}"}
        if namespace:
            context["namespace"] = namespace
        contexts.append({"name": f"{project}:{name}", "context": context})
    path = tmp_path / "KUBECONFIG"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gitlab", "cluster": {"server": server}}],
                "users": users,
                "contexts": contexts,
            }
        )
    )
    return path
