"""The validation engine: kinds that check YAML nodes and record every problem with its place.

A :class:`Kind` is the type and constraints of one field. ``check`` turns a node of
:mod:`~ci_runner.config.yamlsource` into a value, or records a :class:`~ci_runner.errors.Problem`
(YAML path, line, what is wrong, how to fix it) and returns :data:`INVALID`, so that one run
reports every mistake. :class:`Record`, :class:`ListOf` and :class:`MapOf` compose kinds; a
Record's ``build`` turns its checked values into the object the rest of ci-runner uses. The kinds
of single values (numbers, strings, words, durations, quantities, a command line) are in
:mod:`~ci_runner.config.scalars`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar, cast

from ci_runner.config.names import Rule, closest
from ci_runner.config.yamlsource import (
    YMapping,
    YNode,
    YScalar,
    YSequence,
    describe,
    index_path,
    key_path,
    shorten,
)
from ci_runner.errors import Problem

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
Values = TypeVar("Values", bound=Mapping[str, object])  # a Record's checked values (a TypedDict)


class Invalid:
    """The type of :data:`INVALID`: a value that failed validation (its problem is recorded)."""

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Final = Invalid()


@dataclass
class Context:
    """One validation run: the file, the problems found so far, the line of every value seen,
    and the mapping each known key belongs to (for "belongs under ...; move it there")."""

    file: str
    problems: list[Problem] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # YAML path -> line of its value
    homes: Mapping[str, str] = field(default_factory=dict)  # key -> path of its mapping


@dataclass(frozen=True)
class At:
    """Where a value is being checked: the path, and the example shown in fixes."""

    context: Context
    path: str
    example: str  # e.g. "workers: 2"

    def problem(self, line: int | None, message: str, fix: str, path: str | None = None) -> Invalid:
        """Record a problem at this place (or at ``path``); returns INVALID for the caller."""
        where = self.path if path is None else path
        self.context.problems.append(Problem(self.context.file, where, line, message, fix))
        return INVALID

    def wrong_type(self, node: YNode, noun: str) -> Invalid:
        """Record that ``node`` is not ``noun`` ("a whole number")."""
        return self.problem(
            node.line, f"must be {noun}, got {describe(node)}", f"write {noun}, e.g. {self.example}"
        )

    def key(self, key: str, example: str) -> At:
        """The place of ``key`` in the mapping here."""
        return At(self.context, key_path(self.path, key), example)

    def item(self, index: int) -> At:
        """The place of item ``index`` in the list here."""
        return At(self.context, index_path(self.path, index), self.example)

    def line_of(self, key: str) -> int | None:
        """The line of ``key``'s value in the mapping here, if it was seen."""
        return self.context.lines.get(key_path(self.path, key))


class Kind(Generic[T_co]):
    """The type of a field: ``doc`` names it in the reference, ``check`` validates a node."""

    doc = "value"

    def check(self, node: YNode, at: At) -> T_co | Invalid:
        raise NotImplementedError


def check(kind: Kind[T], node: YNode, at: At) -> T | Invalid:
    """``kind.check``, except for values the YAML reader could not read (already reported)."""
    if isinstance(node, YScalar) and node.broken:
        return INVALID
    return kind.check(node, at)


@dataclass(frozen=True)
class Field:
    """One key of a mapping: its kind, whether it is required, and its documentation."""

    key: str
    kind: Kind[object]
    description: str
    example: str  # the value as written in YAML, e.g. "2h"
    default: str = ""  # as shown in the reference; "" when there is none
    required: bool = False


def shown_default(record: type, key: str, *, duration: bool = False) -> str:
    """A :class:`Field`'s default as the reference shows it: the dataclass's own default
    (written once, in :mod:`ci_runner.config.types`), with a duration's short form:
    "`1800` (30m)"."""
    value = next(f.default for f in dataclasses.fields(record) if f.name == key)
    shown = f"`{value}`"
    if not duration or not isinstance(value, int):
        return shown
    for unit, seconds in (("h", 3600), ("m", 60)):
        if value and value % seconds == 0:
            return f"{shown} ({value // seconds}{unit})"
    return f"{shown} ({value}s)"


# A Record's builder: (checked values, where, whether every field was valid, the keys written)
# → the object, or INVALID. It runs even when a field was invalid, so that checks across
# several fields report their problems in the same run.
Build = Callable[[Values, At, bool, frozenset[str]], "T_co | Invalid"]


class Record(Kind[T_co], Generic[Values, T_co]):
    """A mapping with known keys; ``build`` turns the checked values into the result object.

    ``Values`` is a TypedDict naming each field's checked type; the engine trusts it to match
    the fields' kinds (a test in tests/test_config_schema.py compares them for the schema).
    """

    def __init__(self, *fields: Field, build: Build[Values, T_co], doc: str = "mapping") -> None:
        self.fields = fields
        self.build = build
        self.doc = doc

    def check(self, node: YNode, at: At) -> T_co | Invalid:
        if not isinstance(node, YMapping):
            return at.wrong_type(node, "a mapping")
        before = len(at.context.problems)
        known = {item.key: item for item in self.fields}
        values: dict[str, object] = {}
        complete = True
        for entry in node:
            spec = known.get(entry.key)
            if spec is None:
                guess = closest(entry.key, list(known))
                home = at.context.homes.get(entry.key)
                if home is not None and home != at.path:
                    where = f"under {home}" if home else "at the top level"
                    fix = f"{entry.key} belongs {where}; move it there"
                elif guess is not None:
                    fix = f"did you mean {guess!r}?"
                else:
                    fix = "remove it; allowed keys: " + ", ".join(known)
                at.problem(entry.key_line, "unknown key", fix, path=key_path(at.path, entry.key))
                continue
            child = at.key(entry.key, f"{entry.key}: {spec.example}")
            at.context.lines[child.path] = entry.value.line
            value = check(spec.kind, entry.value, child)
            if isinstance(value, Invalid):
                complete = False
            else:
                values[entry.key] = value
        for spec in self.fields:
            if spec.required and node.get(spec.key) is None:
                at.problem(
                    node.line,
                    "is required",
                    f"add it, e.g. {spec.key}: {spec.example}",
                    path=key_path(at.path, spec.key),
                )
        ok = complete and len(at.context.problems) == before
        # The one place static typing trusts the schema: each value was checked by its field's
        # kind, and ``Values`` states those kinds' types.
        return self.build(cast(Values, values), at, ok, frozenset(node.keys()))


def homes(record: Record[Values, object], path: str = "") -> dict[str, str]:
    """Every key of ``record`` and of the records nested in it → the path of the mapping it
    belongs to ("" for the top level); the first place wins for a key used twice."""
    found: dict[str, str] = {}
    for spec in record.fields:
        found.setdefault(spec.key, path)
        if isinstance(spec.kind, Record):
            for key, home in homes(spec.kind, key_path(path, spec.key)).items():
                found.setdefault(key, home)
    return found


class ListOf(Kind[tuple[T_co, ...]]):
    """A list of items of one kind, optionally without repeats and with at most ``limit`` items."""

    def __init__(self, item: Kind[T_co], *, doc: str, unique: bool = False, limit: int = 0) -> None:
        self.item = item
        self.doc = doc
        self.unique = unique
        self.limit = limit

    def check(self, node: YNode, at: At) -> tuple[T_co, ...] | Invalid:
        if not isinstance(node, YSequence):
            return at.wrong_type(node, "a list")
        if self.limit and len(node.items) > self.limit:
            return at.problem(
                node.line,
                f"may have at most {self.limit} items, got {len(node.items)}",
                f"remove {len(node.items) - self.limit}",
            )
        values: list[T_co] = []
        seen: dict[object, int] = {}
        ok = True
        for index, item in enumerate(node.items):
            item_at = at.item(index)
            at.context.lines[item_at.path] = item.line
            value = check(self.item, item, item_at)
            if isinstance(value, Invalid):
                ok = False
                continue
            if self.unique and value in seen:
                item_at.problem(
                    item.line,
                    f"repeats {shorten(str(value))} (also item {seen[value]})",
                    "list each one once",
                )
                ok = False
                continue
            seen[value] = index
            values.append(value)
        return tuple(values) if ok else INVALID


class MapOf(Kind[tuple[tuple[str, T_co], ...]]):
    """A mapping from names (checked by ``key_rule``) to values of one kind, as (name, value)
    pairs in the file's order, with at most ``limit`` entries."""

    def __init__(self, key_rule: Rule, value: Kind[T_co], *, doc: str, limit: int = 0) -> None:
        self.key_rule = key_rule
        self.value = value
        self.doc = doc
        self.limit = limit

    def check(self, node: YNode, at: At) -> tuple[tuple[str, T_co], ...] | Invalid:
        if not isinstance(node, YMapping):
            return at.wrong_type(node, "a mapping")
        if self.limit and len(node.entries) > self.limit:
            return at.problem(
                node.line,
                f"may have at most {self.limit} entries, got {len(node.entries)}",
                f"remove {len(node.entries) - self.limit}",
            )
        pairs: list[tuple[str, T_co]] = []
        ok = True
        for entry in node:
            child = at.key(entry.key, at.example)
            at.context.lines[child.path] = entry.value.line
            wrong = self.key_rule(entry.key)
            if wrong is not None:
                child.problem(entry.key_line, wrong[0], wrong[1])
                ok = False
                continue
            value = check(self.value, entry.value, child)
            if isinstance(value, Invalid):
                ok = False
                continue
            pairs.append((entry.key, value))
        return tuple(pairs) if ok else INVALID
