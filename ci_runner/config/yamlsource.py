"""Safe YAML loading that remembers the line of every key, value and list item.

``parse`` turns the text of a YAML file into a small tree of :class:`YScalar`, :class:`YMapping`
and :class:`YSequence` nodes, each carrying its 1-based line, so that later validation can point
at the exact place of a mistake. Only YAML's plain data types are built (PyYAML's safe
resolver); no Python objects. Hostile input is bounded: the file size, the nesting depth, the
number of nodes (also after alias expansion) and the number of aliases are capped, and every
failure is a :class:`~ci_runner.errors.ConfigError`, never a PyYAML or Python error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Union

import yaml

from ci_runner.errors import ConfigError, Problem

MAX_BYTES: Final = 1024 * 1024  # a train.yaml is a few hundred bytes; 1 MiB is generous
MAX_DEPTH: Final = 50  # nesting levels of mappings and lists
MAX_NODES: Final = 10_000  # nodes in the document, counting every alias expansion
MAX_ALIASES: Final = 100  # uses of *alias in the document

Scalar = Union[str, int, float, bool, None]  # noqa: UP007 (a runtime alias; py3.10 needs Union)

_TAG: Final = "tag:yaml.org,2002:"
_BOM: Final = "\ufeff"
_SYNTAX_FIX: Final = (
    "correct the YAML on that line (indentation, ':' after keys, closing quotes/brackets)"
)
_EMPTY: Final = "the file is empty"
_EMPTY_FIX: Final = "write the job's settings, at least name, image and command"


@dataclass(frozen=True)
class YScalar:
    """A scalar: its value after YAML's resolution (``true`` → True) and its text as written."""

    value: Scalar
    text: str
    line: int
    broken: bool = False  # unreadable (a problem is already reported): validation skips it


@dataclass(frozen=True)
class YEntry:
    """One ``key: value`` of a mapping; keys are the key's text as written."""

    key: str
    key_line: int
    value: YNode


@dataclass(frozen=True)
class YMapping:
    entries: tuple[YEntry, ...]
    line: int

    def keys(self) -> list[str]:
        return [entry.key for entry in self.entries]

    def get(self, key: str) -> YEntry | None:
        for entry in self.entries:
            if entry.key == key:
                return entry
        return None

    def __iter__(self) -> Iterator[YEntry]:
        return iter(self.entries)


@dataclass(frozen=True)
class YSequence:
    items: tuple[YNode, ...]
    line: int


YNode = Union[YScalar, YMapping, YSequence]  # noqa: UP007


@dataclass(frozen=True)
class Document:
    """A parsed file: its top-level mapping and the problems found that did not stop parsing
    (duplicate keys, unsupported tags); validation reports them with its own."""

    root: YMapping
    problems: tuple[Problem, ...] = field(default=())


class _Stop(Exception):
    """A problem that ends parsing: raised inside the loader, turned into a ConfigError."""

    def __init__(self, line: int | None, message: str, fix: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message
        self.fix = fix


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with limits on depth, node count and aliases while composing.

    Composing is recursive in PyYAML, so the depth check here is also what keeps a deeply
    nested document from reaching Python's recursion limit.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0
        self.nodes = 0
        self.aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise _Stop(
                    line,
                    f"uses more than {MAX_ALIASES} YAML aliases (*name)",
                    "write the values out instead of repeating them through aliases",
                )
        else:
            self.nodes += 1
            if self.nodes > MAX_NODES:
                raise _Stop(
                    line,
                    f"has more than {MAX_NODES} values",
                    "keep train.yaml small: it describes one training job",
                )
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise _Stop(
                    line,
                    f"nests mappings and lists more than {MAX_DEPTH} levels deep",
                    "flatten the structure",
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def parse(text: str | bytes, file: str = "train.yaml") -> Document:
    """Parse YAML text whose top level must be a mapping.

    Raises ConfigError (with one problem) when the text cannot be read as one YAML mapping:
    too large, not UTF-8, a syntax error, several documents, too deep or too many values.
    """
    source = _decode(text, file)
    loader: _BoundedLoader | None = None
    try:
        if source is None:
            raise _Stop(1, _EMPTY, _EMPTY_FIX)
        loader = _BoundedLoader(source)
        node = _compose_single(loader)
    except _Stop as stop:
        raise ConfigError([Problem(file, "", stop.line, stop.message, stop.fix)]) from stop
    except yaml.MarkedYAMLError as error:
        raise ConfigError([_syntax_problem(error, file)]) from error
    except yaml.reader.ReaderError as error:
        raise ConfigError([_reader_problem(error, source or "", file)]) from error
    except yaml.YAMLError as error:  # any other PyYAML failure: still one readable line
        message = " ".join(str(error).split())
        raise ConfigError(
            [Problem(file, "", None, f"is not valid YAML: {message}", "correct the YAML syntax")]
        ) from error
    finally:
        if loader is not None:
            loader.dispose()
    walker = _Walker(loader, file)
    try:
        root = walker.node(node, "", line_hint=node.start_mark.line + 1, depth=0)
    except _Stop as stop:
        raise ConfigError([Problem(file, "", stop.line, stop.message, stop.fix)]) from stop
    if isinstance(root, YScalar) and root.value is None and not root.text:
        raise ConfigError([Problem(file, "", 1, _EMPTY, _EMPTY_FIX)])  # only "---" or "..."
    if not isinstance(root, YMapping):
        found = "a list" if isinstance(root, YSequence) else _scalar_found(root)
        raise ConfigError(
            [
                Problem(
                    file,
                    "",
                    root.line,
                    f"the file must be a mapping of settings (key: value lines), got {found}",
                    "write one setting per line, e.g. name: my-job",
                )
            ]
        )
    return Document(root, tuple(walker.problems))


def _decode(text: str | bytes, file: str) -> str | None:
    """The text as a str without BOM, or None when it holds no document at all."""
    size = len(text.encode("utf-8", "surrogatepass")) if isinstance(text, str) else len(text)
    if size > MAX_BYTES:
        raise ConfigError(
            [
                Problem(
                    file,
                    "",
                    None,
                    f"is {size} bytes, more than the {MAX_BYTES} bytes a train.yaml may have",
                    "keep train.yaml small: it describes one training job",
                )
            ]
        )
    if isinstance(text, bytes):
        data = text
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            line = data.count(b"\n", 0, error.start) + 1
            byte = data[error.start]
            raise ConfigError(
                [
                    Problem(
                        file,
                        "",
                        line,
                        f"is not UTF-8 text (byte 0x{byte:02x} cannot be decoded)",
                        "save the file with UTF-8 encoding",
                    )
                ]
            ) from error
    text = text.removeprefix(_BOM)
    return text if text.strip() else None


def _compose_single(loader: _BoundedLoader) -> yaml.Node:
    loader.get_event()  # type: ignore[no-untyped-call]  # StreamStartEvent
    if loader.check_event(yaml.StreamEndEvent):
        raise _Stop(1, _EMPTY, _EMPTY_FIX)
    node = loader.compose_document()
    assert node is not None  # a document always has a node (an empty one is a null scalar)
    if not loader.check_event(yaml.StreamEndEvent):
        line = loader.peek_event().start_mark.line + 1  # type: ignore[no-untyped-call]
        raise _Stop(
            line,
            "holds more than one YAML document ('---' starts a second one)",
            "keep one document per file: remove the '---' line and what follows, or merge them",
        )
    return node


def _syntax_problem(error: yaml.MarkedYAMLError, file: str) -> Problem:
    mark = error.problem_mark or error.context_mark
    line = mark.line + 1 if mark is not None else None
    problem = error.problem or "invalid YAML"
    if "'\\t'" in problem or "tab character" in problem:
        return Problem(
            file,
            "",
            line,
            "contains a tab character where YAML expects spaces (tabs cannot indent YAML)",
            "indent with spaces instead of tabs",
        )
    if error.context and "duplicate anchor" in error.context:
        first = error.context_mark.line + 1 if error.context_mark else None
        anchor = error.context.split("anchor", 1)[1].split(";")[0].strip()
        return Problem(
            file,
            "",
            line,
            f"defines the anchor &{anchor.strip(chr(39))} twice (first at line {first})",
            "give each anchor a different name",
        )
    detail = problem
    if error.context:
        context_line = error.context_mark.line + 1 if error.context_mark else None
        detail = f"{problem} ({error.context}"
        detail += f" started at line {context_line})" if context_line not in (None, line) else ")"
    detail = " ".join(detail.split())
    return Problem(
        file,
        "",
        line,
        f"is not valid YAML: {detail}",
        _SYNTAX_FIX,
    )


def _reader_problem(error: yaml.reader.ReaderError, source: str, file: str) -> Problem:
    position = error.position if isinstance(error.position, int) else 0
    line = source.count("\n", 0, position) + 1
    character = error.character
    code = ord(character) if isinstance(character, str) else int(character)
    return Problem(
        file,
        "",
        line,
        f"contains the character U+{code:04X}, which YAML does not allow",
        "remove the character (or write it as an escape inside a double-quoted string)",
    )


def _scalar_found(node: YNode) -> str:
    if isinstance(node, YScalar):
        if node.value is None:
            return "null (an empty value)"
        if isinstance(node.value, bool):
            return "the boolean " + ("true" if node.value else "false")
        if isinstance(node.value, (int, float)):
            text = node.text if len(node.text) <= 20 else node.text[:17] + "..."
            return f"the number {text}"
        return "the string " + shorten(node.value)
    return "a mapping" if isinstance(node, YMapping) else "a list"


def shorten(value: str, limit: int = 40) -> str:
    """A string as a one-line quoted literal, cut to about ``limit`` characters."""
    if len(value) > limit:
        value = value[: limit - 3] + "..."
    return repr(value)


_PLAIN_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def key_path(path: str, key: str) -> str:
    """The path of ``key`` inside the mapping at ``path``: ``kubernetes.namespace``; keys that are
    not plain names are quoted (``env['A B']``) so a path is always one readable line."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{shorten(key)}]"


def index_path(path: str, index: int) -> str:
    """The path of item ``index`` of the list at ``path``: ``kubernetes.tolerations[0]``."""
    return f"{path}[{index}]"


def describe(node: YNode) -> str:
    """What a node is, for messages: "the string 'two'", "a list", "null (an empty value)"."""
    return _scalar_found(node)


def _short_tag(tag: str) -> str:
    return "!!" + tag.removeprefix(_TAG) if tag.startswith(_TAG) else tag


_TAG_NOUNS: Final = {
    "null": "null",
    "bool": "a boolean",
    "int": "a whole number",
    "float": "a number",
}


class _Walker:
    """Turns composed PyYAML nodes into Y* nodes, expanding aliases within the node budget."""

    def __init__(self, loader: _BoundedLoader, file: str) -> None:
        self.loader = loader
        self.file = file
        self.problems: list[Problem] = []
        self.count = 0

    def problem(self, path: str, line: int, message: str, fix: str) -> None:
        self.problems.append(Problem(self.file, path, line, message, fix))

    def node(self, node: yaml.Node, path: str, line_hint: int, depth: int) -> YNode:
        self.count += 1
        line = node.start_mark.line + 1
        if self.count > MAX_NODES:
            raise _Stop(
                line,
                f"has more than {MAX_NODES} values once its aliases are expanded",
                "write the values out instead of repeating them through aliases",
            )
        if depth > MAX_DEPTH:
            raise _Stop(
                line,
                f"nests mappings and lists more than {MAX_DEPTH} levels deep (through aliases)",
                "flatten the structure",
            )
        if isinstance(node, yaml.MappingNode):
            self._check_tag(node, path, "map", line)
            return self.mapping(node, path, line, depth)
        if isinstance(node, yaml.SequenceNode):
            self._check_tag(node, path, "seq", line)
            items = tuple(
                self.node(item, index_path(path, i), line, depth + 1)
                for i, item in enumerate(node.value)
            )
            return YSequence(items, line)
        assert isinstance(node, yaml.ScalarNode)
        # An empty value ("key:" with nothing after it) is reported on the key's line.
        return self.scalar(node, path, line if node.value or node.style else line_hint)

    def mapping(self, node: yaml.MappingNode, path: str, line: int, depth: int) -> YMapping:
        entries: list[YEntry] = []
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(
                    path,
                    key_line,
                    "has a mapping or list used as a key",
                    "use plain names as keys",
                )
                continue
            key = key_node.value
            if self._surrogate(key, key_path(path, key), key_line):
                continue
            if key_node.tag == _TAG + "merge":
                self.problem(
                    path,
                    key_line,
                    "uses a YAML merge key ('<<'), which train.yaml does not support",
                    "write the keys out in this mapping",
                )
                continue
            if key in seen:
                self.problem(
                    key_path(path, key),
                    key_line,
                    f"is a duplicate key (first at line {seen[key]})",
                    "keep one of the two entries",
                )
                continue
            seen[key] = key_line
            value = self.node(value_node, key_path(path, key), key_line, depth + 1)
            entries.append(YEntry(key, key_line, value))
        return YMapping(tuple(entries), line)

    def scalar(self, node: yaml.ScalarNode, path: str, line: int) -> YScalar:
        tag = node.tag.removeprefix(_TAG)
        text = node.value
        if self._surrogate(text, path, line):
            return YScalar(text, text, line, broken=True)
        if tag in ("str", "timestamp", "value") or node.tag == "!":
            return YScalar(text, text, line)  # dates stay as written: env values want text
        if tag in _TAG_NOUNS:
            try:
                value: Any = self.loader.construct_object(node)
            except (ValueError, LookupError, OverflowError, TypeError, yaml.YAMLError):
                noun = _TAG_NOUNS[tag]
                implicit = self.loader.resolve(  # type: ignore[no-untyped-call]
                    yaml.ScalarNode, text, (True, False)
                )
                if implicit == node.tag:
                    # It looks like a number but Python refuses it: more than 4300 digits.
                    self.problem(path, line, f"{shorten(text)} is too long a number", "shorten it")
                else:
                    self.problem(
                        path,
                        line,
                        f"{shorten(text)} cannot be read as {noun}",
                        f"write {noun} or remove the !!{tag} tag",
                    )
                return YScalar(text, text, line, broken=True)
            return YScalar(value, text, line)
        self._check_tag(node, path, "str", line)
        return YScalar(text, text, line, broken=node.tag not in (_TAG + "str", "!"))

    def _surrogate(self, text: str, path: str, line: int) -> bool:
        """Whether ``text`` holds a lone surrogate (a ``"\\ud800"`` escape), which no UTF-8
        text can hold: the manifest, the log and the terminal would each fail on it."""
        found = _SURROGATE.search(text)
        if found is None:
            return False
        self.problem(
            path,
            line,
            f"contains the escape \\u{ord(found.group()):04x}, a lone UTF-16 surrogate that "
            "UTF-8 text cannot hold",
            "write the character itself (or \\U0001F600-style escapes for one beyond U+FFFF)",
        )
        return True

    def _check_tag(self, node: yaml.Node, path: str, expected: str, line: int) -> None:
        if node.tag not in (_TAG + expected, "!"):
            self.problem(
                path,
                line,
                f"uses the YAML tag {shorten(_short_tag(node.tag))}, "
                "which train.yaml does not support",
                "remove the tag and write a plain value",
            )
