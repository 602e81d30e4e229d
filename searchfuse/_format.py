"""How searchfuse writes durations, ages and amounts for people: one formatter for every surface.

The diagnosis and the `searchfuse status` table both speak of ages ("synced
30 min ago") and of time left; they read the same function so they can never
disagree about the same instant.
"""

from __future__ import annotations

import math

__all__ = ["ago", "amount", "duration"]


def duration(seconds: float) -> str:
    """A span of time, rounded up: `"42 s"`, `"30 min"`, `"2.5 h"`, `"3 d"`.

    Rounded up so that time left never reads as over while it is not.
    """
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{math.ceil(seconds)} s"
    if seconds < 7200:
        return f"{math.ceil(seconds / 60)} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{math.ceil(seconds / 86400)} d"


def ago(seconds: float | None) -> str:
    """An age: `"30 min ago"`, or `"never"` when there is none."""
    return "never" if seconds is None else f"{duration(seconds)} ago"


def amount(value: float) -> str:
    """A budget's figure written out whole, as people and models read it: `12345678`,
    `2.5`, `0.001`; never `1.23457e+07` (which `Budget.parse` would read as another
    limit) and never more than nine decimals (what floating point adds)."""
    if float(value).is_integer():
        return str(int(value))
    text = f"{value:.9f}".rstrip("0").rstrip(".")
    return text if text.strip("-0.") else f"{value:.3g}"
