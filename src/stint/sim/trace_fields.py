"""The checks every trace reader applies to a row's fields, and the error a malformed row raises
(naming the file, the line and the reason)."""

from __future__ import annotations

import math

from stint.model.limits import above


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file, line and reason."""


def number(path: str, line: int, field: str, text: str, kind: type = float, low: float = 0.0) -> float:
    """A finite number field of at least ``low`` (``kind`` int: a whole number)."""
    try:
        value = float(kind(text))
    except (ValueError, OverflowError):
        raise TraceError(f"{path}:{line}: field {field!r} is not a {kind.__name__}: {text!r}") from None
    if not math.isfinite(value):
        raise TraceError(f"{path}:{line}: field {field!r} must be a finite number, got {text!r}")
    if value < low:
        raise TraceError(f"{path}:{line}: field {field!r} must be >= {low:g}, got {text!r}")
    return value


def count(path: str, line: int, field: str, text: str, maximum: int) -> int:
    """A whole-number field from 1 to ``maximum`` (``stint.model.limits``)."""
    try:
        n = int(text)
    except ValueError:
        raise TraceError(f"{path}:{line}: field {field!r} is not a int: {text[:40]!r}") from None
    if n < 1:
        raise TraceError(f"{path}:{line}: field {field!r} must be >= 1, got {text!r}")
    if why := above(f"field {field!r}", n, maximum):
        raise TraceError(f"{path}:{line}: {why}")
    return n
