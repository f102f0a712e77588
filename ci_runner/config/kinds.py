"""The kinds of value particular to train.yaml, built on the engine: where data lives
(:class:`Uri`, with the ``outputs`` placeholders), a file in the repository (:class:`RepoPath`)
and a metric's regular expression (:class:`MetricPattern`)."""

from __future__ import annotations

import posixpath
import re
import string
from collections.abc import Sequence
from typing import Final

from ci_runner.config.engine import INVALID, At, Invalid, Kind, Str
from ci_runner.config.names import Wrong
from ci_runner.config.yamlsource import YNode, shorten

_S3_BUCKET: Final = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class Uri(Kind[str]):
    """An ``s3://bucket/key`` or ``file:///absolute/path`` URI, which may use ``placeholders``
    (``{name}``; ``{{`` and ``}}`` are literal braces) when there are any."""

    doc = "URI"

    def __init__(self, placeholders: Sequence[str] = ()) -> None:
        self.placeholders = tuple(placeholders)

    def check(self, node: YNode, at: At) -> str | Invalid:
        value = Str(spaces=False).check(node, at)
        if isinstance(value, Invalid):
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
            wrong = _placeholder_problem(value, self.placeholders)
            if wrong is not None:
                return at.problem(node.line, wrong[0], wrong[1])
        return value


def _placeholder_problem(template: str, placeholders: tuple[str, ...]) -> Wrong | None:
    allowed = ", ".join("{" + name + "}" for name in placeholders)
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
        if name not in placeholders or spec or conversion:
            shown = "{" + name + ("!" + conversion if conversion else "")
            shown += (":" + spec if spec else "") + "}"
            return (
                f"uses the unknown placeholder {shorten(shown)}",
                f"use only the placeholders {allowed}",
            )
    return None


class RepoPath(Kind[str]):
    """A file path relative to the repository root, inside the repository."""

    doc = "path in the repository"

    def check(self, node: YNode, at: At) -> str | Invalid:
        value = Str().check(node, at)
        if isinstance(value, Invalid):
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


class MetricPattern(Kind["re.Pattern[str]"]):
    """A Python regular expression with a named group ``value`` (the metric's number) whose
    named groups are all among ``groups``."""

    doc = "regular expression"

    def __init__(self, groups: Sequence[str]) -> None:
        self.groups = tuple(groups)

    def check(self, node: YNode, at: At) -> re.Pattern[str] | Invalid:
        value = Str().check(node, at)
        if isinstance(value, Invalid):
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
        unknown = [name for name in pattern.groupindex if name not in self.groups]
        if unknown:
            return at.problem(
                node.line,
                f"has the named group {unknown[0]!r}; only {_listing(self.groups)} are read",
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


def _listing(words: tuple[str, ...]) -> str:
    """('a', 'b', 'c') → "'a', 'b' and 'c'"."""
    quoted = [repr(word) for word in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]
