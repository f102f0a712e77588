"""train.yaml's ``outputs``: the placeholders it may hold and their expansion for one run."""

from __future__ import annotations

import string
from typing import Final

OUTPUT_PLACEHOLDERS: Final = ("project", "sha", "job")


def expand_outputs(template: str, *, project: str, sha: str, job: str) -> str:
    """``outputs`` with {project}, {sha} and {job} filled in ({{ and }} are literal braces)."""
    values = {"project": project, "sha": sha, "job": job}
    parts: list[str] = []
    for literal, name, spec, conversion in string.Formatter().parse(template):
        parts.append(literal)
        if name is None:
            continue
        if name not in values or spec or conversion:
            raise ValueError(f"unknown placeholder in outputs: {name!r}")  # validated before
        parts.append(values[name])
    return "".join(parts)
