"""Kubernetes quantities ("8Gi", "500M", "1e9") as a number of bytes, and bytes written back.

The suffixes are those of k8s.io/apimachinery/pkg/api/resource (quantity.go): binary Ki..Ei,
decimal k..E, an exponent e<n>, and m (thousandths).
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from typing import Final

_FORM: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?")
_BINARY: Final = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL: Final = ("k", "M", "G", "T", "P", "E")
# Kubernetes holds a quantity as an int64 of its unit (bytes, cores) and silently caps a larger
# one there (resource.Quantity's maxAllowed); the kubelet and the scheduler read it as an int64.
MAX_AMOUNT: Final = 2**63 - 1
# The least it holds: it rounds a smaller amount up to this (a nano). It also reads an exponent
# into an int32, so a far smaller one (1e-4294967295) would wrap around: refusing them is safe.
MIN_AMOUNT: Final = Decimal("1e-9")
# Every result here exact, never rounded: a shift of the exponent (1e9999999) stays cheap.
_EXACT: Final = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
# Exponents beyond this are clamped to it: the amount is then out of both bounds by far, and
# Decimal's scaleb refuses exponents near its own limit.
_EXPONENT_CLAMP: Final = 10**15


def quantity_value(text: str) -> Decimal:
    """The exact amount ``text`` stands for (bytes, for memory); ValueError when it is no
    quantity."""
    match = _FORM.fullmatch(text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return _EXACT.multiply(number, Decimal(1024 ** (_BINARY.index(suffix) + 1)))
    if suffix in _DECIMAL:
        return number.scaleb(3 * (_DECIMAL.index(suffix) + 1), _EXACT)
    if suffix == "m":
        return number.scaleb(-3, _EXACT)
    if suffix:
        exponent = max(-_EXPONENT_CLAMP, min(int(suffix[1:]), _EXPONENT_CLAMP))
        return number.scaleb(exponent, _EXACT)
    return number


def binary_quantity(amount: int) -> str:
    """``amount`` bytes in the largest binary unit that holds it whole ("16Gi", "1536Mi")."""
    for power in range(len(_BINARY), 0, -1):
        unit = 1024**power
        if amount % unit == 0 and amount >= unit:
            return f"{amount // unit}{_BINARY[power - 1]}"
    return str(amount)
