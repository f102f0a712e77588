"""Where the templates are, and the one Jinja2 environment every template is rendered with."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Final

import jinja2

_PACKAGED: Final = Path(__file__).resolve().parent / "templates"
_SOURCE_TREE: Final = Path(__file__).resolve().parent.parent / "templates"


def templates_dir() -> Path:
    """The packaged ``ci_runner/templates`` (wheel install), else the repo's ``templates/``."""
    return _PACKAGED if _PACKAGED.is_dir() else _SOURCE_TREE


def yaml_quote(value: object) -> str:
    """``value`` as one YAML flow scalar that parses back to exactly ``value``.

    JSON is YAML, so ``json.dumps`` quotes and escapes; characters YAML 1.1 (PyYAML) would refuse
    or fold as line breaks are escaped too. A user value rendered through this filter can never
    add or change a key, whatever it contains.
    """
    if isinstance(value, float):
        return _yaml_float(value)
    return "".join(_yaml_safe_char(c) for c in json.dumps(value, ensure_ascii=False))


def _yaml_float(value: float) -> str:
    # YAML 1.1 reads "1e-05" as a string: its floats need a "." and a signed exponent.
    if not math.isfinite(value):
        raise ValueError(f"cannot render {value!r} in a manifest")
    mantissa, _, exponent = repr(value).partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    if exponent and exponent[0] not in "+-":
        exponent = "+" + exponent
    return f"{mantissa}e{exponent}" if exponent else mantissa


def _yaml_safe_char(char: str) -> str:
    code = ord(char)
    if code < 0x7F:
        return char  # json.dumps already escaped the control characters
    printable = (
        0xA0 <= code <= 0xD7FF or 0xE000 <= code <= 0xFFFD or 0x10000 <= code <= 0x10FFFF
    ) and char not in "\u2028\u2029\ufeff"
    return char if printable else f"\\u{code:04x}"


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    # Each process would compile the MPIJob template once (~45 ms, a third of `ci-runner
    # validate`); Jinja2's per-user cache in the temp directory keeps the compiled code, keyed
    # by the template's source. It writes atomically and ignores I/O errors; an unsafe temp
    # directory only means no cache.
    try:
        return jinja2.FileSystemBytecodeCache()
    except (OSError, RuntimeError):
        return None


@functools.cache  # compiling the templates anew for every render took ~45 ms
def environment() -> jinja2.Environment:
    """The Jinja2 environment for every template: undefined names fail, no HTML escaping.

    Filters: ``tojson`` (alias ``yaml_quote``) quotes any value as a YAML/JSON scalar.
    """
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        bytecode_cache=_bytecode_cache(),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["tojson"] = yaml_quote
    env.filters["yaml_quote"] = yaml_quote
    return env
