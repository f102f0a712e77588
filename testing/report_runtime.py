"""What a test reports a run with: ``results.publish.finish``'s runtime, its console a test's."""

from __future__ import annotations

from dataclasses import dataclass, field

from ci_runner.clock import Clock
from ci_runner.console import StatusOutput
from ci_runner.settings import Settings


@dataclass(frozen=True)
class ReportingRuntime:
    """A :class:`~ci_runner.results.publish.ReportRuntime`: ``console`` any test's, the settings
    an empty environment's unless given."""

    console: StatusOutput
    clock: Clock
    settings: Settings = field(default_factory=Settings)
