"""ci_runner.config.yamlsource: YAML with line numbers, every way a file fails to be one mapping."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ci_runner.config import yamlsource
from ci_runner.config.yamlsource import (
    MAX_BYTES,
    Document,
    YEntry,
    YMapping,
    YScalar,
    YSequence,
    index_path,
    key_path,
    parse,
)
from ci_runner.errors import ConfigError

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def errors(text: str | bytes, file: str = "train.yaml") -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(text, file)
    return caught.value.lines()


def test_values_and_lines_of_keys_values_and_items() -> None:
    document = parse(
        "# a comment\n"
        "name: job\n"
        "workers: 2\n"
        "ratio: 0.5\n"
        "flag: yes\n"
        "empty:\n"
        "items:\n"
        "  - one\n"
        "  - {k: v}\n"
        "date: 2024-01-02\n"
        "quoted: '7'\n"
    )
    assert document == Document(
        YMapping(
            (
                YEntry("name", 2, YScalar("job", "job", 2)),
                YEntry("workers", 3, YScalar(2, "2", 3)),
                YEntry("ratio", 4, YScalar(0.5, "0.5", 4)),
                YEntry("flag", 5, YScalar(True, "yes", 5)),
                YEntry("empty", 6, YScalar(None, "", 6)),
                YEntry(
                    "items",
                    7,
                    YSequence(
                        (
                            YScalar("one", "one", 8),
                            YMapping((YEntry("k", 9, YScalar("v", "v", 9)),), 9),
                        ),
                        8,
                    ),
                ),
                YEntry("date", 10, YScalar("2024-01-02", "2024-01-02", 10)),
                YEntry("quoted", 11, YScalar("7", "7", 11)),
            ),
            2,
        ),
        (),
    )


def test_mapping_lookup() -> None:
    root = parse("a: 1\nb: 2\n").root
    assert root.keys() == ["a", "b"]
    entry = root.get("b")
    assert entry is not None and entry.value == YScalar(2, "2", 2)
    assert root.get("c") is None


def test_paths() -> None:
    assert key_path("", "workers") == "workers"
    assert key_path("kubernetes", "tolerations") == "kubernetes.tolerations"
    assert key_path("env", "A B") == "env['A B']"
    assert key_path("env", "a\nb") == "env['a\\nb']"
    assert index_path("kubernetes.tolerations", 0) == "kubernetes.tolerations[0]"


@pytest.mark.parametrize(
    "text",
    [b"\xef\xbb\xbfname: job\n", "\ufeffname: job\n"],
    ids=["bytes", "str"],
)
def test_byte_order_mark_is_stripped(text: str | bytes) -> None:
    root = parse(text).root
    assert root.entries == (YEntry("name", 1, YScalar("job", "job", 1)),)


@pytest.mark.parametrize("text", ["", "   \n\n", "# only a comment\n", b"", "---\n", "---\n...\n"])
def test_empty_file(text: str | bytes) -> None:
    assert errors(text) == [
        "train.yaml:1: the file is empty; fix: write the job's settings, at least name, "
        "image and command"
    ]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("- a\n- b\n", "a list"),
        ("just text\n", "the string 'just text'"),
        ("42\n", "the number 42"),
        ("true\n", "the boolean true"),
        ("~\n", "null (an empty value)"),
    ],
)
def test_document_must_be_a_mapping(text: str, found: str) -> None:
    assert errors(text) == [
        f"train.yaml:1: the file must be a mapping of settings (key: value lines), got {found}; "
        "fix: write one setting per line, e.g. name: my-job"
    ]


def test_multiple_documents() -> None:
    assert errors("name: a\n---\nname: b\n") == [
        "train.yaml:2: holds more than one YAML document ('---' starts a second one); "
        "fix: keep one document per file: remove the '---' line and what follows, or merge them"
    ]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("kubernetes:\n\tnamespace: ml\n", 2),
        ("a:\n  b: 1\n\tc: 2\n", 3),
        ("a: [1,\t2]\n", 1),
        ("items:\n  - x\n\t- y\n", 3),
    ],
)
def test_tabs_as_indentation(text: str, line: int) -> None:
    assert errors(text) == [
        f"train.yaml:{line}: contains a tab character where YAML expects spaces (tabs cannot "
        "indent YAML); fix: indent with spaces instead of tabs"
    ]


def test_not_utf8_names_the_line_and_byte() -> None:
    assert errors(b"name: job\nimage: caf\xe9\n", "sub/train.yaml") == [
        "sub/train.yaml:2: is not UTF-8 text (byte 0xe9 cannot be decoded); "
        "fix: save the file with UTF-8 encoding"
    ]


def test_utf16_is_not_utf8() -> None:
    assert errors("name: job\n".encode("utf-16")) == [
        "train.yaml:1: is not UTF-8 text (byte 0xff cannot be decoded); "
        "fix: save the file with UTF-8 encoding"
    ]


@pytest.mark.parametrize(
    ("text", "line", "code"),
    [("a: 1\nb: \x00\n", 2, "0000"), ("a: \x07", 1, "0007"), ("a: \ud800", 1, "D800")],
)
def test_characters_yaml_forbids(text: str, line: int, code: str) -> None:
    assert errors(text) == [
        f"train.yaml:{line}: contains the character U+{code}, which YAML does not allow; "
        "fix: remove the character (or write it as an escape inside a double-quoted string)"
    ]


def test_duplicate_keys_name_both_lines_and_keep_the_first() -> None:
    document = parse("workers: 1\nname: a\nworkers: 2\nk:\n  x: 1\n  x: 2\n")
    assert [str(problem) for problem in document.problems] == [
        "train.yaml:3: workers: is a duplicate key (first at line 1); "
        "fix: keep one of the two entries",
        "train.yaml:6: k.x: is a duplicate key (first at line 5); fix: keep one of the two entries",
    ]
    assert document.root.get("workers") == YEntry("workers", 1, YScalar(1, "1", 1))


def test_quoted_and_plain_keys_are_the_same_key() -> None:
    document = parse("name: a\n'name': b\n")
    assert [str(problem) for problem in document.problems] == [
        "train.yaml:2: name: is a duplicate key (first at line 1); fix: keep one of the two entries"
    ]


def test_structural_problems_that_do_not_stop_parsing() -> None:
    document = parse(
        "<<: {a: 1}\n"
        "? [x]\n"
        ": 1\n"
        "data: !!binary aGVsbG8=\n"
        "s: !!set {a}\n"
        "custom: !thing x\n"
        "n: !!int abc\n"
        "b: !!bool maybe\n"
        "big: " + "9" * 5000 + "\n"
    )
    assert [str(problem) for problem in document.problems] == [
        "train.yaml:1: uses a YAML merge key ('<<'), which train.yaml does not support; "
        "fix: write the keys out in this mapping",
        "train.yaml:2: has a mapping or list used as a key; fix: use plain names as keys",
        "train.yaml:4: data: uses the YAML tag '!!binary', which train.yaml "
        "does not support; fix: remove the tag and write a plain value",
        "train.yaml:5: s: uses the YAML tag '!!set', which train.yaml does not "
        "support; fix: remove the tag and write a plain value",
        "train.yaml:6: custom: uses the YAML tag '!thing', which train.yaml does not support; "
        "fix: remove the tag and write a plain value",
        "train.yaml:7: n: 'abc' cannot be read as a whole number; "
        "fix: write a whole number or remove the !!int tag",
        "train.yaml:8: b: 'maybe' cannot be read as a boolean; "
        "fix: write a boolean or remove the !!bool tag",
        "train.yaml:9: big: '9999999999999999999999999999999999999...' is too long a number; "
        "fix: shorten it",
    ]


def test_unreadable_scalars_are_marked_broken() -> None:
    root = parse("n: !!int abc\nt: !thing x\nok: 1\n").root
    assert [entry.value for entry in root] == [
        YScalar("abc", "abc", 1, broken=True),
        YScalar("x", "x", 2, broken=True),
        YScalar(1, "1", 3),
    ]


def test_python_tags_build_no_objects() -> None:
    document = parse("a: !!python/object/apply:os.system [echo hacked]\n")
    assert document.root.entries == (
        YEntry("a", 1, YSequence((YScalar("echo hacked", "echo hacked", 1),), 1)),
    )
    assert [str(problem) for problem in document.problems] == [
        "train.yaml:1: a: uses the YAML tag '!!python/object/apply:os.system', "
        "which train.yaml does not support; fix: remove the tag and write a plain value"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "name: 'job\n",
            "train.yaml:2: is not valid YAML: found unexpected end of stream (while scanning a "
            "quoted scalar started at line 1)",
        ),
        ("name: a: b\n", "train.yaml:1: is not valid YAML: mapping values are not allowed here"),
        (
            "a: {b: 1\n",
            "train.yaml:2: is not valid YAML: expected ',' or '}', but got '<stream end>' "
            "(while parsing a flow mapping started at line 1)",
        ),
        (
            "a: |\n  x\n b: 1\n",
            "train.yaml:3: is not valid YAML: expected <block end>, but found '<block mapping "
            "start>' (while parsing a block mapping started at line 1)",
        ),
        ("a: *nothing\n", "train.yaml:1: is not valid YAML: found undefined alias 'nothing'"),
    ],
)
def test_syntax_errors(text: str, expected: str) -> None:
    assert errors(text) == [
        expected + "; fix: correct the YAML on that line (indentation, ':' after keys, "
        "closing quotes/brackets)"
    ]


def test_duplicate_anchor() -> None:
    assert errors("a: &x 1\nb: &x 2\n") == [
        "train.yaml:2: defines the anchor &x twice (first at line 1); "
        "fix: give each anchor a different name"
    ]


def test_huge_file_is_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_parser(*args: object) -> None:
        raise AssertionError("the file was handed to the YAML parser")

    monkeypatch.setattr(yamlsource._BoundedLoader, "__init__", no_parser)
    text = "a: " + "x" * MAX_BYTES + "\n"
    assert errors(text) == [
        f"train.yaml: is {MAX_BYTES + 4} bytes, more than the {MAX_BYTES} bytes a train.yaml "
        "may have; fix: keep train.yaml small: it describes one training job"
    ]


def test_billion_laughs_is_refused_quickly_and_small() -> None:
    tracemalloc.start()
    try:
        problems = errors(BILLION_LAUGHS)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert problems == [
        "train.yaml:1: has more than 10000 values once its aliases are expanded; "
        "fix: write the values out instead of repeating them through aliases"
    ]
    assert peak < 50 * 1024 * 1024  # the expansion stopped at the limit, not after it


def test_a_few_aliases_are_fine() -> None:
    root = parse("base: &gpu {key: gpu}\nuse: *gpu\n").root
    assert root.get("use") == YEntry(
        "use", 2, YMapping((YEntry("key", 1, YScalar("gpu", "gpu", 1)),), 1)
    )


def test_too_many_aliases() -> None:
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * 101) + "]\n"
    assert errors(text) == [
        "train.yaml:2: uses more than 100 YAML aliases (*name); "
        "fix: write the values out instead of repeating them through aliases"
    ]


def test_recursive_alias() -> None:
    assert errors("a: &a [*a]\n") == [
        "train.yaml:1: nests mappings and lists more than 50 levels deep (through aliases); "
        "fix: flatten the structure"
    ]


def test_too_many_values() -> None:
    text = "a: [" + ", ".join(["1"] * 10_001) + "]\n"
    assert errors(text) == [
        "train.yaml:1: has more than 10000 values; "
        "fix: keep train.yaml small: it describes one training job"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 1000 + "]" * 1000 + "\n",
        "a: " + "{b: " * 1000 + "1" + "}" * 1000 + "\n",
        "".join(" " * depth + f"k{depth}:\n" for depth in range(1000)),
        "[" * 100_000,
    ],
    ids=["flow-lists", "flow-mappings", "block-mappings", "unclosed"],
)
def test_deep_nesting(text: str) -> None:
    problems = errors(text)
    assert len(problems) == 1
    assert problems[0].endswith(
        ": nests mappings and lists more than 50 levels deep; fix: flatten the structure"
    )


def test_fifty_levels_are_allowed() -> None:
    # The top-level mapping is level 1, so 49 nested lists make 50 levels.
    parse("a: " + "[" * 49 + "]" * 49 + "\n")
    assert errors("a: " + "[" * 50 + "]" * 50 + "\n") == [
        "train.yaml:1: nests mappings and lists more than 50 levels deep; "
        "fix: flatten the structure"
    ]


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)),
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        b"\x7fELF\x02\x01\x01\x00",
        b"PK\x03\x04\x14\x00",
    ],
)
def test_binary_garbage(data: bytes) -> None:
    assert len(errors(data)) == 1


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_any_text_parses_or_fails_with_config_error(text: str) -> None:
    try:
        parse(text)
    except ConfigError as error:
        assert error.lines() and all("\n" not in line for line in error.lines())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary())
def test_any_bytes_parse_or_fail_with_config_error(data: bytes) -> None:
    try:
        parse(data)
    except ConfigError as error:
        assert error.lines() and all("\n" not in line for line in error.lines())


YAML_PIECES = st.sampled_from(
    [
        "a",
        ":",
        " ",
        "\n",
        "  ",
        "-",
        "[",
        "]",
        "{",
        "}",
        ",",
        "&x ",
        "*x",
        "'",
        '"',
        "#",
        "\t",
        "---\n",
        "? ",
        "!!int ",
        "!!str ",
        "|\n",
        ">\n",
        "<<: ",
        "1",
        "true",
        "~",
        "\\",
        "\ufeff",
        "%YAML 1.1\n",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(YAML_PIECES, max_size=60).map("".join))
def test_yaml_like_text_parses_or_fails_with_config_error(text: str) -> None:
    try:
        document = parse(text)
    except ConfigError as error:
        assert error.lines() and all("\n" not in line for line in error.lines())
    else:
        assert isinstance(document.root, YMapping)
        assert all("\n" not in str(problem) for problem in document.problems)
