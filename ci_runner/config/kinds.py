"""The kinds of value particular to train.yaml, built on the engine: where data lives
(:class:`Uri`, with the ``outputs`` placeholders), a file in the repository (:class:`RepoPath`),
a metric's regular expression (:class:`MetricPattern`), and the environment's values, which
must not be credentials written in clear (:class:`EnvValues`, the table :data:`CREDENTIALS`)."""

from __future__ import annotations

import posixpath
import re
import string
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ci_runner.config.engine import INVALID, At, Invalid, Kind, MapOf
from ci_runner.config.linear import LinearPattern, LinearPatternError
from ci_runner.config.names import Rule, Wrong
from ci_runner.config.scalars import Str
from ci_runner.config.yamlsource import YMapping, YNode, key_path, shorten

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
    """A regular expression with a named group ``value`` (the metric's number) whose named
    groups are all among ``groups``, that RE2 can run (:mod:`ci_runner.config.linear`: the
    parser matches it there, in time linear in the line). Python's ``re`` compiles it too, for
    its error messages and for what :mod:`ci_runner.results.linepattern` reads of its shape;
    it never matches it. A pattern ``re`` warns about is refused (:func:`_ambiguous`)."""

    doc = "regular expression"

    def __init__(self, groups: Sequence[str]) -> None:
        self.groups = tuple(groups)

    def check(self, node: YNode, at: At) -> re.Pattern[str] | Invalid:
        value = Str().check(node, at)
        if isinstance(value, Invalid):
            return INVALID
        try:
            # A warning is the user's mistake too (printed, it would reach the CI log with a
            # source path): an error here, and re caches no pattern that failed.
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                pattern = re.compile(value)
        except Warning as warning:
            return at.problem(node.line, *_ambiguous(str(warning)))
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
        try:
            LinearPattern(value)
        except LinearPatternError as error:
            return at.problem(
                node.line,
                f"uses what RE2 cannot run ({error})",
                "write it without backreferences, lookarounds, atomic groups, possessive "
                "repeats, conditionals and inline flags other than i, m, s and U: metric "
                "patterns are matched by RE2, in time linear in the line",
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


# What Python's re warns of in a metric pattern, and the fix. A '[' in a class is RE2's POSIX
# class ([[:digit:]]) and a nested set to Python's re (some day; a literal '[' today), so the
# validator's reading of the pattern and the parser's would differ.
_WARNING_FIXES: Final = (
    (
        "nested set",
        "write the class out ([0-9] for [[:digit:]], [a-zA-Z] for [[:alpha:]]) and escape a '[' "
        "inside [...] as \\[",
    ),
    ("possible set", "escape a doubled '-', '&', '~' or '|' inside [...] with a backslash"),
)


def _ambiguous(warning: str) -> Wrong:
    """(what is wrong, the fix) for a metric pattern Python's re warns about."""
    text = warning[:1].lower() + warning[1:]
    fix = next(
        (fix for words, fix in _WARNING_FIXES if words in text),
        "write that part of the pattern so that it has one meaning",
    )
    return f"is ambiguous: {text}, which Python's re and RE2 may read differently", fix


def _listing(words: tuple[str, ...]) -> str:
    """('a', 'b', 'c') → "'a', 'b' and 'c'"."""
    quoted = [repr(word) for word in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


# ---------------------------------------------------------------------------------------------
# Credentials written in clear. A value of train.yaml is in the repository, its history, every
# pod's spec and whatever prints them; a credential belongs in a masked CI/CD variable that
# ``secrets`` passes through the job's Secret. Each rule below matches only text that ordinary
# values do not hold: a fixed prefix its issuer chose so that scanners find it, followed by as
# many random characters as the issuer writes (or, for the prefixes others use too, a random
# look: upper and lower case letters and digits).


def _random(text: str) -> bool:
    """Whether ``text`` mixes upper and lower case letters and digits, as random keys do (a
    kebab-case name never does)."""
    return (
        any(c.isupper() for c in text)
        and any(c.islower() for c in text)
        and any(c.isdigit() for c in text)
    )


@dataclass(frozen=True)
class Credential:
    """One kind of credential: what it is called, and the expression that finds it (its
    ``body`` group, when there is one, must also look random)."""

    name: str
    regex: re.Pattern[str]
    random_body: bool = False

    def found_in(self, text: str) -> bool:
        for match in self.regex.finditer(text):
            if not self.random_body or _random(match.group("body")):
                return True
        return False


def _credential(name: str, pattern: str, random_body: bool = False) -> Credential:
    return Credential(name, re.compile(pattern), random_body)


_SCHEME_CHARS: Final = frozenset(string.ascii_letters + string.digits + "+.-")
_SCHEME_START: Final = frozenset(string.ascii_letters)


@dataclass(frozen=True)
class UrlCredential(Credential):
    """scheme://user:password@: ``regex`` matches what follows ``://``. A regular expression
    that also finds the scheme (``[A-Za-z][A-Za-z0-9+.-]*://``) tries every letter of a long
    run as the scheme's start and scans the run from each: quadratic (11 s for a 70 KB value).
    Here each ``://`` is found once, the scheme before it read back to the previous ``://``
    (whose ``/`` ends it) and the rest matched forward to the next ``/``: linear."""

    def found_in(self, text: str) -> bool:
        at = text.find("://")
        while at != -1:
            start = at
            scheme = False
            while start > 0 and text[start - 1] in _SCHEME_CHARS:
                start -= 1
                scheme = scheme or text[start] in _SCHEME_START
            if scheme and self.regex.match(text, at + 3):
                return True
            at = text.find("://", at + 3)
        return False


# A reference to another variable stands for a password, it is not one: ${NAME} and $NAME (a
# shell or pip expands them), $(NAME) (kept as those characters in env: no secret either).
_REFERENCE: Final = (
    r"\$(?:\([A-Za-z_][A-Za-z0-9_]*\)|\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)"
)

CREDENTIALS: Final = (
    # scheme://user:password@host: pip's index, a proxy, git, a database URL. The user alone,
    # a port (host:8080/...) and a referenced password are not one.
    UrlCredential(
        "a URL with a password (user:password@)",
        re.compile(r"[^/?#@\s:]*:(?!" + _REFERENCE + r"@)[^/?#@\s]+@"),
    ),
    # GitLab's token prefixes (doc/security/tokens: personal, OAuth application secret, CI/CD
    # job, deploy, runner, pipeline trigger, feed, incoming mail, agent, SCIM, feature flags
    # client), then at least 20 of the characters its tokens are made of.
    _credential(
        "a GitLab token",
        r"\b(?:glpat|gloas|glcbt|gldt|glrt|glptt|glft|glimt|glagent|glsoat|glffct)-"
        r"[0-9A-Za-z_.-]{20,}",
    ),
    # GitHub: personal (classic), OAuth, user-to-server, server-to-server, refresh tokens: the
    # prefix and 36 base62 characters; fine-grained personal tokens: github_pat_ and 82.
    _credential("a GitHub token", r"\bgh[pousr]_[0-9A-Za-z]{36}"),
    _credential("a GitHub token", r"\bgithub_pat_[0-9A-Za-z_]{50,}"),
    # Hugging Face user access tokens: hf_ and 34 letters.
    _credential("a Hugging Face token", r"\bhf_[A-Za-z]{34}\b"),
    # Slack bot and user tokens: xoxb- / xoxp-, the workspace's number, then more.
    _credential("a Slack token", r"\bxox[bp]-[0-9]{6,}-[0-9A-Za-z-]{10,}"),
    # OpenAI and Anthropic API keys: sk- (sk-proj-, sk-ant-api03-, ...) then 40 or more random
    # characters; "sk-" alone starts ordinary names too (sk-learn), hence the random look.
    _credential(
        "an API key (sk-)",
        r"\bsk-(?:[a-z]+(?:[0-9]+)?-)?(?P<body>[0-9A-Za-z_-]{40,})",
        random_body=True,
    ),
    # Stripe secret and restricted keys.
    _credential("a Stripe key", r"\b[rs]k_live_[0-9A-Za-z]{24,}"),
    # AWS access key ids: long-term (AKIA) and temporary (ASIA), 16 more upper-case letters and
    # digits.
    _credential("an AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    # A PEM private key (RSA, EC, DSA, OpenSSH, PKCS#8, encrypted or not, PGP).
    _credential(
        "a private key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
    ),
)
# An AWS secret access key: 40 base64 characters. Only with an access key id in the same
# environment (or a name that says so) is such a string taken for one.
_AWS_SECRET: Final = re.compile(r"(?<![0-9A-Za-z/+])(?P<body>[0-9A-Za-z/+]{40})(?![0-9A-Za-z/+=])")
_AWS_KEY_ID: Final = CREDENTIALS[-2]
_AWS_SECRET_NAME: Final = re.compile(r"(?:^|_)SECRET(?:_ACCESS)?_KEY$")


def credential_in(text: str) -> str | None:
    """The name of the credential ``text`` holds, or None."""
    for credential in CREDENTIALS:
        if credential.found_in(text):
            return credential.name
    return None


def _aws_secret_in(text: str) -> bool:
    return any(_random(match.group("body")) for match in _AWS_SECRET.finditer(text))


def credential_problem(what: str, secret_name: str) -> Wrong:
    """(what is wrong, the fix) for a credential written in train.yaml; never the value."""
    return (
        f"holds {what} in clear text",
        "remove it, revoke it (the repository's history keeps it) and pass it as a masked "
        f"CI/CD variable: secrets: [{secret_name}]",
    )


class EnvValues(MapOf[str]):
    """train.yaml's ``env``: names by ``key_rule`` → strings, none of them a credential."""

    def __init__(self, key_rule: Rule, *, doc: str) -> None:
        super().__init__(key_rule, Str(scalars=True, empty=True, control=True), doc=doc)

    def check(self, node: YNode, at: At) -> tuple[tuple[str, str], ...] | Invalid:
        pairs = super().check(node, at)
        if isinstance(pairs, Invalid) or not isinstance(node, YMapping):
            return pairs
        key_id = any(_AWS_KEY_ID.found_in(value) for _, value in pairs)
        ok = True
        for name, value in pairs:
            what = credential_in(value)
            aws = key_id or _AWS_SECRET_NAME.search(name) is not None
            if what is None and aws and _aws_secret_in(value):
                what = "an AWS secret access key"
            if what is not None:
                path = key_path(at.path, name)
                at.problem(at.context.lines.get(path), *credential_problem(what, name), path=path)
                ok = False
        return pairs if ok else INVALID


def credential_in_command(argv: Sequence[str]) -> Wrong | None:
    """The command line's rule: none of its words holds a credential (the launcher's arguments
    are in the MPIJob, in every process list of the pods, and in the CI log)."""
    for word in argv:
        what = credential_in(word)
        if what is not None:
            return (
                f"holds {what} in clear text",
                "remove it, revoke it (the repository's history keeps it) and pass it as a "
                "masked CI/CD variable listed under secrets:, which the program reads from its "
                "environment",
            )
    return None
