"""The MPIJob's name: DNS-1035 safe, short enough for every object the operator derives from it."""

from __future__ import annotations

import hashlib
import re
from typing import Final

from ci_runner.config.types import TrainConfig
from ci_runner.context import CIContext

DNS_1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_LABEL: Final = 63
# The launcher is a batch/v1 Job "<name>-launcher"; its pod gets "-" + 5 random characters, and
# that pod name is also its hostname, which must stay a 63-character label.
_LAUNCHER_POD_SUFFIX: Final = len("-launcher-") + 5


def max_workers(config: TrainConfig) -> int:
    """The most workers this job can ever have (elastic jobs may grow to ``max_workers``)."""
    return max(config.workers, config.elastic.max_workers if config.elastic else 0)


def max_name_length(config: TrainConfig) -> int:
    """The longest name for which ``<name>-worker-<N-1>`` and the launcher pod stay valid."""
    last_worker = f"-worker-{max_workers(config) - 1}"
    return MAX_LABEL - max(len(last_worker), _LAUNCHER_POD_SUFFIX)


def mpijob_name(config: TrainConfig, ctx: CIContext) -> str:
    """``<config name>-<short sha>-<CI job id>`` (outside CI a hash of the context), cut to fit.

    The same CI job always gets the same name; two CI jobs never share one.
    """
    run_id = _dns_part(ctx.job_id) if ctx.job_id else _context_hash(ctx)
    suffix = f"-{ctx.short_sha}-{run_id}"
    limit = max_name_length(config)
    base = _dns_part(config.name)
    if not base or not base[0].isalpha():
        base = f"j-{base}".rstrip("-")
    base = base[: max(limit - len(suffix), 1)].rstrip("-")
    name = f"{base}{suffix}"
    if len(name) > limit:  # an absurdly long job id: keep its end, which is what differs
        name = f"{base[0]}-{name[len(name) - limit + 2 :].lstrip('-')}"
    return name


def _dns_part(text: str) -> str:
    """``text`` lower-cased with every run of other characters turned into one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _context_hash(ctx: CIContext) -> str:
    key = "\0".join((ctx.project_path, ctx.sha, ctx.ref_name or ""))
    return "l" + hashlib.sha256(key.encode()).hexdigest()[:6]
