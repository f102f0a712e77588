"""``train.yaml``: its schema (kept as data), validation into a TrainConfig, and its reference doc.

The schema is the table :data:`SCHEMA`: every field with its kind (type and constraints), default,
description and example. :func:`load_config` checks a document against it and reports every
problem in one :class:`~ci_runner.errors.ConfigError`, each with the YAML path, the line and the
fix. :func:`schema_markdown` renders the same table as the reference in ``docs/train-yaml.md``.
"""

from __future__ import annotations

import difflib
import ipaddress
import posixpath
import re
import shlex
import string
import sys
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from ci_runner.errors import ConfigError, Problem
from ci_runner.spec.types import (
    DnsConfig,
    Elastic,
    KubernetesOptions,
    MetricSpec,
    Resources,
    Toleration,
    TrainConfig,
)
from ci_runner.spec.yamlsource import (
    YMapping,
    YNode,
    YScalar,
    YSequence,
    describe,
    index_path,
    key_path,
    parse,
    shorten,
)

MAX_WORKERS: Final = 512
MAX_NAME_LENGTH: Final = 24  # "<name>-<sha>-<job id>-worker-<n>" must stay a 63-character label
MAX_DURATION: Final = 7 * 24 * 3600
MAX_INT32: Final = 2**31 - 1
OUTPUT_PLACEHOLDERS: Final = ("project", "sha", "job")
METRIC_GROUPS: Final = ("value", "step", "rank")
# Set by ci-runner in every rank (the Git credentials in the fetch step); not for env or secrets.
RESERVED_ENV: Final = ("DATA_URI", "OUTPUT_URI", "PIP_CACHE_DIR", "GIT_USERNAME", "GIT_PASSWORD")
RESERVED_ENV_PREFIX: Final = "CI_RUNNER_"
WORKERS_VARIABLE: Final = "CI_RUNNER_WORKERS"
ARGS_VARIABLE: Final = "CI_RUNNER_ARGS"

Rule = Callable[[str], "tuple[str, str] | None"]  # value -> (message, fix) when the value is wrong


class _Invalid:
    """Marks a value that failed validation (its problem is already recorded)."""

    def __repr__(self) -> str:
        return "INVALID"


INVALID: Final = _Invalid()


@dataclass
class _Context:
    file: str
    problems: list[Problem] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # YAML path -> line of its value


@dataclass(frozen=True)
class _At:
    """Where a value is being checked: the path, and the example shown in fixes."""

    context: _Context
    path: str
    example: str  # e.g. "workers: 2"

    def problem(
        self, line: int | None, message: str, fix: str, path: str | None = None
    ) -> _Invalid:
        where = self.path if path is None else path
        self.context.problems.append(Problem(self.context.file, where, line, message, fix))
        return INVALID

    def wrong_type(self, node: YNode, noun: str) -> _Invalid:
        return self.problem(
            node.line, f"must be {noun}, got {describe(node)}", f"write {noun}, e.g. {self.example}"
        )

    def key(self, key: str, example: str) -> _At:
        return _At(self.context, key_path(self.path, key), example)

    def item(self, index: int) -> _At:
        return _At(self.context, index_path(self.path, index), self.example)

    def line_of(self, key: str) -> int | None:
        return self.context.lines.get(key_path(self.path, key))


# ---------------------------------------------------------------------------------------------
# Kinds: the type and constraints of one field; each turns a YAML node into a value or INVALID.


class Kind:
    """The type of a field: ``doc`` names it in the reference, ``check`` validates a node."""

    doc = "value"

    def check(self, node: YNode, at: _At) -> Any:
        raise NotImplementedError


def _check(kind: Kind, node: YNode, at: _At) -> Any:
    """``kind.check``, except for values the YAML reader could not read (already reported)."""
    if isinstance(node, YScalar) and node.broken:
        return INVALID
    return kind.check(node, at)


class Int(Kind):
    """A whole number within [minimum, maximum]."""

    def __init__(self, minimum: int, maximum: int = MAX_INT32) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.doc = (
            f"integer ≥ {minimum}" if maximum == MAX_INT32 else f"integer {minimum}–{maximum}"
        )

    def check(self, node: YNode, at: _At) -> Any:
        if not isinstance(node, YScalar) or type(node.value) is not int:
            return at.wrong_type(node, "a whole number")
        value = node.value
        if value < self.minimum or value > self.maximum:
            bound = "at least" if value < self.minimum else "at most"
            limit = self.minimum if value < self.minimum else self.maximum
            return at.problem(
                node.line,
                f"must be {bound} {limit}, got {_number(node.text)}",
                f"use a whole number from {self.minimum} to {self.maximum}, e.g. {at.example}",
            )
        return value


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _number(text: str) -> str:
    """A number as written, cut short if it is absurdly long."""
    return text if len(text) <= 20 else text[:17] + "..."


class Str(Kind):
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

    def check(self, node: YNode, at: _At) -> Any:
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


class OneOf(Kind):
    """One of a few fixed words, exactly as spelled."""

    def __init__(self, *choices: str) -> None:
        self.choices = choices
        self.doc = " or ".join(f"`{choice}`" for choice in choices)

    def check(self, node: YNode, at: _At) -> Any:
        words = ", ".join(self.choices)
        if not isinstance(node, YScalar) or not isinstance(node.value, str):
            return at.wrong_type(node, f"one of {words}")
        if node.value in self.choices:
            return node.value
        fix = f"use one of {words}"
        guess = _closest(node.value, self.choices)
        if guess is not None:
            fix = f"did you mean {guess!r}?"
        return at.problem(node.line, f"must be one of {words}, got {shorten(node.value)}", fix)


_DURATION = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


class Duration(Kind):
    """Seconds as a whole number, or a string such as "90s", "30m", "2h", "1h30m", "7d"."""

    doc = "duration"

    def check(self, node: YNode, at: _At) -> Any:
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
                f"must be more than 0 and at most 7 days, got {_number(node.text)}",
                f"use a duration from 1s to 7d, e.g. {at.example}",
            )
        return seconds


_QUANTITY = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?")


class Quantity(Kind):
    """A Kubernetes resource quantity such as "4", "500m", "8Gi"; numbers are kept as written."""

    doc = "quantity"

    def check(self, node: YNode, at: _At) -> Any:
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


class Command(Kind):
    """A string (split like a shell would) or a list of strings; numbers are kept as written."""

    doc = "string or list of strings"
    _ARG = Str(scalars=True, empty=True, control=True)

    def check(self, node: YNode, at: _At) -> Any:
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
            return tuple(argv)
        if not isinstance(node, YSequence):
            return at.wrong_type(node, "a string or a list of strings")
        if not node.items:
            return at.problem(node.line, *empty)
        args = [_check(self._ARG, item, at.item(index)) for index, item in enumerate(node.items)]
        return INVALID if INVALID in args else tuple(args)


class Uri(Kind):
    """An ``s3://bucket/key`` or ``file:///absolute/path`` URI; optionally with placeholders."""

    def __init__(self, placeholders: bool) -> None:
        self.placeholders = placeholders
        self.doc = "URI"

    def check(self, node: YNode, at: _At) -> Any:
        value = Str(spaces=False).check(node, at)
        if value is INVALID:
            return INVALID
        fix = "write s3://bucket/path/ or file:///absolute/path/"
        scheme, sep, rest = value.partition("://")
        if not sep or scheme not in ("s3", "file"):
            found = f"the scheme {scheme}://" if sep else f"{shorten(value)} (no scheme)"
            return at.problem(node.line, f"must be an s3:// or file:// URI, got {found}", fix)
        if scheme == "s3":
            bucket = rest.split("/", 1)[0]
            if not _S3_BUCKET.fullmatch(bucket):
                return at.problem(
                    node.line,
                    f"has an invalid S3 bucket name {shorten(bucket)}",
                    "use 3-63 lowercase letters, digits, '.' and '-', e.g. s3://models/runs/",
                )
        elif not rest.startswith("/"):
            return at.problem(
                node.line,
                f"must name an absolute path (file:///path), got {shorten(value)}",
                f"write three slashes, e.g. file:///{rest.lstrip('/') or 'data'}",
            )
        if self.placeholders:
            wrong = _placeholder_problem(value)
            if wrong is not None:
                return at.problem(node.line, wrong[0], wrong[1])
        return value


_S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class RepoPath(Kind):
    """A file path relative to the repository root, inside the repository."""

    doc = "path in the repository"

    def check(self, node: YNode, at: _At) -> Any:
        value = Str().check(node, at)
        if value is INVALID:
            return INVALID
        if value.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[\\/]", value):
            return at.problem(
                node.line,
                f"must be relative to the repository root, got the absolute path {shorten(value)}",
                f"write the path from the repository root, e.g. {at.example}",
            )
        parts = value.replace("\\", "/").split("/")
        if ".." in parts:
            return at.problem(
                node.line,
                f"must stay inside the repository ('..' is not allowed), got {shorten(value)}",
                f"write the path from the repository root, e.g. {at.example}",
            )
        normal = posixpath.normpath(value)
        if normal in (".", "") or value.endswith("/"):
            return at.problem(
                node.line,
                f"must name a file, got {shorten(value)}",
                f"write the file's path from the repository root, e.g. {at.example}",
            )
        return normal


class Pattern(Kind):
    """A Python regular expression with a named group ``value`` (optional ``step``, ``rank``)."""

    doc = "regular expression"

    def check(self, node: YNode, at: _At) -> Any:
        value = Str().check(node, at)
        if value is INVALID:
            return INVALID
        try:
            pattern = re.compile(value)
        except re.error as error:
            where = f" at position {error.pos}" if error.pos is not None else ""
            return at.problem(
                node.line,
                f"is not a valid regular expression: {error.msg}{where}",
                "correct the pattern (in single quotes YAML keeps backslashes as written)",
            )
        except (RecursionError, OverflowError, ValueError, MemoryError) as error:
            reason = "nested too deeply" if isinstance(error, RecursionError) else str(error)
            return at.problem(
                node.line,
                f"is not a valid regular expression: {reason}",
                "simplify the pattern",
            )
        unknown = [name for name in pattern.groupindex if name not in METRIC_GROUPS]
        if unknown:
            return at.problem(
                node.line,
                f"has the named group {unknown[0]!r}; only 'value', 'step' and 'rank' are read",
                f"rename it to one of those, or make it unnamed: ( ... ) instead of "
                f"(?P<{unknown[0]}> ... )",
            )
        if "value" not in pattern.groupindex:
            return at.problem(
                node.line,
                "has no group named 'value' (the metric's number)",
                r"mark the number with (?P<value>...), e.g. 'loss: (?P<value>[-+0-9.eE]+)'",
            )
        return pattern


@dataclass(frozen=True)
class Field:
    """One key of a mapping: its kind, whether it is required, and its documentation."""

    key: str
    kind: Kind
    description: str
    example: str  # the value as written in YAML, e.g. "2h"
    default: str = ""  # as shown in the reference; "" when there is none
    required: bool = False


class Record(Kind):
    """A mapping with known keys; ``build`` turns the checked values into the result object."""

    def __init__(
        self,
        *fields: Field,
        build: Callable[[dict[str, Any], _At, bool, frozenset[str]], Any] | None = None,
        doc: str = "mapping",
    ) -> None:
        self.fields = fields
        self.build = build
        self.doc = doc

    def check(self, node: YNode, at: _At) -> Any:
        if not isinstance(node, YMapping):
            return at.wrong_type(node, "a mapping")
        before = len(at.context.problems)
        known = {item.key: item for item in self.fields}
        values: dict[str, Any] = {}
        complete = True
        for entry in node:
            spec = known.get(entry.key)
            if spec is None:
                guess = _closest(entry.key, list(known))
                home = _home_of(entry.key)
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
            value = _check(spec.kind, entry.value, child)
            if value is INVALID:
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
        if self.build is None:
            return values if ok else INVALID
        return self.build(values, at, ok, frozenset(node.keys()))


class ListOf(Kind):
    """A list of items of one kind, optionally without repeats and with at most ``limit`` items."""

    def __init__(self, item: Kind, *, doc: str, unique: bool = False, limit: int = 0) -> None:
        self.item = item
        self.doc = doc
        self.unique = unique
        self.limit = limit

    def check(self, node: YNode, at: _At) -> Any:
        if not isinstance(node, YSequence):
            return at.wrong_type(node, "a list")
        if self.limit and len(node.items) > self.limit:
            return at.problem(
                node.line,
                f"may have at most {self.limit} items, got {len(node.items)}",
                f"remove {len(node.items) - self.limit}",
            )
        values: list[Any] = []
        seen: dict[Any, int] = {}
        ok = True
        for index, item in enumerate(node.items):
            item_at = at.item(index)
            at.context.lines[item_at.path] = item.line
            value = _check(self.item, item, item_at)
            if value is INVALID:
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


class MapOf(Kind):
    """A mapping from names (checked by ``key_rule``) to values of one kind."""

    def __init__(self, key_rule: Rule, value: Kind, *, doc: str) -> None:
        self.key_rule = key_rule
        self.value = value
        self.doc = doc

    def check(self, node: YNode, at: _At) -> Any:
        if not isinstance(node, YMapping):
            return at.wrong_type(node, "a mapping")
        pairs: list[tuple[str, Any]] = []
        ok = True
        for entry in node:
            child = at.key(entry.key, at.example)
            at.context.lines[child.path] = entry.value.line
            wrong = self.key_rule(entry.key)
            if wrong is not None:
                child.problem(entry.key_line, wrong[0], wrong[1])
                ok = False
                continue
            value = _check(self.value, entry.value, child)
            if value is INVALID:
                ok = False
                continue
            pairs.append((entry.key, value))
        return tuple(pairs) if ok else INVALID


# ---------------------------------------------------------------------------------------------
# Rules for names.

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_METRIC_NAME = _ENV_NAME


def slugify(text: str, limit: int = MAX_NAME_LENGTH) -> str:
    """A DNS-1035 label made from ``text``: "Simple_ML v2" → "simple-ml-v2"."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    slug = re.sub(r"^[^a-z]+", "", slug) or "job"
    return slug[:limit].rstrip("-")


def _job_name(value: str) -> tuple[str, str] | None:
    if len(value) > MAX_NAME_LENGTH:
        return (
            f"must be at most {MAX_NAME_LENGTH} characters (it names the job's pods), "
            f"got {len(value)}",
            f"shorten it, e.g. name: {slugify(value)}",
        )
    if not _DNS1035.fullmatch(value):
        return (
            "must be lowercase letters, digits and '-', start with a letter and end with a "
            f"letter or digit, got {shorten(value)}",
            f"write name: {slugify(value)}",
        )
    return None


def _k8s_name(what: str, subdomain: bool) -> Rule:
    pattern, limit = (_DNS1123_SUBDOMAIN, 253) if subdomain else (_DNS1123_LABEL, 63)
    allowed = (
        "lowercase letters, digits, '-' and '.'"
        if subdomain
        else "lowercase letters, digits and '-'"
    )

    def rule(value: str) -> tuple[str, str] | None:
        if len(value) <= limit and pattern.fullmatch(value):
            return None
        return (
            f"must be a Kubernetes {what} name ({allowed}, starting and ending with a letter "
            f"or digit, at most {limit} characters), got {shorten(value)}",
            f"write e.g. {slugify(value, limit)}",
        )

    return rule


def _label_key(value: str) -> tuple[str, str] | None:
    prefix, slash, name = value.rpartition("/")
    ok = (
        bool(name)
        and len(name) <= 63
        and _LABEL_NAME.fullmatch(name) is not None
        and (not slash or (len(prefix) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(prefix) is not None))
    )
    if ok:
        return None
    return (
        f"must be a Kubernetes label key (an optional DNS prefix and '/', then at most 63 "
        f"letters, digits, '-', '_' or '.'), got {shorten(value)}",
        "write a key such as gpu or nvidia.com/gpu",
    )


def _label_value(value: str) -> tuple[str, str] | None:
    if len(value) <= 63 and _LABEL_NAME.fullmatch(value):
        return None
    return (
        f"must be a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.', "
        f"starting and ending with a letter or digit), got {shorten(value)}",
        "write a value such as true or a100",
    )


def _env_name(value: str) -> tuple[str, str] | None:
    if not _ENV_NAME.fullmatch(value):
        return (
            f"{shorten(value)} is not a valid environment variable name",
            "use letters, digits and '_', not starting with a digit, e.g. LEARNING_RATE",
        )
    if value in RESERVED_ENV or value.startswith(RESERVED_ENV_PREFIX):
        return (
            f"{value} is set by ci-runner for every rank",
            f"choose another name ({', '.join(RESERVED_ENV)} and CI_RUNNER_* are reserved)",
        )
    return None


def _metric_name(value: str) -> tuple[str, str] | None:
    if _METRIC_NAME.fullmatch(value) and len(value) <= 63:
        return None
    return (
        f"{shorten(value)} is not a valid metric name",
        "use at most 63 letters, digits and '_', not starting with a digit, e.g. train_loss",
    )


def _ip_address(value: str) -> tuple[str, str] | None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return (f"must be an IP address, got {shorten(value)}", "write e.g. 10.96.0.10")
    return None


def _closest(word: str, choices: Sequence[str]) -> str | None:
    by_case = [choice for choice in choices if choice.lower() == word.lower()]
    if by_case:
        return by_case[0]
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None


def _placeholder_problem(template: str) -> tuple[str, str] | None:
    allowed = ", ".join("{" + name + "}" for name in OUTPUT_PLACEHOLDERS)
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError:
        return (
            f"has an unmatched '{{' or '}}': {shorten(template)}",
            f"use only the placeholders {allowed}; write {{{{ or }}}} for a literal brace",
        )
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in OUTPUT_PLACEHOLDERS or spec or conversion:
            shown = "{" + name + ("!" + conversion if conversion else "")
            shown += (":" + spec if spec else "") + "}"
            return (
                f"uses the unknown placeholder {shorten(shown)}",
                f"use only the placeholders {allowed}",
            )
    return None


# ---------------------------------------------------------------------------------------------
# Builders: checked values → config_types objects, with the checks that involve several fields.


def _build_resources(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    return Resources(**values) if ok else INVALID


def _build_toleration(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    # Each check runs when the fields it reads are valid, so one run reports everything.
    operator = values.get("operator", "Equal" if "operator" not in keys else None)
    effect = values.get("effect", "" if "effect" not in keys else None)
    checks = [
        (
            operator == "Exists" and "value" in keys,
            "value",
            "must not be set when operator is Exists",
            "remove value, or use operator: Equal",
        ),
        (
            operator == "Equal" and "key" not in keys,
            "key",
            "is required when operator is Equal (the default)",
            "add the taint's key, or use operator: Exists to tolerate every taint",
        ),
        (
            "toleration_seconds" in keys and effect is not None and effect != "NoExecute",
            "toleration_seconds",
            "needs effect: NoExecute",
            "set effect: NoExecute, or remove toleration_seconds",
        ),
    ]
    for wrong, key, message, fix in checks:
        if wrong:
            line = at.line_of(key) or at.context.lines.get(at.path)
            at.problem(line, message, fix, path=key_path(at.path, key))
            ok = False
    return Toleration(**values) if ok else INVALID


def _build_dns(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    return DnsConfig(**values) if ok else INVALID


def _build_dns_option(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    return (values["name"], values.get("value")) if ok else INVALID


def _build_metric(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    return (values["pattern"], values.get("goal", "min")) if ok else INVALID


def _build_elastic(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    low, high = values.get("min_workers"), values.get("max_workers")
    if low is not None and high is not None and low > high:
        return at.problem(
            at.line_of("min_workers"),
            f"must not be more than max_workers, got {values['min_workers']} > "
            f"{values['max_workers']}",
            "lower min_workers or raise max_workers",
            path=key_path(at.path, "min_workers"),
        )
    return Elastic(values["min_workers"], values["max_workers"]) if ok else INVALID


def _build_kubernetes(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    if not ok:
        return INVALID
    if "node_selector" in values:
        values["node_selector"] = tuple(sorted(values["node_selector"]))
    return KubernetesOptions(**values)


def _build_train(values: dict[str, Any], at: _At, ok: bool, keys: frozenset[str]) -> Any:
    workers = values.get("workers", 1 if "workers" not in keys else None)
    elastic = values.get("elastic")
    if (
        isinstance(elastic, Elastic)
        and workers is not None
        and not elastic.min_workers <= workers <= elastic.max_workers
    ):
        line = at.line_of("workers") or at.line_of("elastic")
        at.problem(
            line,
            f"must be between elastic.min_workers and elastic.max_workers "
            f"({elastic.min_workers}-{elastic.max_workers}), got {workers}",
            "set workers to how many workers to start with, within that range",
            path="workers",
        )
        ok = False
    env_names = {name for name, _ in values.get("env", ())}
    for index, name in enumerate(values.get("secrets", ())):
        if name in env_names:
            at.problem(
                at.context.lines.get(f"secrets[{index}]", at.line_of("secrets")),
                f"{name} is also set in env",
                "keep it in one place: secrets for CI variables, env for plain values",
                path=f"secrets[{index}]",
            )
            ok = False
    if not ok:
        return INVALID
    resources = values.get("resources", Resources())
    default_slots = resources.gpu if resources.gpu > 0 else 1
    metrics = tuple(
        MetricSpec(name, pattern, goal) for name, (pattern, goal) in values.pop("metrics", ())
    )
    return TrainConfig(
        **{
            **values,
            "slots_per_worker": values.get("slots_per_worker", default_slots),
            "env": tuple(sorted(values.get("env", ()))),
            "metrics": metrics,
        }
    )


# ---------------------------------------------------------------------------------------------
# The schema.

_K8S_NAME = Str(rule=_k8s_name("object", subdomain=True))

_TOLERATION = Record(
    Field("key", Str(rule=_label_key), "The taint's key.", "gpu"),
    Field("operator", OneOf("Exists", "Equal"), "Exists matches any value.", "Exists", "`Equal`"),
    Field(
        "value",
        Str(scalars=True, empty=True, rule=_label_value),
        "The taint's value (only with operator Equal).",
        "a100",
    ),
    Field(
        "effect",
        OneOf("NoSchedule", "PreferNoSchedule", "NoExecute"),
        "The taint effect to tolerate; every effect when omitted.",
        "NoSchedule",
    ),
    Field(
        "toleration_seconds",
        Int(0),
        "How long a NoExecute taint is tolerated before eviction.",
        "300",
    ),
    build=_build_toleration,
)

_DNS_OPTION = Record(
    Field("name", Str(spaces=False), "Resolver option name.", "ndots", required=True),
    Field("value", Str(scalars=True, spaces=False), "Resolver option value.", '"2"'),
    build=_build_dns_option,
)

_DNS = Record(
    Field(
        "nameservers",
        ListOf(Str(rule=_ip_address), doc="list of IP addresses", limit=3),
        "DNS servers for every pod (at most 3).",
        "[10.96.0.10]",
    ),
    Field(
        "searches",
        ListOf(Str(spaces=False), doc="list of domains", limit=32),
        "DNS search domains.",
        "[svc.cluster.local]",
    ),
    Field(
        "options",
        ListOf(_DNS_OPTION, doc="list of mappings"),
        "Resolver options.",
        '[{name: ndots, value: "2"}]',
    ),
    build=_build_dns,
)

_KUBERNETES = Record(
    Field(
        "namespace",
        Str(rule=_k8s_name("namespace", subdomain=False)),
        "Namespace to run in; the current context's namespace when omitted.",
        "ml-training",
    ),
    Field(
        "tolerations",
        ListOf(_TOLERATION, doc="list of mappings"),
        "Taints the pods tolerate (e.g. of GPU nodes).",
        "[{key: gpu, operator: Exists, effect: NoSchedule}]",
    ),
    Field(
        "node_selector",
        MapOf(_label_key, Str(scalars=True, empty=True, rule=_label_value), doc="mapping"),
        "Node labels the pods must run on.",
        "{gpu-type: a100}",
    ),
    Field(
        "dns_config",
        _DNS,
        "The pods' DNS settings (dnsConfig).",
        "{nameservers: [10.96.0.10]}",
    ),
    Field(
        "service_account",
        _K8S_NAME,
        "Service account of the pods.",
        "trainer",
    ),
    Field(
        "priority_class",
        _K8S_NAME,
        "Priority class of the pods.",
        "high-priority",
    ),
    Field(
        "image_pull_secrets",
        ListOf(_K8S_NAME, doc="list of names", unique=True),
        "Secrets for pulling a private image.",
        "[registry-credentials]",
    ),
    Field(
        "queue",
        _K8S_NAME,
        "Gang-scheduling queue (Volcano or scheduler-plugins); all pods start together.",
        "training",
    ),
    Field(
        "pip_cache_pvc",
        _K8S_NAME,
        "PersistentVolumeClaim holding pip's cache; an emptyDir when omitted.",
        "pip-cache",
    ),
    Field(
        "ttl_seconds_after_finished",
        Int(0),
        "Seconds the finished job's pods are kept for inspection.",
        "3600",
        "`3600`",
    ),
    Field(
        "backoff_limit",
        Int(0),
        "Launcher retries before the job fails.",
        "0",
        "`0`",
    ),
    Field(
        "unschedulable_timeout",
        Duration(),
        "How long pods may stay unschedulable before the job fails.",
        "10m",
        "`600` (10m)",
    ),
    build=_build_kubernetes,
)

SCHEMA: Final = Record(
    Field(
        "name",
        Str(rule=_job_name),
        "Job name: lowercase letters, digits and '-', starting with a letter, "
        f"at most {MAX_NAME_LENGTH} characters.",
        "simple-ml",
        required=True,
    ),
    Field(
        "image",
        Str(spaces=False),
        "Container image every pod runs (needs Horovod, sshd, git and pip).",
        "horovod/horovod:0.28.1",
        required=True,
    ),
    Field(
        "command",
        Command(),
        "What every rank runs, from the repository root: a string (split like a shell would) "
        "or a list of strings.",
        "python train.py --epochs 10",
        required=True,
    ),
    Field(
        "workers",
        Int(1, MAX_WORKERS),
        "Number of worker pods.",
        "2",
        "`1`",
    ),
    Field(
        "slots_per_worker",
        Int(1, 256),
        "Ranks (processes) per worker.",
        "1",
        "`resources.gpu` if more than 0, else `1`",
    ),
    Field(
        "resources",
        Record(
            Field("gpu", Int(0, 64), "GPUs per worker (nvidia.com/gpu).", "1", "`0`"),
            Field("cpu", Quantity(), "CPU per worker.", "4"),
            Field("memory", Quantity(), "Memory per worker.", "8Gi"),
            build=_build_resources,
        ),
        "What every worker requests and is limited to.",
        "{gpu: 1, memory: 8Gi}",
    ),
    Field(
        "requirements",
        RepoPath(),
        "A pip requirements file in the repository, installed before training starts.",
        "requirements.txt",
    ),
    Field(
        "env",
        MapOf(
            _env_name,
            Str(scalars=True, empty=True, control=True),
            doc="mapping NAME → string",
        ),
        "Environment variables for every rank; numbers and booleans are kept as written.",
        "{EPOCHS: 10}",
    ),
    Field(
        "secrets",
        ListOf(Str(rule=_env_name), doc="list of names", unique=True),
        "CI variables passed to every rank through a Kubernetes Secret.",
        "[WANDB_API_KEY]",
    ),
    Field(
        "data",
        Uri(placeholders=False),
        "Training data location, given to every rank as DATA_URI.",
        "s3://datasets/diabetes/",
    ),
    Field(
        "outputs",
        Uri(placeholders=True),
        "Where the model goes, given to every rank as OUTPUT_URI; may use {project}, {sha} "
        "and {job}.",
        "s3://models/{project}/{sha}/{job}/",
    ),
    Field(
        "metrics",
        MapOf(
            _metric_name,
            Record(
                Field(
                    "pattern",
                    Pattern(),
                    "Regular expression matched against each log line (without horovodrun's "
                    "`[rank]<stdout>:` prefix, first match); the group `value` is the number, "
                    "optional groups `step` and `rank` (else the prefix's rank). Long logs are "
                    "parsed two to three times faster when the pattern starts with fixed text and "
                    "cannot match a line break: `[^,\\n]+`, not `[^,]+`; no `\\s`, `^`, `$`.",
                    r"'loss: (?P<value>[-+0-9.eE]+)'",
                    required=True,
                ),
                Field(
                    "goal",
                    OneOf("min", "max"),
                    "Whether lower or higher is better.",
                    "min",
                    "`min`",
                ),
                build=_build_metric,
            ),
            doc="mapping name → mapping",
        ),
        "Metrics parsed from the training log, by name.",
        r"{train_loss: {pattern: 'loss: (?P<value>[-+0-9.eE]+)'}}",
    ),
    Field(
        "timeout",
        Duration(),
        "Longest the job may run (at most 7d); no limit when omitted.",
        "2h",
    ),
    Field(
        "elastic",
        Record(
            Field("min_workers", Int(1, MAX_WORKERS), "Fewest workers.", "1", required=True),
            Field("max_workers", Int(1, MAX_WORKERS), "Most workers.", "4", required=True),
            build=_build_elastic,
        ),
        "Elastic Horovod: keep training with between min_workers and max_workers workers.",
        "{min_workers: 1, max_workers: 4}",
    ),
    Field("kubernetes", _KUBERNETES, "Cluster settings.", "{namespace: ml-training}"),
    build=_build_train,
)


# ---------------------------------------------------------------------------------------------
# Public API.


def load_config(text: str | bytes, file: str = "train.yaml") -> TrainConfig:
    """Validate ``train.yaml`` text; raise ConfigError listing every problem found."""
    document = parse(text, file)
    context = _Context(file, list(document.problems))
    config = SCHEMA.check(document.root, _At(context, "", "name: my-job"))
    if context.problems or not isinstance(config, TrainConfig):
        raise ConfigError(_in_order(context.problems))
    return replace(config, source_file=file)


def apply_overrides(
    config: TrainConfig, *, workers: str | None, extra_args: str | None
) -> TrainConfig:
    """Apply the pipeline variables CI_RUNNER_WORKERS and CI_RUNNER_ARGS (empty means unset).

    ``workers`` replaces the worker count (checked like the file's); ``extra_args`` is split like
    a shell would and appended to the command. Raises ConfigError listing every problem.
    """
    problems: list[Problem] = []
    changes: dict[str, Any] = {}
    if workers is not None and workers.strip():
        value = workers.strip()
        low, high = (
            (config.elastic.min_workers, config.elastic.max_workers)
            if config.elastic is not None
            else (1, MAX_WORKERS)
        )
        if not value.isdigit() or not value.isascii():
            problems.append(
                Problem(
                    WORKERS_VARIABLE,
                    "",
                    None,
                    f"must be a whole number, got {_uncut(workers)}",
                    f"set {WORKERS_VARIABLE} to a number from 1 to {MAX_WORKERS}, e.g. 2",
                )
            )
        elif len(value.lstrip("0")) > 6 or not low <= int(value) <= high:
            within = " (elastic.min_workers to elastic.max_workers)" if config.elastic else ""
            problems.append(
                Problem(
                    WORKERS_VARIABLE,
                    "",
                    None,
                    f"must be from {low} to {high}{within}, got {_number(value)}",
                    f"set {WORKERS_VARIABLE} to a number from {low} to {high}",
                )
            )
        else:
            changes["workers"] = int(value)
    if extra_args is not None and extra_args.strip():
        try:
            args = shlex.split(extra_args)
        except ValueError:
            problems.append(
                Problem(
                    ARGS_VARIABLE,
                    "",
                    None,
                    f"has an unbalanced quote or a trailing backslash: {_uncut(extra_args)}",
                    "close every quote (the value is split like a shell command line)",
                )
            )
        else:
            if any("\x00" in arg for arg in args):
                problems.append(
                    Problem(
                        ARGS_VARIABLE,
                        "",
                        None,
                        "must not contain a NUL character",
                        "remove it",
                    )
                )
            else:
                changes["command"] = (*config.command, *args)
    if problems:
        raise ConfigError(problems)
    return replace(config, **changes)


def _uncut(value: str, limit: int = 200) -> str:
    """A CI variable's value for a message: whole or not at all. A value cut short could end
    half-way through a secret the variable expanded, which the log's masker would not recognise."""
    return repr(value) if len(value) <= limit else f"a value of {len(value)} characters"


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


def _in_order(problems: list[Problem]) -> list[Problem]:
    """Problems sorted by line (stable), those without a line last."""
    return sorted(problems, key=lambda problem: problem.line or sys.maxsize)


# ---------------------------------------------------------------------------------------------
# The reference documentation, generated from SCHEMA.

EXAMPLE: Final = r"""name: simple-ml
image: horovod/horovod:0.28.1
command: python examples/simple_ml/main_with_horovod.py
workers: 2
resources: {gpu: 1, cpu: "4", memory: 8Gi}
requirements: examples/simple_ml/requirements.txt
env:
  EPOCHS: 10
  LOG_LEVEL: info
secrets: [WANDB_API_KEY]
data: s3://datasets/diabetes/
outputs: s3://models/{project}/{sha}/{job}/
metrics:
  train_loss:
    pattern: 'Training\. Epoch (?P<step>\d+), MSE loss: (?P<value>[-+0-9.eE]+)'
    goal: min
  test_loss:
    pattern: 'Testing\. MSE loss: (?P<value>[-+0-9.eE]+), Worker: (?P<rank>\d+)'
timeout: 2h
kubernetes:
  namespace: ml-training
  tolerations:
    - {key: gpu, operator: Exists, effect: NoSchedule}
  node_selector: {gpu-type: a100}
  dns_config:
    nameservers: [10.105.222.6]
    options: [{name: ndots, value: "2"}]
  service_account: trainer
  image_pull_secrets: [registry-credentials]
  pip_cache_pvc: pip-cache
  ttl_seconds_after_finished: 3600
  unschedulable_timeout: 10m
"""

_INTRO = """\
# `train.yaml` reference

`train.yaml` at the root of your repository describes one distributed training job. ci-runner
reads it from the exact commit being built (`git show <sha>:train.yaml`), checks it against the
schema below and reports every mistake at once, each with its line, what is wrong and how to fix
it; nothing runs until the file is valid. Check it yourself with `ci-runner validate`.

Only `name`, `image` and `command` are required. Every rank sees `DATA_URI`, `OUTPUT_URI`
(`outputs` with its placeholders filled in), `CI_RUNNER_SHA`, `CI_RUNNER_JOB` and
`CI_RUNNER_PROJECT`, plus `env` and `secrets`. A manual pipeline run may override `workers` with
the variable `CI_RUNNER_WORKERS` and append arguments to `command` with `CI_RUNNER_ARGS`
(split like a shell command line); an empty variable changes nothing.

This file is generated from the schema in `ci_runner/spec/schema.py`
(`python -m ci_runner.spec.schema`); a test keeps them equal.

## Example

```yaml
"""


_FORMATS = """
## Value formats

- **duration**: whole seconds (`600`) or a number with units `d`, `h`, `m`, `s` in that order
  (`90s`, `30m`, `2h`, `1h30m`, `7d`); more than 0 and at most 7 days.
- **quantity**: a Kubernetes quantity: a number with an optional suffix `m` (thousandths), `k`,
  `M`, `G`, `T`, `P`, `E` or `Ki`, `Mi`, `Gi`, `Ti`, `Pi`, `Ei` (`4`, `500m`, `8Gi`).
- **URI**: `s3://bucket/key/...` or `file:///absolute/path/`. In `outputs`, `{project}` (the
  GitLab project path), `{sha}` (the full commit SHA) and `{job}` (the name ci-runner gives the
  training job) are filled in; `{{` and `}}` stand for literal braces.
- **names** (`secrets`, `env` keys, metric names): letters, digits and `_`, not starting with a
  digit; `DATA_URI`, `OUTPUT_URI`, `PIP_CACHE_DIR`, `GIT_USERNAME`, `GIT_PASSWORD` and
  `CI_RUNNER_*` are reserved for ci-runner.
- Kubernetes names (`service_account`, `priority_class`, `image_pull_secrets`, `queue`,
  `pip_cache_pvc`): lowercase letters, digits, `-` and `.`; `namespace`: lowercase letters,
  digits and `-`.
"""


def schema_markdown() -> str:
    """The train.yaml reference (``docs/train-yaml.md``), generated from :data:`SCHEMA`."""
    lines = [
        _INTRO + EXAMPLE + "```",
        "",
        "## Fields",
        "",
        "| Field | Type | Default | Description |",
        "| --- | --- | --- | --- |",
    ]
    lines.extend(_rows(SCHEMA, ""))
    return "\n".join(lines) + "\n" + _FORMATS


def _rows(record: Record, prefix: str) -> list[str]:
    rows: list[str] = []
    for spec in record.fields:
        path = prefix + spec.key
        kind = spec.kind
        default = "required" if spec.required else (spec.default or "—")
        description = f"{spec.description} Example: `{spec.key}: {spec.example}`"
        rows.append(f"| `{path}` | {kind.doc} | {default} | {_cell(description)} |")
        if isinstance(kind, Record):
            rows.extend(_rows(kind, path + "."))
        elif isinstance(kind, ListOf) and isinstance(kind.item, Record):
            rows.extend(_rows(kind.item, path + "[]."))
        elif isinstance(kind, MapOf) and isinstance(kind.value, Record):
            rows.extend(_rows(kind.value, path + ".<name>."))
    return rows


def _home_of(key: str) -> str | None:
    """The mapping ``key`` is a field of ("" for the top level, "kubernetes", ...), if any."""
    return _HOMES.get(key)


def _homes(record: Record, prefix: str) -> dict[str, str]:
    homes: dict[str, str] = {}
    for spec in record.fields:
        homes.setdefault(spec.key, prefix)
        if isinstance(spec.kind, Record):
            for key, home in _homes(spec.kind, key_path(prefix, spec.key)).items():
                homes.setdefault(key, home)
    return homes


_HOMES: Final = _homes(SCHEMA, "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


if __name__ == "__main__":
    sys.stdout.write(schema_markdown())
