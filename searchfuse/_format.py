"""How searchfuse writes durations and ages for people: one formatter for every surface.

The diagnosis and the `searchfuse status` table both speak of ages ("synced
30 min ago") and of time left; they read the same function so they can never
disagree about the same instant.
"""

from __future__ import annotations

import math

__all__ = ["ago", "duration"]


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
