"""Whether this process may run the emulated cluster (root, network namespaces, memory cgroups),
found without creating anything, and what a test that needs them does without them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

REQUIRE_VARIABLE = "CI_RUNNER_REQUIRE_CLUSTER_RIGHTS"  # set by .ci/run and the e2e CI job
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
CGROUP_MEMORY = (
    Path("/sys/fs/cgroup"),
    Path("/sys/fs/cgroup/unified"),
    Path("/sys/fs/cgroup/memory"),
)


def _effective_capabilities(status: str) -> int:
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def _memory_cgroup_writable() -> bool:
    for root in CGROUP_MEMORY:
        controllers = root / "cgroup.controllers"
        v2 = controllers.is_file() and "memory" in controllers.read_text().split()
        v1 = (root / "memory.limit_in_bytes").exists()
        if (v2 or v1) and os.access(root, os.W_OK):
            return True
    return False


def missing_rights() -> list[str]:
    """The rights the emulated cluster needs that this process lacks, in words."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    caps = _effective_capabilities(Path("/proc/self/status").read_text())
    if not caps & (1 << CAP_NET_ADMIN) or not caps & (1 << CAP_SYS_ADMIN) or not shutil.which("ip"):
        missing.append("network namespaces (CAP_NET_ADMIN, CAP_SYS_ADMIN, iproute2)")
    if not _memory_cgroup_writable():
        missing.append("a writable memory cgroup")
    return missing


def verdict(
    missing: list[str], env: Mapping[str, str], what: str = "the emulated cluster"
) -> tuple[str, str] | None:
    """None when nothing is missing, else ("skip" or "fail", the reason): fail where
    :data:`REQUIRE_VARIABLE` says the rights are given, as in the CI job that runs these tests."""
    if not missing:
        return None
    lacking = ", ".join(missing)
    if env.get(REQUIRE_VARIABLE) == "1":
        return "fail", (
            f"{what} needs {lacking}, which this job lacks, and "
            f"{REQUIRE_VARIABLE}=1 says it has them: run it on a privileged runner as root"
        )
    return "skip", f"{what} needs {lacking} (a privileged runner, as root)"
