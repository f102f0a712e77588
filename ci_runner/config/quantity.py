"""Kubernetes quantities ("8Gi", "500M", "1e9") as a number of bytes, and bytes written back.

The suffixes are those of k8s.io/apimachinery/pkg/api/resource (quantity.go): binary Ki..Ei,
decimal k..E, an exponent e<n>, and m (thousandths).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

_FORM: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?")
_BINARY: Final = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL: Final = ("k", "M", "G", "T", "P", "E")


def quantity_value(text: str) -> Decimal:
    """The amount ``text`` stands for (bytes, for memory); ValueError when it is no quantity."""
    match = _FORM.fullmatch(text)
    if match is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = Decimal(match.group(1)), match.group(2) or ""
    if suffix in _BINARY:
        return number * Decimal(1024 ** (_BINARY.index(suffix) + 1))
    if suffix in _DECIMAL:
        return number * Decimal(1000 ** (_DECIMAL.index(suffix) + 1))
    if suffix == "m":
        return number / 1000
    if suffix:
        return number * Decimal(10) ** int(suffix[1:])
    return number


def binary_quantity(amount: int) -> str:
    """``amount`` bytes in the largest binary unit that holds it whole ("16Gi", "1536Mi")."""
    for power in range(len(_BINARY), 0, -1):
        unit = 1024**power
        if amount % unit == 0 and amount >= unit:
            return f"{amount // unit}{_BINARY[power - 1]}"
    return str(amount)
