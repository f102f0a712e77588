"""Metrics from the training log: one streaming pass, bounded memory, pure.

Each log line is matched with horovodrun's ``[rank]<stdout>:`` / ``[rank]<stderr>:`` prefix
removed (mpirun's ``[job,rank]<stdout>:`` too). Two sources of points:

* the ``metrics`` patterns of ``train.yaml``: the first match in the line, by RE2
  (:mod:`ci_runner.config.linear`: time linear in the line, whatever the pattern), named group
  ``value`` and optionally ``step`` and ``rank``;
* a structured line for programs that prefer printing JSON::

      CI_RUNNER_METRIC {"name": "train_loss", "value": 0.5, "step": 3}

  ``name`` (string) and ``value`` (number) are required; ``step`` and ``rank`` (integers) and
  ``goal`` (``"min"``/``"max"``, for names ``train.yaml`` does not declare) are optional.
  Such a line is never matched against the patterns.

The rank is the ``rank`` group/field, else the line's prefix, else 0. Without a step, each rank
numbers its points 0, 1, 2, ... A value that is not a finite number (``nan``, ``inf``, ``1,5``)
or a step/rank that is not an integer is counted as *unparseable* and reported, never fatal:
a NaN loss is exactly what the report must point out, and it cannot be averaged or charted.

Exact per metric: the number of points, the best point (over every rank and step, by the goal)
and the final value: the mean over ranks of each rank's value at the highest step any rank
reported. The series kept for the chart are decimated: at most :data:`SERIES_CAPACITY` points per
metric over all its ranks (each rank keeps at most ``SERIES_CAPACITY // ranks``, evenly spread,
always with its last point: :mod:`~ci_runner.results.rank_series`), so a 1 GiB log or 1,024
ranks cost a few MB, as much as 8 ranks.

:func:`parse_log_file` reads the log in blocks of whole lines; :class:`LogParser` parses it so
as it streams in during training. A block goes through few
passes (RE2 over its UTF-8 bytes, ``float``/``int`` over the columns, a sort by rank) when every
pattern is one :mod:`ci_runner.results.linepattern` proves exact over blocks, no
``CI_RUNNER_METRIC`` line is in it and every value and number converts plainly
(:mod:`~ci_runner.results.block_points`); otherwise line by line. Both ways give the same
summary. The rank prefix is :mod:`~ci_runner.results.rank_prefix`'s.
"""

from __future__ import annotations

import io
import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ci_runner.config.linear import LinearPattern, encode
from ci_runner.config.types import Goal, MetricSpec
from ci_runner.results.block_points import BlockPattern
from ci_runner.results.rank_prefix import split_prefix
from ci_runner.results.rank_series import RankSeries, SeriesState

JSON_PREFIX: Final = "CI_RUNNER_METRIC"
# Points kept per metric for the chart, over all its ranks (each its share); a rank's are halved
# by dropping every other point when full.
SERIES_CAPACITY: Final = 32_768
# Caps that keep memory bounded whatever the log says.
MAX_RANKS_PER_METRIC: Final = 1024
MAX_JSON_METRICS: Final = 50
MAX_NAME_CHARS: Final = 100
SAMPLE_CHARS: Final = 80  # text quoted in a message (a bad value, a garbled baseline)
MAX_PARSED_LINE_CHARS: Final = 16 * 1024 * 1024  # longer lines are read (and matched) in pieces
BLOCK_CHARS: Final = 1024 * 1024  # read at a time by parse_log_file
PARSE_CHARS: Final = 256 * 1024  # held by LogParser before its whole lines are matched


@dataclass(frozen=True)
class MetricResult:
    """Everything the report and the artifacts need about one metric."""

    name: str
    goal: Goal
    count: int  # points parsed, all ranks
    unparseable: int  # matches whose value/step/rank was not a finite number / integer
    final: float | None  # mean over ranks at final_step; None when no point was seen
    final_step: int | None
    best: float | None
    best_step: int | None
    best_rank: int | None
    series: tuple[RankSeries, ...]  # by rank
    unparseable_sample: str | None = None  # the first bad value text, cut to SAMPLE_CHARS

    @property
    def found(self) -> bool:
        return self.count > 0


@dataclass(frozen=True)
class MetricsSummary:
    """The metrics of one log, declared ones first (``train.yaml`` order), then JSON-only ones."""

    metrics: tuple[MetricResult, ...]
    lines: int  # log lines read
    ignored_json: int = 0  # CI_RUNNER_METRIC lines that were malformed or over the caps

    def get(self, name: str) -> MetricResult | None:
        return next((m for m in self.metrics if m.name == name), None)

    @property
    def unparseable(self) -> int:
        return sum(m.unparseable for m in self.metrics)


# Told of every point as it is parsed: (metric, rank, step, value); for ci_runner.tracking.
OnPoint = Callable[[str, int, int, float], None]


class _Metric:
    """Streaming state of one metric."""

    def __init__(self, name: str, goal: Goal, on_point: OnPoint | None = None) -> None:
        self.on_point = on_point
        self.name = name
        self.goal: Goal = goal
        self.ranks: dict[int, SeriesState] = {}
        self.unparseable = 0
        self.sample: str | None = None
        self.best: tuple[float, int, int] | None = None  # value, step, rank

    def bad(self, text: str) -> None:
        self.unparseable += 1
        if self.sample is None:
            self.sample = text[:SAMPLE_CHARS]

    def _new_series(self, rank: int) -> SeriesState:
        """The series of a rank not seen before; every rank's share of the points shrinks."""
        capacity = max(1, SERIES_CAPACITY // (len(self.ranks) + 1))
        for other in self.ranks.values():
            other.shrink(capacity)
        series = self.ranks[rank] = SeriesState(capacity)
        return series

    def add(self, rank: int, step: int | None, value: float) -> None:
        series = self.ranks.get(rank)
        if series is None:
            if len(self.ranks) >= MAX_RANKS_PER_METRIC:
                self.bad(f"rank {rank}")
                return
            series = self._new_series(rank)
        if step is None:
            step = series.count
        series.add(step, value)
        if self.on_point is not None:
            self.on_point(self.name, rank, step, value)
        self._offer_best(value, step, rank)

    def _offer_best(self, value: float, step: int, rank: int) -> None:
        """Keep (value, step, rank) when strictly better than the best so far: the first wins."""
        best = self.best
        if best is None or (value < best[0] if self.goal == "min" else value > best[0]):
            self.best = (value, step, rank)

    def fits(self, ranks: Sequence[int]) -> bool:
        """Whether ``ranks`` stay within :data:`MAX_RANKS_PER_METRIC` (else: line by line)."""
        return len(self.ranks.keys() | set(ranks)) <= MAX_RANKS_PER_METRIC

    def add_block(
        self, ranks: Sequence[int], steps: Sequence[int] | None, values: Sequence[float]
    ) -> None:
        """:meth:`add` of each point in arrival order, a rank's points at a time."""
        count = len(values)
        if not count:
            return
        pick = min if self.goal == "min" else max
        best = pick(range(count), key=values.__getitem__)  # the first of the best, as in add()
        order = sorted(range(count), key=ranks.__getitem__)  # stable: arrival order in a rank
        by_rank = list(map(ranks.__getitem__, order))
        best_step = 0
        start = 0
        while start < count:
            rank = by_rank[start]
            end = bisect_right(by_rank, rank, start)
            indices = order[start:end]
            series = self.ranks.get(rank)
            if series is None:
                series = self._new_series(rank)
            if steps is None:
                rank_steps: Sequence[int] = range(series.count, series.count + len(indices))
            else:
                rank_steps = list(map(steps.__getitem__, indices))
            if rank == ranks[best]:
                best_step = rank_steps[bisect_left(indices, best)]
            rank_values = list(map(values.__getitem__, indices))
            series.add_block(rank_steps, rank_values)
            if self.on_point is not None:
                for step, value in zip(rank_steps, rank_values, strict=True):
                    self.on_point(self.name, rank, step, value)
            start = end
        self._offer_best(values[best], best_step, ranks[best])

    def freeze(self) -> MetricResult:
        series = tuple(self.ranks[r].freeze(r) for r in sorted(self.ranks))
        final = final_step = None
        if self.ranks:
            final_step = max(s.max_step for s in self.ranks.values())
            at_final = [s.value_at_max for s in self.ranks.values() if s.max_step == final_step]
            final = math.fsum(at_final) / len(at_final)
        best = self.best
        return MetricResult(
            name=self.name,
            goal=self.goal,
            count=sum(s.count for s in series),
            unparseable=self.unparseable,
            final=final,
            final_step=final_step,
            best=None if best is None else best[0],
            best_step=None if best is None else best[1],
            best_rank=None if best is None else best[2],
            series=series,
            unparseable_sample=self.sample,
        )


def _finite(raw: str | float) -> float | None:
    try:
        value = float(raw)
    except (ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    digits = text.strip()
    unsigned = digits[1:] if digits[:1] in ("+", "-") else digits
    if not (unsigned.isascii() and unsigned.isdigit() and len(unsigned) <= 18):
        raise ValueError(text)
    return int(digits)


class _Parser:
    def __init__(self, specs: Sequence[MetricSpec], on_point: OnPoint | None = None) -> None:
        self.on_point = on_point
        self.specs = tuple(specs)
        self.metrics: dict[str, _Metric] = {}
        for spec in self.specs:
            self.metrics.setdefault(spec.name, _Metric(spec.name, spec.goal, on_point))
        self.declared = len(self.metrics)
        self.lines = 0
        self.ignored_json = 0
        # Every match runs on RE2 (validation refused the patterns it cannot run), never on
        # Python's re: a backtracking engine meets the log's lines in exponential time.
        self.linear = [LinearPattern(spec.pattern.pattern) for spec in self.specs]
        patterns = [BlockPattern.of(spec.pattern) for spec in self.specs]
        unique = len(self.metrics) == len(self.specs)
        self.block_patterns = (
            [p for p in patterns if p is not None] if unique and None not in patterns else None
        )

    def feed_block(self, block: str) -> None:
        """Lines of a log, each ending with ``\\n`` but maybe the last: as :meth:`feed` each."""
        if not self._block_at_once(block):
            lines = block.split("\n")
            if block.endswith("\n"):
                lines.pop()
            for line in lines:
                self.feed(line)

    def _block_at_once(self, block: str) -> bool:
        if self.block_patterns is None or JSON_PREFIX in block:
            return False
        found = []
        data = encode(block)
        for spec, pattern in zip(self.specs, self.block_patterns, strict=True):
            points = pattern.points(data)
            metric = self.metrics[spec.name]
            if points is None or not metric.fits(points[0]):
                return False
            found.append((metric, points))
        for metric, (ranks, steps, values) in found:
            metric.add_block(ranks, steps, values)
        self.lines += block.count("\n") + (not block.endswith("\n"))
        return True

    def feed(self, raw: str) -> None:
        self.lines += 1
        prefix_rank, text = split_prefix(raw.rstrip("\r\n"))
        if JSON_PREFIX in text:
            stripped = text.lstrip()
            if stripped.startswith(JSON_PREFIX):
                self._json(stripped[len(JSON_PREFIX) :], prefix_rank)
                return
        for spec, pattern in zip(self.specs, self.linear, strict=True):
            groups = pattern.search(text)
            if groups is not None:
                self._match(self.metrics[spec.name], groups, prefix_rank)

    def _match(
        self, metric: _Metric, groups: dict[str, str | None], prefix_rank: int | None
    ) -> None:
        value_text = groups.get("value") or ""
        value = _finite(value_text)
        if value is None:
            metric.bad(value_text)
            return
        try:
            step = _integer(groups.get("step"))
            rank = _integer(groups.get("rank"))
        except ValueError as bad:
            metric.bad(str(bad))
            return
        metric.add(rank if rank is not None else (prefix_rank or 0), step, value)

    def _json(self, payload: str, prefix_rank: int | None) -> None:
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError):
            self.ignored_json += 1
            return
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
            self.ignored_json += 1
            return
        metric = self.metrics.get(name)
        if metric is None:
            if len(self.metrics) - self.declared >= MAX_JSON_METRICS:
                self.ignored_json += 1
                return
            goal: Goal = "max" if data.get("goal") == "max" else "min"
            metric = self.metrics[name] = _Metric(name, goal, self.on_point)
        raw_value = data.get("value")
        value = _finite(raw_value) if is_number(raw_value) else None
        step = data.get("step")
        rank = data.get("rank")
        if (
            value is None
            or not (_is_int(step) or step is None)
            or not (_is_int(rank) or rank is None)
        ):
            metric.bad(short_repr(raw_value))
            return
        metric.add(rank if rank is not None else (prefix_rank or 0), step, value)

    def summary(self) -> MetricsSummary:
        return MetricsSummary(
            metrics=tuple(m.freeze() for m in self.metrics.values()),
            lines=self.lines,
            ignored_json=self.ignored_json,
        )


def is_number(value: object) -> bool:
    """A JSON number: int or float, not bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**63


def parse_metrics(lines: Iterable[str], specs: Sequence[MetricSpec]) -> MetricsSummary:
    """Every metric in ``lines`` (one pass; memory bounded by the caps, not by the log)."""
    parser = _Parser(specs)
    for line in lines:
        parser.feed(line)
    return parser.summary()


class LogParser:
    """The metrics of a log as it is written: :meth:`feed` takes its text in pieces split
    anywhere (the LogSink's echo, as lines stream in during training), :meth:`summary` gives
    what :func:`parse_log_file` gives of the same text saved, without reading it again. Text is
    held until :data:`PARSE_CHARS` of it came, then its whole lines are matched as one block:
    256 ranks write a line each a step, and a block per step would cost a pass per rank. A line
    longer than :data:`MAX_PARSED_LINE_CHARS` is matched in pieces that long, as
    ``readline(MAX_PARSED_LINE_CHARS)`` reads it."""

    def __init__(self, specs: Sequence[MetricSpec], on_point: OnPoint | None = None) -> None:
        self._parser = _Parser(specs, on_point)
        self._held: list[str] = []  # text not parsed yet, in pieces
        self._held_chars = 0

    def feed(self, text: str) -> None:
        """The next piece of the log."""
        if not text:
            return
        self._held.append(text)
        self._held_chars += len(text)
        if self._held_chars >= PARSE_CHARS:
            self._parse_held(final=False)

    def summary(self) -> MetricsSummary:
        """Every metric so far, an unterminated last line included."""
        self._parse_held(final=True)
        return self._parser.summary()

    def _parse_held(self, final: bool) -> None:
        """Match the whole lines held (every line, ``final``); hold the rest."""
        text = "".join(self._held)
        cut = len(text) if final else text.rfind("\n") + 1
        body, carry = text[:cut], text[cut:]
        if len(body) > MAX_PARSED_LINE_CHARS:  # it may hold an overlong line
            for piece in _readline_pieces(body):
                self._parser.feed_block(piece)
        elif body:
            self._parser.feed_block(body)
        while len(carry) >= MAX_PARSED_LINE_CHARS:
            self._parser.feed_block(carry[:MAX_PARSED_LINE_CHARS])
            carry = carry[MAX_PARSED_LINE_CHARS:]
        self._held, self._held_chars = ([carry] if carry else []), len(carry)


def parse_log_file(
    path: Path, specs: Sequence[MetricSpec], on_point: OnPoint | None = None
) -> MetricsSummary:
    """:func:`parse_metrics` over a saved log's lines as ``readline(MAX_PARSED_LINE_CHARS)`` reads
    them (undecodable bytes replaced, never fatal), a block of lines at a time; ``on_point`` is
    told of every point kept (each rank's in arrival order)."""
    parser = LogParser(specs, on_point)
    with path.open(encoding="utf-8", errors="replace") as log:
        while chunk := log.read(BLOCK_CHARS):
            parser.feed(chunk)
    return parser.summary()


def _readline_pieces(text: str) -> Iterator[str]:
    lines = io.StringIO(text)
    while line := lines.readline(MAX_PARSED_LINE_CHARS):
        yield line


def short_repr(value: object) -> str:
    """``repr(value)`` cut to :data:`SAMPLE_CHARS`, for quoting a bad value in a message."""
    text = repr(value)
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 3] + "..."
