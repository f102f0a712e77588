"""The files a run leaves: ``metrics.json`` (the summary, read back as the next run's baseline)
and ``metrics.txt`` (OpenMetrics lines for GitLab's ``artifacts:reports:metrics``)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from ci_runner.errors import CiRunnerError
from ci_runner.results.metrics import MetricsSummary, is_number, short_repr

SCHEMA_VERSION: Final = 1


class MetricsFileError(CiRunnerError):
    """A ``metrics.json`` (e.g. the target branch's baseline) that ci-runner cannot read."""


def summary_to_json(summary: MetricsSummary) -> dict[str, Any]:
    """``metrics.json``: a stable schema (``version`` 1) with the decimated series."""
    return {
        "version": SCHEMA_VERSION,
        "lines": summary.lines,
        "ignored_json_lines": summary.ignored_json,
        "metrics": {
            m.name: {
                "goal": m.goal,
                "count": m.count,
                "unparseable": m.unparseable,
                "final": m.final,
                "final_step": m.final_step,
                "best": m.best,
                "best_step": m.best_step,
                "best_rank": m.best_rank,
                "ranks": {
                    str(s.rank): {
                        "count": s.count,
                        "last_step": s.last_step,
                        "last_value": s.last_value,
                        "points": [[step, value] for step, value in s.points],
                    }
                    for s in m.series
                },
            }
            for m in summary.metrics
        },
    }


def summary_from_json(data: object) -> dict[str, float]:
    """Final values by metric name from a parsed ``metrics.json``; :class:`MetricsFileError`
    when it is not one ci-runner wrote (metrics without a final value are left out)."""
    if not isinstance(data, Mapping):
        raise MetricsFileError("metrics.json is not a JSON object")
    if data.get("version") != SCHEMA_VERSION:
        raise MetricsFileError(
            f"metrics.json has version {short_repr(data.get('version'))}, expected {SCHEMA_VERSION}"
        )
    metrics = data.get("metrics")
    if not isinstance(metrics, Mapping):
        raise MetricsFileError("metrics.json has no 'metrics' object")
    finals: dict[str, float] = {}
    for name, entry in metrics.items():
        if not isinstance(name, str) or not isinstance(entry, Mapping):
            raise MetricsFileError(f"metrics.json: metric {short_repr(name)} is not an object")
        final = entry.get("final")
        if final is None:
            continue
        if not is_number(final) or not math.isfinite(final):
            raise MetricsFileError(
                f"metrics.json: metric {short_repr(name)} has final {short_repr(final)}"
            )
        finals[name] = float(final)
    return finals


def load_baseline(text: str | bytes) -> dict[str, float]:
    """:func:`summary_from_json` of raw ``metrics.json`` text (e.g. a downloaded artifact)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise MetricsFileError(
            f"metrics.json is not valid JSON: {short_repr(str(error))}"
        ) from error
    return summary_from_json(data)


def openmetrics_name(name: str) -> str:
    """``name`` as an OpenMetrics metric name (``[a-zA-Z_:][a-zA-Z0-9_:]*``)."""
    cleaned = re.sub(r"[^a-zA-Z0-9_:]", "_", name) or "_"
    return "_" + cleaned if cleaned[0].isdigit() else cleaned


def summary_to_openmetrics(summary: MetricsSummary) -> str:
    """``metrics.txt`` for GitLab's ``artifacts:reports:metrics``: ``name value`` lines.

    Per metric with points: ``<name> <final>`` and ``<name>_best <best>``. GitLab compares the
    values as strings, so they are written with ``repr`` (shortest round-tripping form).
    """
    lines: list[str] = []
    used: set[str] = set()
    for metric in summary.metrics:
        if metric.final is None or metric.best is None:
            continue
        base = openmetrics_name(metric.name)
        name, n = base, 2
        while name in used or f"{name}_best" in used:
            name, n = f"{base}_{n}", n + 1
        used.update((name, f"{name}_best"))
        lines.append(f"{name} {metric.final!r}")
        lines.append(f"{name}_best {metric.best!r}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
