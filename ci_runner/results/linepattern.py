"""Which metric patterns can be matched over a block of log lines as if line by line.

The metrics parser matches each line's text: the line without its ``\\n`` and without
horovodrun's ``[rank]<stdout>:`` prefix, first match only. Matching over a block of a thousand
lines (RE2 on its bytes, from where the pattern's leading text is) costs a fraction of a thousand
line splits and searches, and gives the same matches when the pattern

* cannot match a line break (so a match stays within one line),
* has no anchors and no lookarounds (``\\b`` and ``\\B`` are fine: the prefix ends with ``:`` and
  a line with ``\\n``, both non-word characters, as the start and end of the text are),
* cannot match the empty string, and
* cannot start inside a prefix: one of its first fixed characters matches no character a prefix
  is made of, and none before it matches the prefix's closing ``:``.

:func:`block_pattern` decides that from the parsed pattern, conservatively: a construct it does
not know makes the pattern line-by-line only. Appending ``[^\\n]*`` makes the first match on a
line consume the rest of it, so a scan of the block finds at most one match a line, as the parser
does (it skips to the next line itself).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any, Final

# Every character of a prefix: "[12,3]<stdout>:" / "[3]<stderr>:" / torchrun's "[3]<std>:".
PREFIX_CHARS: Final = frozenset("0123456789[],<>:stdouer")
_GLOBAL_FLAGS: Final = re.compile(r"(?:\(\?[aiLmsux]+\))+")
_CATEGORIES: Final[dict[str, Callable[[str], bool]]] = {
    "CATEGORY_DIGIT": str.isdigit,
    "CATEGORY_NOT_DIGIT": lambda c: not c.isdigit(),
    "CATEGORY_SPACE": str.isspace,
    "CATEGORY_NOT_SPACE": lambda c: not c.isspace(),
    "CATEGORY_WORD": lambda c: c.isalnum() or c == "_",
    "CATEGORY_NOT_WORD": lambda c: not (c.isalnum() or c == "_"),
}
_REPEATS: Final = {"MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"}
_WORD_BOUNDARIES: Final = {"AT_BOUNDARY", "AT_NON_BOUNDARY"}

Items = Sequence[tuple[Any, Any]]


class _Unknown(Exception):
    """A construct this module does not reason about."""


def block_pattern(pattern: re.Pattern[str]) -> str | None:
    """The text of ``pattern`` to match over blocks of whole lines (RE2 syntax, as ``pattern``
    passed validation), or None when only line by line is exact. ``pattern`` itself is only
    read, never matched: the parser runs it on RE2, first match on each line of a block
    (:meth:`ci_runner.config.linear.LinearPattern.first_on_each_line`), which finds what this
    text finds over the block."""
    items = _parse(pattern)
    if items is None:
        return None
    ignore_case = bool(pattern.flags & re.IGNORECASE)
    try:
        safe = (
            not _may_match_newline(items, bool(pattern.flags & re.DOTALL))
            and not _nullable(items)
            and _cannot_start_in_prefix(items, ignore_case)
        )
    except Exception:  # _Unknown, or a parse tree unlike the ones this knows: line by line
        return None
    if not safe:
        return None
    if pattern.flags & re.VERBOSE:
        return None  # RE2 has no verbose mode: validation refuses such a pattern
    flags = _GLOBAL_FLAGS.match(pattern.pattern)
    lead = flags.group() if flags else ""
    body = pattern.pattern[len(lead) :]
    return f"{lead}(?:{body})[^\\n]*"


def leading_text(pattern: re.Pattern[str]) -> str:
    """The text every match of ``pattern`` begins with ("" if none or unknown): a block without
    it has no match, and ``in`` finds that far faster than the regex scan."""
    items = _parse(pattern)
    if items is None or pattern.flags & re.IGNORECASE:
        return ""
    text = ""
    for op, arg in _leading_characters(items):
        if _name(op) != "LITERAL":
            break
        text += chr(int(arg))
    return text


def _parse(pattern: re.Pattern[str]) -> Items | None:
    # The standard library's own parser (private, renamed in 3.11): without it, no fast path.
    for name in ("re._parser", "sre_parse"):
        try:
            parser: Any = importlib.import_module(name)
            return list(parser.parse(pattern.pattern, pattern.flags).data)
        except Exception:  # any failure only means "line by line"
            continue
    return None


def _name(op: Any) -> str:
    return str(op)


def _may_match_newline(items: Items, dotall: bool) -> bool:
    for op, arg in items:
        name = _name(op)
        if name in ("LITERAL", "NOT_LITERAL", "IN"):
            if _char_matches(name, arg, "\n", ignore_case=False):
                return True
        elif name == "ANY":
            if dotall:
                return True
        elif name == "SUBPATTERN":
            _group, add, remove, sub = arg
            inner = (dotall or bool(add & re.DOTALL)) and not remove & re.DOTALL
            if _may_match_newline(sub, inner):
                return True
        elif name == "ATOMIC_GROUP":
            if _may_match_newline(arg, dotall):
                return True
        elif name == "BRANCH":
            if any(_may_match_newline(branch, dotall) for branch in arg[1]):
                return True
        elif name in _REPEATS:
            if _may_match_newline(arg[2], dotall):
                return True
        elif name == "AT":
            if _name(arg) not in _WORD_BOUNDARIES:
                raise _Unknown(name)
        else:
            raise _Unknown(name)  # lookarounds, backreferences, conditionals
    return False


def _nullable(items: Items) -> bool:
    return all(_item_nullable(op, arg) for op, arg in items)


def _item_nullable(op: Any, arg: Any) -> bool:
    name = _name(op)
    if name in ("LITERAL", "NOT_LITERAL", "IN", "ANY"):
        return False
    if name == "SUBPATTERN":
        return _nullable(arg[3])
    if name == "ATOMIC_GROUP":
        return _nullable(arg)
    if name == "BRANCH":
        return any(_nullable(branch) for branch in arg[1])
    if name in _REPEATS:
        return int(arg[0]) == 0 or _nullable(arg[2])
    if name == "AT":
        return True
    raise _Unknown(name)


def _cannot_start_in_prefix(items: Items, ignore_case: bool) -> bool:
    """True when a leading fixed character can match no prefix character, and none before it
    can match the prefix's last one, ``:``: a match cannot have begun inside a prefix."""
    for op, arg in _leading_characters(items):
        name = _name(op)
        if not any(_char_matches(name, arg, c, ignore_case) for c in PREFIX_CHARS):
            return True
        if _char_matches(name, arg, ":", ignore_case):
            return False
    return False


def _leading_characters(items: Items) -> list[tuple[Any, Any]]:
    """The single-character items every match begins with, in order, as far as they are fixed."""
    found: list[tuple[Any, Any]] = []
    for op, arg in items:
        name = _name(op)
        if name in ("LITERAL", "NOT_LITERAL", "IN", "ANY"):
            found.append((op, arg))
        elif name == "AT":
            continue  # \b, \B: zero width
        elif name == "SUBPATTERN" and not arg[1] and not arg[2]:
            inner = _leading_characters(arg[3])
            found += inner
            if len(inner) != len(arg[3]):
                break
        elif name in _REPEATS and int(arg[0]) >= 1:
            found += _leading_characters(arg[2])[:1]
            break
        else:
            break
    return found


def _char_matches(name: str, arg: Any, char: str, ignore_case: bool) -> bool:
    """Whether the single-character item ``(name, arg)`` can match ``char`` (ASCII)."""
    if name == "ANY":
        return char != "\n"
    if name == "LITERAL":
        return _same(int(arg), char, ignore_case)
    if name == "NOT_LITERAL":
        return not _same(int(arg), char, ignore_case)
    if name == "IN":
        return _set_matches(arg, char, ignore_case)
    raise _Unknown(name)


def _same(code: int, char: str, ignore_case: bool) -> bool:
    """Whether the character ``code`` matches ``char`` (ASCII), exactly."""
    if not ignore_case:
        return chr(code) == char
    if code > 127:
        # Unicode case folding pairs some non-ASCII letters with ASCII ones (the Kelvin sign
        # with k, the long s with s): not worth modelling.
        raise _Unknown("a non-ASCII character, ignoring case")
    return chr(code).lower() == char.lower()


def _set_matches(items: Items, char: str, ignore_case: bool) -> bool:
    variants = {char, char.lower(), char.upper()} if ignore_case else {char}
    negated = False
    hit = False
    for op, arg in items:
        name = _name(op)
        if name == "NEGATE":
            negated = True
        elif name == "LITERAL":
            hit = hit or _same(int(arg), char, ignore_case)
        elif name == "RANGE":
            low, high = int(arg[0]), int(arg[1])
            if ignore_case and high > 127:
                raise _Unknown("a non-ASCII range, ignoring case")
            hit = hit or any(low <= ord(v) <= high for v in variants)
        elif name == "CATEGORY":
            test = _CATEGORIES.get(_name(arg))
            if test is None:
                raise _Unknown(_name(arg))
            hit = hit or any(test(v) for v in variants)
        else:
            raise _Unknown(name)
    return hit != negated
