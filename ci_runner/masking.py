"""Which values are secrets: masked in the CI log, the saved log, reports, errors and crash logs,
as they are and as base64 and URL encoding write them."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, quote_plus

MASK: Final = "[MASKED]"
# Values shorter than this are not masked: masking "1" or "ab" would shred every log line. Nor
# are encoded forms shorter than this (encoded_forms: a value this long has none).
MIN_SECRET_LENGTH: Final = 4
_URL_SAFE: Final = str.maketrans("+/", "-_")


def encoded_forms(value: str) -> set[str]:
    """``value`` as base64 and URL encoding write it: the forms that differ from ``value``.

    Base64 writes 6 bits a character, so a value's characters depend on where it starts in a
    longer stream (its byte offset modulo 3), and at either end a character may hold bits of the
    bytes around it. The form for each offset is the stable core: the characters of
    ``base64(offset zero bytes + value)`` made of the value's bits only, in the standard and the
    URL-safe alphabet. Masked, at most one character at each end (at most 4 of the value's bits)
    and the ``=`` padding stay. The URL-encoded forms are ``quote`` (nothing safe) and
    ``quote_plus``.

    The shortest core, of a 4-byte value at offset 1, is 4 characters (24 of its 32 bits):
    random base64 holds a given 4 characters once in 16.7 million places, so a false match is
    rare and masks a piece of an unrelated base64 blob. Shorter cores would shred those blobs:
    none shorter than MIN_SECRET_LENGTH is kept (a value that long has none).
    """
    data = value.encode()
    forms = {quote(value, safe=""), quote_plus(value)}
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + data).decode("ascii")
        # Character i is bits 6i to 6i+5 of the stream; keep those wholly within the value's.
        core = encoded[(8 * offset + 5) // 6 : 8 * (offset + len(data)) // 6]
        forms |= {core, core.translate(_URL_SAFE)}
    return {form for form in forms if form != value and len(form) >= MIN_SECRET_LENGTH}


class SecretMasker:
    """Replaces every known secret value, and each of its :func:`encoded_forms`, with
    ``[MASKED]``."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        values = {s for s in secrets if s and len(s) >= MIN_SECRET_LENGTH}
        self._values = tuple(sorted(values, key=len, reverse=True))
        texts = sorted(values.union(*map(encoded_forms, values)), key=len, reverse=True)
        self._texts = tuple(texts)
        # A text holding a form holds every form inside that one: scanning for the forms that
        # hold no other suffices (CI_REPOSITORY_URL's forms hold CI_JOB_TOKEN's).
        self._probes = tuple(t for t in texts if not any(o in t for o in texts if o != t))
        self._pattern = re.compile("|".join(re.escape(t) for t in texts)) if texts else None

    @property
    def values(self) -> tuple[str, ...]:
        """The values masked (each also in its encoded forms), longest first."""
        return self._values

    @property
    def longest(self) -> int:
        """Length of the longest text masked, a value or an encoded form (0 when none)."""
        return len(self._texts[0]) if self._texts else 0

    def mask(self, text: str) -> str:
        """``text`` with every secret value and encoded form replaced."""
        # A substring test per probe is a fast scan; the alternation tries every position.
        if self._pattern is None or not any(probe in text for probe in self._probes):
            return text
        return self._pattern.sub(MASK, text)

    def with_secrets(self, more: Iterable[str | None]) -> SecretMasker:
        """A masker that also masks ``more``."""
        return SecretMasker([*self._values, *more])
