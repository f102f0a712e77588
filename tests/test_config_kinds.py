"""ci_runner.config.kinds: URIs and the outputs placeholders, paths in the repository, metric
patterns; every problem worded exactly."""

from __future__ import annotations

import re
import warnings
from dataclasses import replace
from typing import cast

import pytest

from ci_runner.config.kinds import CREDENTIALS, UrlCredential
from ci_runner.config.schema import load_config
from testing.config_cases import BASE, problems

RE2_FIX = (
    "write it without backreferences, lookarounds, atomic groups, possessive repeats, "
    "conditionals and inline flags other than i, m, s and U: metric patterns are matched by "
    "RE2, in time linear in the line"
)
KIND_PROBLEMS = [
    (
        "requirements: /etc/passwd",
        "train.yaml:4: requirements: must be relative to the repository root, got the "
        "absolute path '/etc/passwd'; fix: write the path from the repository root, e.g. "
        "requirements: requirements.txt",
    ),
    (
        "requirements: a/../../x",
        "train.yaml:4: requirements: must stay inside the repository ('..' is not "
        "allowed), got 'a/../../x'; fix: write the path from the repository root, e.g. "
        "requirements: requirements.txt",
    ),
    (
        "requirements: reqs/",
        "train.yaml:4: requirements: must name a file, got 'reqs/'; fix: write the file's "
        "path from the repository root, e.g. requirements: requirements.txt",
    ),
    (
        "requirements: 'C:\\\\x.txt'",
        "train.yaml:4: requirements: must be relative to the repository root, got the "
        "absolute path 'C:\\\\\\\\x.txt'; fix: write the path from the repository root, "
        "e.g. requirements: requirements.txt",
    ),
    (
        "data: s3://Bad_Bucket/x",
        "train.yaml:4: data: has an invalid S3 bucket name 'Bad_Bucket'; fix: use 3-63 "
        "lowercase letters, digits, '.' and '-', e.g. s3://models/runs/",
    ),
    (
        "data: s3://",
        "train.yaml:4: data: has an invalid S3 bucket name ''; fix: use 3-63 lowercase "
        "letters, digits, '.' and '-', e.g. s3://models/runs/",
    ),
    (
        "data: file://relative/x",
        "train.yaml:4: data: must name an absolute path (file:///path), got "
        "'file://relative/x'; fix: write three slashes, e.g. file:///relative/x",
    ),
    (
        "data: /abs/path",
        "train.yaml:4: data: must be an s3:// or file:// URI, got '/abs/path' (no scheme); "
        "fix: write s3://bucket/path/ or file:///absolute/path/",
    ),
    (
        "data: gs://b/x",
        "train.yaml:4: data: must be an s3:// or file:// URI, got the scheme gs://; fix: "
        "write s3://bucket/path/ or file:///absolute/path/",
    ),
    (
        "outputs: s3://models/{sha:.8}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{sha:.8}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "outputs: s3://models/{sha!r}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{sha!r}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "outputs: s3://models/{/",
        "train.yaml:4: outputs: has an unmatched '{' or '}': 's3://models/{/'; fix: use "
        "only the placeholders {project}, {sha}, {job}; write {{ or }} for a literal brace",
    ),
    (
        "outputs: s3://models/}/",
        "train.yaml:4: outputs: has an unmatched '{' or '}': 's3://models/}/'; fix: use "
        "only the placeholders {project}, {sha}, {job}; write {{ or }} for a literal brace",
    ),
    (
        "outputs: s3://models/{}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "outputs: s3://models/{0}/",
        "train.yaml:4: outputs: uses the unknown placeholder '{0}'; fix: use only the "
        "placeholders {project}, {sha}, {job}",
    ),
    (
        "metrics: {loss: {pattern: 'x'}}",
        "train.yaml:4: metrics.loss.pattern: has no group named 'value' (the metric's "
        "number); fix: mark the number with (?P<value>...), e.g. 'loss: "
        "(?P<value>[-+0-9.eE]+)'",
    ),
    (
        "metrics: {loss: {pattern: '[z-a](?P<value>x)'}}",
        "train.yaml:4: metrics.loss.pattern: is not a valid regular expression: bad "
        "character range z-a at position 1; fix: correct the pattern (in single quotes "
        "YAML keeps backslashes as written)",
    ),
    (
        "metrics: {loss: {pattern: '(?P<value>x)(?P<epoch>\\d+)'}}",
        "train.yaml:4: metrics.loss.pattern: has the named group 'epoch'; only 'value', "
        "'step' and 'rank' are read; fix: rename it to one of those, or make it unnamed: ( "
        "... ) instead of (?P<epoch> ... )",
    ),
    (
        "metrics: {loss: {pattern: 'a{99999999999}(?P<value>x)'}}",
        "train.yaml:4: metrics.loss.pattern: is not a valid regular expression: the "
        "repetition number is too large; fix: simplify the pattern",
    ),
    (
        "metrics: {loss: {pattern: 'loss [[:digit:]]+ (?P<value>[0-9.]+)'}}",
        "train.yaml:4: metrics.loss.pattern: is ambiguous: possible nested set at position 6, "
        "which Python's re and RE2 may read differently; fix: write the class out ([0-9] for "
        "[[:digit:]], [a-zA-Z] for [[:alpha:]]) and escape a '[' inside [...] as \\[",
    ),
    (
        "metrics: {loss: {pattern: 'loss (?P<value>[-+0-9.eE||]+)'}}",
        "train.yaml:4: metrics.loss.pattern: is ambiguous: possible set union at position 24, "
        "which Python's re and RE2 may read differently; fix: escape a doubled '-', '&', '~' or "
        "'|' inside [...] with a backslash",
    ),
    *(
        (
            f"metrics: {{loss: {{pattern: '{pattern}'}}}}",
            f"train.yaml:4: metrics.loss.pattern: uses what RE2 cannot run ({reason}); fix: "
            + RE2_FIX,
        )
        for pattern, reason in [
            (r"(\d)(?P<value>\d+)\1", "invalid escape sequence: \\1"),
            ("(?P<x>a)(?P<value>(?P=x))", "invalid perl operator: (?P"),
            (r"loss (?=\d)(?P<value>\d+)", "invalid perl operator: (?="),
            (r"(?<=loss )(?P<value>\d+)", "invalid perl operator: (?<="),
            (r"loss (?P<value>\d++)", "bad repetition operator: ++"),
            (r"loss (?>(?P<value>\d+))", "invalid perl operator: (?>"),
            (r"(a)?(?(1)b|c)(?P<value>\d)", "invalid perl operator: (?("),
            (r"(?x)loss (?P<value>\d+)", "invalid perl operator: (?x"),
            (r"loss (?P<value>\d+)\Z", "invalid escape sequence: \\Z"),
            (r"(?P<value>(?:a{1000}){1000})", "invalid repetition size: {1000}"),
        ]
    ),
]


@pytest.mark.parametrize(("snippet", "expected"), KIND_PROBLEMS)
def test_each_problem_is_worded_exactly(snippet: str, expected: str) -> None:
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        assert problems(BASE + snippet + "\n") == [expected]
        assert problems(BASE + snippet + "\n") == [expected]  # as well once re has cached it
    assert [str(warning.message) for warning in shown] == []


@pytest.mark.parametrize(
    ("uri", "field"),
    [
        ("s3://bucket", "data"),
        ("s3://my.bucket-1/a/b/", "data"),
        ("file:///srv/data/", "data"),
        ("s3://models/{project}/{sha}/{job}/", "outputs"),
        ("file:///tmp/out/{job}/{{literal}}/", "outputs"),
    ],
)
def test_uris(uri: str, field: str) -> None:
    assert getattr(load_config(BASE + f"{field}: '{uri}'\n"), field) == uri


def test_requirements_path_is_normalised() -> None:
    assert load_config(BASE + "requirements: ./ml//reqs.txt\n").requirements == "ml/reqs.txt"


class _Counted:
    """A compiled expression that counts the matches it is asked for."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.calls = 0

    def match(self, text: str, pos: int = 0) -> re.Match[str] | None:
        self.calls += 1
        return self.pattern.match(text, pos)


@pytest.mark.parametrize(
    "value",
    ["a" * 70_000, "a1" * 35_000, "x://" + "a" * 70_000, "a://" * 17_500, "ab+c.d-" * 10_000],
)
def test_a_long_value_is_scanned_once_for_a_url_with_a_password(value: str) -> None:
    # The expression runs once per "://", from just after it; the scheme before it is read back
    # to the previous "://" only: each character is looked at a bounded number of times.
    url = next(c for c in CREDENTIALS if isinstance(c, UrlCredential))
    counted = _Counted(url.regex)
    probe = replace(url, regex=cast("re.Pattern[str]", counted))
    assert probe.found_in(value) is False
    assert counted.calls == value.count("://")
    assert load_config(BASE + f"env: {{BIG: '{value}'}}\n").env == (("BIG", value),)


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("https://u:p@h", True),
        ("1abc://u:p@h", True),  # the scheme starts at its first letter
        ("x_https://u:pw@h", True),
        ("a://b://u:p@h", True),
        ("1://u:p@h", False),  # no letter: no scheme
        ("http://u:$(P)@h", False),  # a reference, not a password
        ("http://host:8080/x@y", False),
    ],
)
def test_urls_with_a_password(value: str, found: bool) -> None:
    url = next(c for c in CREDENTIALS if isinstance(c, UrlCredential))
    assert url.found_in(value) is found
