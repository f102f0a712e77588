"""testing/rights: what an emulated-cluster test does without root, netns or cgroups."""

from __future__ import annotations

from testing.rights import REQUIRE_VARIABLE, _effective_capabilities, verdict

LACKING = ["root", "a writable memory cgroup"]


def test_nothing_missing_runs() -> None:
    assert verdict([], {REQUIRE_VARIABLE: "1"}) is None


def test_missing_rights_skip_with_the_reason() -> None:
    assert verdict(LACKING, {}) == (
        "skip",
        "the emulated cluster needs root, a writable memory cgroup (a privileged runner, as root)",
    )


def test_missing_rights_fail_where_the_ci_job_requires_them() -> None:
    assert verdict(LACKING, {REQUIRE_VARIABLE: "1"}) == (
        "fail",
        "the emulated cluster needs root, a writable memory cgroup, which this job lacks, and "
        "CI_RUNNER_REQUIRE_CLUSTER_RIGHTS=1 says it has them: run it on a privileged runner "
        "as root",
    )
    assert verdict(LACKING, {REQUIRE_VARIABLE: "0"})[0] == "skip"  # type: ignore[index]


def test_capabilities_are_read_from_proc_status() -> None:
    assert _effective_capabilities("Name:\tx\nCapEff:\t0000000000201000\n") == (1 << 21) | (1 << 12)
    assert _effective_capabilities("Name:\tx\n") == 0
