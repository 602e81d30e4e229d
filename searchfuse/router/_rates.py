"""Request rates as configuration writes them (`"10/s"`, `"100/min"`, `rpm`) and which one
a key gets: its own, else `SEARCHFUSE_RPM` (Tavily keys), else what its provider publishes."""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from searchfuse.errors import ConfigError
from searchfuse.providers._base import Rate
from searchfuse.providers._registry import lookup
from searchfuse.providers.tavily import RATE_WINDOW

if TYPE_CHECKING:
    from searchfuse.router._keys import KeyEntry

__all__ = ["UNITS", "check_rate", "check_rpm", "key_rate", "pace_window", "parse_rate"]

#: The window each unit of a rate names, in seconds.
UNITS: dict[str, float] = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "day": 86400.0,
}
_RATE = re.compile(r"\s*(\d{1,7})\s*/\s*([a-z]+)\s*", re.IGNORECASE)
_RATE_FIX = 'write requests per window, such as "10/s", "100/min" or "1000/h"'
#: A rate of 0: pacing would hold every request back, so the key would serve nothing.
_ZERO = "a rate of 0 requests lets the key send nothing"
_ZERO_FIX = 'to keep a key out of rotation set "disabled": true; else write its real rate'
#: Pacing counts a request when it is decided and the provider when it arrives, a
#: little later: a window a sixtieth longer than the provider's (a second on a
#: minute) keeps that difference from ever putting one request too many in it.
_MARGIN_SHARE = 1 / 60
#: A machine under load sends some requests late after their grant; the margin then
#: grows to twice the lateness seen lately, but never past this share of the window,
#: so a key still serves at least 95% of its rate.
_MARGIN_CAP = 0.05


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def parse_rate(text: str) -> Rate | None:
    """`"10/s"` as `Rate(10, 1.0)`; `None` when `text` is not a rate."""
    found = _RATE.fullmatch(text)
    if found is None:
        return None
    window = UNITS.get(found.group(2).lower())
    count = int(found.group(1))
    if window is None or count < 1:
        return None
    return Rate(count, window)


def check_rate(value: Any, source: str, where: str) -> str | None:
    """A `rate` field checked (the text as written); ConfigError naming `where` otherwise."""
    if value is None:
        return None
    zero = isinstance(value, str) and (found := _RATE.fullmatch(value)) and int(found[1]) == 0
    if zero:
        raise ConfigError(source, where, f"{_shown(value)}: {_ZERO}", _ZERO_FIX)
    if not isinstance(value, str) or parse_rate(value) is None:
        units = ", ".join(f"/{u}" for u in ("s", "min", "h", "day"))
        raise ConfigError(
            source,
            where,
            f"{_shown(value)} is not a request rate (a whole number per one of {units})",
            _RATE_FIX,
        )
    return value.strip()


def check_rpm(value: Any, source: str, where: str) -> int | None:
    """An `rpm` field checked; ConfigError naming `where` otherwise."""
    if value is None:
        return None
    if value == 0 and not isinstance(value, bool):
        raise ConfigError(source, where, f"0: {_ZERO}", _ZERO_FIX)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
        raise ConfigError(
            source,
            where,
            f"expected a whole number of requests per minute (1 or more), got {_shown(value)}",
            "write the key's rate limit, e.g. 100 for a development key, or remove the field",
        )
    return value


def _env_rpm(environ: Mapping[str, str]) -> int | None:
    text = environ.get("SEARCHFUSE_RPM", "").strip()
    if not text:
        return None
    try:
        value: Any = int(text)
    except ValueError:
        value = text
    try:
        return check_rpm(value, "environment", "SEARCHFUSE_RPM")
    except ConfigError as exc:
        raise ConfigError(
            "environment",
            "SEARCHFUSE_RPM",
            exc.problem,
            "unset SEARCHFUSE_RPM, or set it to a whole number such as 100",
        ) from None


def key_rate(entry: KeyEntry, environ: Mapping[str, str] | None = None) -> Rate:
    """The rate the router keeps `entry` within: its `rate` (`"10/s"`), else its `rpm`,
    else `SEARCHFUSE_RPM` for a Tavily key, else the rate its provider publishes.
    A malformed `SEARCHFUSE_RPM` is a [`ConfigError`][searchfuse.errors.ConfigError]."""
    if entry.rate is not None:
        rate = parse_rate(entry.rate)
        assert rate is not None  # checked when the entry was read
        return rate
    if entry.rpm is not None:
        return Rate(entry.rpm, RATE_WINDOW)
    env = os.environ if environ is None else environ
    # SEARCHFUSE_RPM predates the other providers: it speaks of Tavily's minute.
    rpm = _env_rpm(env) if entry.provider == "tavily" else None
    if rpm is not None:
        return Rate(rpm, RATE_WINDOW)
    return lookup(entry.provider).rate(entry.key)


def pace_window(rate: Rate, late: float = 0.0) -> float:
    """The window pacing counts `rate` in: the provider's, with a margin (see `_MARGIN_SHARE`),
    or twice `late` (how late requests left after their grant lately), at most `_MARGIN_CAP`."""
    margin = max(rate.window * _MARGIN_SHARE, 2.0 * late)
    return rate.window + min(margin, rate.window * _MARGIN_CAP)


class Lateness:
    """How late this router's requests left after their pacing grant, lately.

    The provider counts a request when it arrives; pacing counted it when it
    was granted. On a loaded machine the moment between grows (a process
    waits for a core, a commit waits for the disk), and two grants a window
    apart can arrive less than a window apart. `seen` is the longest of the
    last `size` delays, for the margin pacing keeps (`pace_window`).
    """

    def __init__(self, size: int = 256) -> None:
        self._recent: deque[float] = deque(maxlen=size)
        self.seen = 0.0

    def note(self, seconds: float) -> None:
        """One request left `seconds` after its grant (router clock)."""
        seconds = max(0.0, seconds)
        recent = self._recent
        leaving = recent[0] if len(recent) == recent.maxlen else 0.0
        recent.append(seconds)
        if leaving and leaving >= self.seen:
            self.seen = max(recent)  # the longest may have just left the record
        elif seconds > self.seen:
            self.seen = seconds
