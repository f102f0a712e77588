"""The rules names in train.yaml follow: Kubernetes names, label keys and values, environment
variable and metric names, IP addresses; and the helpers their fixes use (:func:`slugify`,
:func:`closest` for "did you mean").

A rule takes a string and returns ``None`` when it is fine, else ``(what is wrong, how to fix)``.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Final, TypeAlias

from ci_runner.config.yamlsource import shorten

Wrong: TypeAlias = tuple[str, str]  # (what is wrong, how to fix it)
Rule: TypeAlias = Callable[[str], "Wrong | None"]

_DNS1035: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_LABEL_NAME: Final = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_METRIC_NAME: Final = _ENV_NAME


def slugify(text: str, limit: int) -> str:
    """A DNS-1035 label of at most ``limit`` characters made from ``text``:
    "Simple_ML v2" → "simple-ml-v2"."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")
    slug = re.sub(r"^[^a-z]+", "", slug) or "job"
    return slug[:limit].rstrip("-")


def name_prefix(limit: int) -> Rule:
    """The rule for the job's name: a DNS-1035 label of at most ``limit`` characters."""

    def rule(value: str) -> Wrong | None:
        if len(value) > limit:
            return (
                f"must be at most {limit} characters (it names the job's pods), got {len(value)}",
                f"shorten it, e.g. name: {slugify(value, limit)}",
            )
        if not _DNS1035.fullmatch(value):
            return (
                "must be lowercase letters, digits and '-', start with a letter and end with a "
                f"letter or digit, got {shorten(value)}",
                f"write name: {slugify(value, limit)}",
            )
        return None

    return rule


def k8s_name(what: str, subdomain: bool) -> Rule:
    """The rule for a Kubernetes object name: a DNS-1123 subdomain (253 characters, dots
    allowed) or label (63 characters); ``what`` names it in the message ("namespace")."""
    pattern, limit = (_DNS1123_SUBDOMAIN, 253) if subdomain else (_DNS1123_LABEL, 63)
    allowed = (
        "lowercase letters, digits, '-' and '.'"
        if subdomain
        else "lowercase letters, digits and '-'"
    )

    def rule(value: str) -> Wrong | None:
        if len(value) <= limit and pattern.fullmatch(value):
            return None
        return (
            f"must be a Kubernetes {what} name ({allowed}, starting and ending with a letter "
            f"or digit, at most {limit} characters), got {shorten(value)}",
            f"write e.g. {slugify(value, limit)}",
        )

    return rule


def label_key(value: str) -> Wrong | None:
    """A Kubernetes label key: an optional DNS-1123 subdomain and '/', then a 63-character name."""
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


def label_value(value: str) -> Wrong | None:
    """A Kubernetes label value (may be empty)."""
    if len(value) <= 63 and _LABEL_NAME.fullmatch(value):
        return None
    return (
        f"must be a Kubernetes label value (at most 63 letters, digits, '-', '_' or '.', "
        f"starting and ending with a letter or digit), got {shorten(value)}",
        "write a value such as true or a100",
    )


def env_name(reserved: Sequence[str], reserved_prefix: str) -> Rule:
    """The rule for an environment variable a user sets: a portable name, none of ``reserved``
    and not starting with ``reserved_prefix`` (those ci-runner sets itself)."""

    def rule(value: str) -> Wrong | None:
        if not _ENV_NAME.fullmatch(value):
            return (
                f"{shorten(value)} is not a valid environment variable name",
                "use letters, digits and '_', not starting with a digit, e.g. LEARNING_RATE",
            )
        if value in reserved or value.startswith(reserved_prefix):
            return (
                f"{value} is set by ci-runner for every rank",
                f"choose another name ({', '.join(reserved)} and {reserved_prefix}* are reserved)",
            )
        return None

    return rule


def metric_name(value: str) -> Wrong | None:
    """A metric's name: at most 63 letters, digits and '_', not starting with a digit."""
    if _METRIC_NAME.fullmatch(value) and len(value) <= 63:
        return None
    return (
        f"{shorten(value)} is not a valid metric name",
        "use at most 63 letters, digits and '_', not starting with a digit, e.g. train_loss",
    )


def ip_address(value: str) -> Wrong | None:
    """An IPv4 or IPv6 address."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return (f"must be an IP address, got {shorten(value)}", "write e.g. 10.96.0.10")
    return None


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice ``word`` was probably meant to be (same letters in another case first), if any."""
    by_case = [choice for choice in choices if choice.lower() == word.lower()]
    if by_case:
        return by_case[0]
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return close[0] if close else None
