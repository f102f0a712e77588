"""The rank prefix of a training log's line: horovodrun's ``[rank]<stdout>:`` /
``[rank]<stderr>:``, mpirun's ``[job,rank]<stdout>:``, torchrun's ``[rank]<std>:`` (both streams
alike: :data:`ci_runner.torchrun_output.TORCHRUN_PREFIX_TEMPLATE`), removed before a metric
pattern sees the line and giving the point's rank."""

from __future__ import annotations

import re
from typing import Final

# ASCII digits, and few: int() of thousands of digits is slow, and refused past 4300.
_PREFIX: Final = re.compile(r"\[(?:[0-9]+,)?([0-9]{1,9})\]<std(?:out|err)?>:")
_PREFIX_BYTES: Final = re.compile(_PREFIX.pattern.encode())
PREFIX_MARK: Final = b"]<std"  # in every prefix: a block without it has none


def split_prefix(line: str) -> tuple[int | None, str]:
    """``(rank, text)`` of a log line: its rank prefix removed."""
    match = _PREFIX.match(line)
    if match is None:
        return None, line
    return int(match.group(1)), line[match.end() :]


def line_rank(data: bytes, position: int) -> int:
    """The prefix rank (or 0) of the line of ``data`` that ``position`` is on."""
    prefix = _PREFIX_BYTES.match(data, data.rfind(b"\n", 0, position) + 1)
    return int(prefix.group(1)) if prefix else 0
