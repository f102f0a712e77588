"""The validation engine: kinds that check YAML nodes and record every problem with its place.

A :class:`Kind` is the type and constraints of one field. ``check`` turns a node of
:mod:`~ci_runner.config.yamlsource` into a value, or records a :class:`~ci_runner.errors.Problem`
(YAML path, line, what is wrong, how to fix it) and returns :data:`INVALID`, so that one run
reports every mistake. :class:`Record`, :class:`ListOf` and :class:`MapOf` compose kinds; a
Record's ``build`` turns its checked values into the object the rest of ci-runner uses.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Final, Generic, TypeVar, cast

from ci_runner.config.names import Rule, Wrong, closest
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
Word = TypeVar("Word", bound=str)  # one of a OneOf's words (a Literal type)

MAX_INT32: Final = 2**31 - 1
MAX_DURATION: Final = 7 * 24 * 3600  # seconds


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


def number(text: str) -> str:
    """A number as written, cut short if it is absurdly long."""
    return text if len(text) <= 20 else text[:17] + "..."


class Int(Kind[int]):
    """A whole number within [minimum, maximum]."""

    def __init__(self, minimum: int, maximum: int = MAX_INT32) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.doc = (
            f"integer ≥ {minimum}" if maximum == MAX_INT32 else f"integer {minimum}–{maximum}"
        )

    def check(self, node: YNode, at: At) -> int | Invalid:
        if not isinstance(node, YScalar) or type(node.value) is not int:
            return at.wrong_type(node, "a whole number")
        value = node.value
        if value < self.minimum or value > self.maximum:
            bound = "at least" if value < self.minimum else "at most"
            limit = self.minimum if value < self.minimum else self.maximum
            return at.problem(
                node.line,
                f"must be {bound} {limit}, got {number(node.text)}",
                f"use a whole number from {self.minimum} to {self.maximum}, e.g. {at.example}",
            )
        return value


_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")


class Str(Kind[str]):
    """A string; ``scalars`` also takes numbers and booleans as written (``true`` → "true")."""

    def __init__(
        self,
        *,
        doc: str = "string",
        scalars: bool = False,
        empty: bool = False,
        spaces: bool = True,
        control: bool = False,
        rule: Rule | None = None,
    ) -> None:
        self.doc = doc
        self.scalars = scalars
        self.empty = empty
        self.spaces = spaces
        self.control = control
        self.rule = rule

    def check(self, node: YNode, at: At) -> str | Invalid:
        if not isinstance(node, YScalar) or node.value is None:
            return at.wrong_type(node, "a string")
        if isinstance(node.value, str):
            value = node.value
        elif self.scalars:
            value = node.text
        else:
            return at.wrong_type(node, "a string")
        if not value and not self.empty:
            return at.problem(node.line, "must not be empty", f"write a value, e.g. {at.example}")
        if "\x00" in value:
            return at.problem(node.line, "must not contain a NUL character", "remove it")
        if not self.control and _CONTROL.search(value):
            return at.problem(
                node.line,
                f"must not contain control characters (newlines, tabs), got {shorten(value)}",
                f"write it on one line, e.g. {at.example}",
            )
        if not self.spaces and re.search(r"\s", value):
            return at.problem(
                node.line,
                f"must not contain spaces, got {shorten(value)}",
                f"remove the spaces, e.g. {at.example}",
            )
        if self.rule is not None:
            wrong = self.rule(value)
            if wrong is not None:
                return at.problem(node.line, wrong[0], wrong[1])
        return value


class OneOf(Kind[Word]):
    """One of a few fixed words, exactly as spelled; ``OneOf[Literal["a", "b"]]("a", "b")``
    gives the Literal type."""

    def __init__(self, *choices: Word) -> None:
        self.choices = choices
        self.doc = " or ".join(f"`{choice}`" for choice in choices)

    def check(self, node: YNode, at: At) -> Word | Invalid:
        words = ", ".join(self.choices)
        if not isinstance(node, YScalar) or not isinstance(node.value, str):
            return at.wrong_type(node, f"one of {words}")
        for choice in self.choices:
            if node.value == choice:
                return choice
        fix = f"use one of {words}"
        guess = closest(node.value, self.choices)
        if guess is not None:
            fix = f"did you mean {guess!r}?"
        return at.problem(node.line, f"must be one of {words}, got {shorten(node.value)}", fix)


_DURATION: Final = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class Duration(Kind[int]):
    """Seconds as a whole number, or a string such as "90s", "30m", "2h", "1h30m", "7d"."""

    doc = "duration"

    def check(self, node: YNode, at: At) -> int | Invalid:
        noun = "a duration such as 90m, 2h or 1h30m"
        if not isinstance(node, YScalar) or isinstance(node.value, bool) or node.value is None:
            return at.wrong_type(node, noun)
        if isinstance(node.value, int) and ":" in node.text:
            return at.problem(
                node.line,
                f"must be {noun}, got {node.text} (YAML reads it as the base-60 number "
                f"{node.value})",
                f"write the unit, e.g. {at.example}",
            )
        if isinstance(node.value, int):
            seconds = node.value
        elif isinstance(node.value, str):
            text = node.value.strip()
            match = _DURATION.fullmatch(text) if len(text) <= 32 else None
            if text.isdigit() and len(text) <= 32:
                seconds = int(text)
            elif text and match is not None:
                days, hours, minutes, secs = (int(part or 0) for part in match.groups())
                seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
            else:
                return at.problem(
                    node.line,
                    f"must be {noun}, got {shorten(node.value)}",
                    f"write a number with units d, h, m, s in that order, e.g. {at.example}",
                )
        else:
            return at.wrong_type(node, noun)
        if seconds <= 0 or seconds > MAX_DURATION:
            return at.problem(
                node.line,
                f"must be more than 0 and at most 7 days, got {number(node.text)}",
                f"use a duration from 1s to 7d, e.g. {at.example}",
            )
        return seconds


_QUANTITY: Final = re.compile(
    r"(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?"
)


class Quantity(Kind[str]):
    """A Kubernetes resource quantity such as "4", "500m", "8Gi"; numbers are kept as written."""

    doc = "quantity"

    def check(self, node: YNode, at: At) -> str | Invalid:
        noun = "a Kubernetes quantity such as 4, 500m or 8Gi"
        if (
            not isinstance(node, YScalar)
            or isinstance(node.value, bool)
            or node.value is None
            or not isinstance(node.value, (str, int, float))
        ):
            return at.wrong_type(node, noun)
        text = node.text if not isinstance(node.value, str) else node.value
        match = _QUANTITY.fullmatch(text)
        if match is None:
            return at.problem(
                node.line,
                f"must be {noun}, got {shorten(text)}",
                "write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, ...), "
                f"e.g. {at.example}",
            )
        try:
            positive = Decimal(match.group(1)) > 0
        except InvalidOperation:  # pragma: no cover - the regex admits only decimal numbers
            positive = False
        if not positive:
            return at.problem(
                node.line,
                f"must be more than 0, got {shorten(text)}",
                f"request a positive amount, e.g. {at.example}",
            )
        return text


class Argv(Kind[tuple[str, ...]]):
    """A command line: a string (split like a shell would) or a list of strings; numbers in the
    list are kept as written."""

    doc = "string or list of strings"
    _ARG: Final = Str(scalars=True, empty=True, control=True)

    def __init__(self, rule: Callable[[tuple[str, ...]], Wrong | None] | None = None) -> None:
        self.rule = rule

    def check(self, node: YNode, at: At) -> tuple[str, ...] | Invalid:
        empty = ("must not be empty", f"write what every rank runs, e.g. {at.example}")
        if isinstance(node, YScalar) and isinstance(node.value, str):
            try:
                argv = shlex.split(node.value)
            except ValueError:
                return at.problem(
                    node.line,
                    f"has an unbalanced quote or a trailing backslash: {shorten(node.value)}",
                    "close every quote, or write the command as a list of strings",
                )
            if not argv:
                return at.problem(node.line, *empty)
            if any("\x00" in arg for arg in argv):
                return at.problem(node.line, "must not contain a NUL character", "remove it")
            return self._checked(tuple(argv), node.line, at)
        if not isinstance(node, YSequence):
            return at.wrong_type(node, "a string or a list of strings")
        if not node.items:
            return at.problem(node.line, *empty)
        args = [check(self._ARG, item, at.item(index)) for index, item in enumerate(node.items)]
        strings = [arg for arg in args if not isinstance(arg, Invalid)]
        if len(strings) != len(args):
            return INVALID
        return self._checked(tuple(strings), node.items[0].line, at)

    def _checked(self, argv: tuple[str, ...], line: int, at: At) -> tuple[str, ...] | Invalid:
        wrong = self.rule(argv) if self.rule is not None else None
        if wrong is not None:
            return at.problem(line, *wrong)
        return _program_first(argv, line, at)


def _program_first(argv: tuple[str, ...], line: int, at: At) -> tuple[str, ...] | Invalid:
    """``argv`` when its first word is a program: a word starting with ``-`` would be read by
    mpirun or horovodrun as an option of their own (``--mca plm_rsh_agent ...``)."""
    if argv[0].startswith("-"):
        return at.problem(
            line,
            f"starts with the option {shorten(argv[0])}, which mpirun and horovodrun would take "
            "as their own",
            f"start it with the program every rank runs, e.g. {at.example}",
        )
    return argv


@dataclass(frozen=True)
class Field:
    """One key of a mapping: its kind, whether it is required, and its documentation."""

    key: str
    kind: Kind[object]
    description: str
    example: str  # the value as written in YAML, e.g. "2h"
    default: str = ""  # as shown in the reference; "" when there is none
    required: bool = False


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
    pairs in the file's order."""

    def __init__(self, key_rule: Rule, value: Kind[T_co], *, doc: str) -> None:
        self.key_rule = key_rule
        self.value = value
        self.doc = doc

    def check(self, node: YNode, at: At) -> tuple[tuple[str, T_co], ...] | Invalid:
        if not isinstance(node, YMapping):
            return at.wrong_type(node, "a mapping")
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
