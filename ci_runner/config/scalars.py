"""The kinds of single values, built on the engine (:mod:`ci_runner.config.engine`): a whole
number within bounds (:class:`Int`), a string (:class:`Str`), one of a few words
(:class:`OneOf`), a duration (:class:`Duration`), a Kubernetes quantity (:class:`Quantity`) and
a command line (:class:`Argv`). Each records its problem with the place and the fix, worded the
same for every field that uses it."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Final, TypeVar

from ci_runner.config.engine import INVALID, At, Invalid, Kind, check
from ci_runner.config.names import Rule, Wrong, closest
from ci_runner.config.quantity import MAX_AMOUNT, MIN_AMOUNT, quantity_value
from ci_runner.config.yamlsource import YNode, YScalar, YSequence, shorten

Word = TypeVar("Word", bound=str)  # one of a OneOf's words (a Literal type)

MAX_INT32: Final = 2**31 - 1
MAX_DURATION: Final = 7 * 24 * 3600  # seconds


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

    def admits(self, value: int) -> bool:
        """Whether ``value`` is within [minimum, maximum] (the pipeline's CI_RUNNER_WORKERS is
        held to the ``workers`` field's kind)."""
        return self.minimum <= value <= self.maximum

    def check(self, node: YNode, at: At) -> int | Invalid:
        if not isinstance(node, YScalar) or type(node.value) is not int:
            return at.wrong_type(node, "a whole number")
        value = node.value
        if not self.admits(value):
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
            # ASCII only: str.isdigit() also takes "²", which int() refuses.
            if text.isascii() and text.isdigit() and len(text) <= 32:
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


class Quantity(Kind[str]):
    """A Kubernetes resource quantity such as "4", "500m", "8Gi", within what Kubernetes holds;
    numbers are kept as written."""

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
        try:
            amount = quantity_value(text)
        except ValueError:
            return at.problem(
                node.line,
                f"must be {noun}, got {shorten(text)}",
                "write a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, ...), "
                f"e.g. {at.example}",
            )
        if amount <= 0:
            return at.problem(
                node.line,
                f"must be more than 0, got {shorten(text)}",
                f"request a positive amount, e.g. {at.example}",
            )
        if amount < MIN_AMOUNT:
            return at.problem(
                node.line,
                f"must be at least 0.000000001 (Kubernetes rounds a smaller amount up), got "
                f"{shorten(text)}",
                f"request a larger amount, e.g. {at.example}",
            )
        if amount > MAX_AMOUNT:
            return at.problem(
                node.line,
                f"must be at most {MAX_AMOUNT} (2^63-1 bytes or cores, the most Kubernetes "
                f"holds), got {shorten(text)}",
                f"request what the job needs, e.g. {at.example}",
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
