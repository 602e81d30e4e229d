"""The diagnosis's last step: what the evidence adds up to, and the figures it reads.

Only after the state, the cooldowns, the quota figures (and with a probe,
`/usage`) have been looked at is a verdict named: healthy, stale, cooling,
burst, auth, exhausted or upstream (incident 2: a stale state is not a dead key).
"""

from __future__ import annotations

import calendar
import enum
import time
from collections.abc import Sequence
from typing import Any

from searchfuse._format import duration as _secs
from searchfuse.providers._registry import lookup
from searchfuse.router.policy import Outcome
from searchfuse.router.selection import Candidate, blocked_reason
from searchfuse.router.state import KeyUsage

__all__ = [
    "BURST_WINDOW",
    "EXHAUSTED_THRESHOLD",
    "Verdict",
    "bursts",
    "figure_text",
    "iso",
    "usage_figures",
    "used_share",
    "verdict",
]

#: Rate-limit cooldowns that began within this many seconds of each other
#: mean searches were fired in parallel (incident 1: four keys in six seconds).
BURST_WINDOW = 6.0
#: Usage below this share of the limit is never called "exhausted".
EXHAUSTED_THRESHOLD = 0.8


class Verdict(enum.StrEnum):
    """What the diagnosis concludes (`Diagnosis.verdict`; equal to its text)."""

    HEALTHY = "healthy"
    STALE = "stale"
    COOLING = "cooling"
    BURST = "burst"
    AUTH = "auth"
    EXHAUSTED = "exhausted"
    UPSTREAM = "upstream"
    #: No key is configured, or every key is disabled: the configuration, not the provider.
    CONFIG = "config"


Found = tuple[Verdict, str, float | None]


def iso(epoch: float | None) -> str | None:
    """`epoch` as an ISO 8601 UTC time (`None` stays `None`)."""
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def figure_text(value: float | None) -> str:
    """A figure for people: `"?"` when unknown."""
    return "?" if value is None else f"{value:g}"


def _month_end(now: float) -> float:
    """The first instant of the next month (UTC): when a monthly quota rolls."""
    t = time.gmtime(now)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def _named(cands: Sequence[Candidate]) -> tuple[str, str | None]:
    """The title of the provider diagnosed and its free probe's path (`None`: no probe)."""
    names = {c.entry.provider for c in cands}
    if len(names) != 1:
        return "The provider", None
    provider = lookup(names.pop())
    request = provider.probe()
    return provider.title, request.path if request is not None else None


def _pct(used: float | None, limit: float | None) -> float | None:
    if limit == 0:  # a limit of 0 serves nothing: all of it is used
        return 100.0
    if used is None or limit is None or limit < 0:
        return None
    return 100.0 * used / limit


def usage_figures(c: Candidate) -> dict[str, Any]:
    """A key's and its account's usage as last synced plus what was spent since."""
    usage = c.state.last_usage or KeyUsage()
    key_used = usage.key_usage
    if key_used is not None:
        key_used = key_used + c.state.local_credits
    key_limit = usage.key_limit
    plan_used = c.account.plan_usage
    if plan_used is not None:
        plan_used = plan_used + c.account.local_credits
    plan_limit = c.account.plan_limit
    return {
        "key_usage": key_used,
        "key_limit": key_limit,
        "key_percent": _pct(key_used, key_limit),
        "plan_usage": plan_used,
        "plan_limit": plan_limit,
        "plan_percent": _pct(plan_used, plan_limit),
    }


def used_share(c: Candidate) -> float | None:
    """The highest share of a limit this key has used, 0..1+, or None if unknown."""
    figures = usage_figures(c)
    shares = [p / 100.0 for p in (figures["key_percent"], figures["plan_percent"]) if p is not None]
    return max(shares) if shares else None


def _started(c: Candidate) -> float:
    return c.state.cooldown_started or c.state.cooldown_until or 0.0


def bursts(cands: Sequence[Candidate], now: float) -> list[Candidate]:
    """The largest group of keys whose rate-limit cooldowns began within BURST_WINDOW
    (one pass over the keys sorted by when their cooldown began)."""
    started = sorted(
        (
            c
            for c in cands
            if c.state.cooling(now) and c.state.cooldown_reason == Outcome.RATE_LIMITED
        ),
        key=_started,
    )
    times = [_started(c) for c in started]
    best, size, end = 0, 0, 0
    for first, t0 in enumerate(times):
        while end < len(times) and times[end] - t0 <= BURST_WINDOW:
            end += 1
        if end - first > size:
            best, size = first, end - first
    return started[best : best + size] if size >= 2 else []


def verdict(
    before: Sequence[Candidate],
    after: Sequence[Candidate],
    now: float,
    burst: list[Candidate],
    probed: bool,
) -> Found:
    """The verdict, the advice for it, and when to try again (`None`: not a matter of time)."""
    if not after:
        return (
            Verdict.CONFIG,
            "no keys are configured; set TAVILY_API_KEYS or config/keys.json.",
            None,
        )
    available = [c for c in after if blocked_reason(c, now) is None]
    if available:
        return _serving(before, after, available, now, probed)
    # A key parked out of quota until its provider's reset is exhausted, not cooling.
    # Only a key whose cooldown is all that blocks it serves again when the cooldown ends.
    cooling = [
        c
        for c in after
        if c.state.cooling(now)
        and not _spent_until(c, now)
        and not c.state.exhausted
        and not c.state.disabled
    ]
    wait = min((c.state.cooldown_left(now) for c in cooling), default=None)
    if burst:
        again = (
            f" The first key is available again in {_secs(wait)}."
            if wait is not None
            else " No key serves again when its cooldown ends: see the state step."
        )
        return (
            Verdict.BURST,
            f"{len(burst)} keys were rate-limited (429) within seconds of each other: the caller "
            "fired searches in parallel. Make one search per reply, or serialise searches with "
            f"a pause.{again}",
            wait,
        )
    if cooling:
        return _cooling(cooling, wait)
    return _lasting(after, now)


def _serving(
    before: Sequence[Candidate],
    after: Sequence[Candidate],
    available: list[Candidate],
    now: float,
    probed: bool,
) -> Found:
    """Some key can serve: healthy, or stale where the state said otherwise."""
    blocked_before = [c for c in before if blocked_reason(c, now) is not None]
    expired = [
        c for c in before if c.state.cooldown_until is not None and c.state.cooldown_until <= now
    ]
    serving = {a.entry.fingerprint for a in available}
    refreshed = [c for c in blocked_before if c.entry.fingerprint in serving]
    if refreshed and probed:
        return (
            Verdict.STALE,
            f"the state said {len(refreshed)} key(s) could not serve, but "
            f"{_named(after)[1]} answered 200; "
            f"the state was refreshed and {len(available)} of {len(after)} key(s) can serve "
            "now. No reset needed.",
            None,
        )
    if expired:
        return (
            Verdict.STALE,
            f"{len(expired)} cooldown(s) in the state have expired; expired means available. "
            f"{len(available)} of {len(after)} key(s) can serve now. No reset needed.",
            None,
        )
    return Verdict.HEALTHY, f"{len(available)} of {len(after)} key(s) can serve now.", None


def _cooling(cooling: list[Candidate], wait: float | None) -> Found:
    """No key can serve and some are cooling: why, and for how long."""
    reasons = {c.state.cooldown_reason for c in cooling}
    if reasons <= {Outcome.AUTH}:
        return (
            Verdict.AUTH,
            "every key was rejected (401/403). Check the keys in config/keys.json or the "
            "environment; keys are retried automatically after the 1 h cooldown, and "
            "`searchfuse diagnose --probe` re-checks them now.",
            wait,
        )
    if reasons <= {Outcome.MISCONFIGURED}:
        errors = sorted({c.state.last_error or "misconfigured" for c in cooling})
        return (
            Verdict.CONFIG,
            f"{_named(cooling)[0]} answered as misconfigured ({'; '.join(errors)}): its "
            "settings refuse the search (for a 403: add json to search.formats in the "
            "instance's settings.yml) or the address is not the instance's. Fix it or name "
            f"another instance; it is asked again in {_secs(wait or 0.0)}.",
            wait,
        )
    if reasons <= {Outcome.UPSTREAM}:
        return (
            Verdict.UPSTREAM,
            f"{_named(cooling)[0]} failed for every key it was asked with (5xx, timeout or no "
            "connection). "
            f"This is not a quota problem; try again in {_secs(wait or 0.0)}.",
            wait,
        )
    why = ", ".join(sorted(r or "error" for r in reasons))
    return (
        Verdict.COOLING,
        f"no key can serve for {_secs(wait or 0.0)} more ({why}). Wait, or tell the user "
        "and ask whether to wait; do not retry earlier.",
        wait,
    )


def _spent_until(c: Candidate, now: float) -> bool:
    """Whether `c` is out of quota until its provider's reset (a park, not a flag)."""
    return c.state.cooling(now) and c.state.cooldown_reason == Outcome.EXHAUSTED


def _exhausted(after: Sequence[Candidate], exhausted: Sequence[Candidate], now: float) -> Found:
    """Every key is out of quota (or disabled): until when, as far as anyone can say."""
    timed = [c.state.cooldown_until or now for c in exhausted if _spent_until(c, now)]
    title, probe = _named(after)
    reset = f"{iso(min(timed))} ({title}'s own reset)" if timed else ""
    if len(timed) == len(exhausted):  # the provider said when its quota comes back
        return (
            Verdict.EXHAUSTED,
            f"every key is out of credits until {reset}. Add a key or wait; searching "
            "again will not help.",
            min(timed) - now,
        )
    return (
        Verdict.EXHAUSTED,
        f"every key is out of credits until the month rolls ({iso(_month_end(now))})"
        + (f" or {probe} shows headroom" if probe else "")
        + (f"; some until {reset}" if timed else "")
        + ". Add a key or wait; searching again will not help.",
        None,
    )


def _lasting(after: Sequence[Candidate], now: float) -> Found:
    """No key can serve and none is cooling: flags that a wait does not lift."""
    contradicted = [
        c
        for c in after
        if c.state.exhausted
        and (share := used_share(c)) is not None
        and share < EXHAUSTED_THRESHOLD
    ]
    if contradicted:
        return (
            Verdict.STALE,
            f"{len(contradicted)} key(s) are flagged exhausted although their last figures show "
            f"less than {EXHAUSTED_THRESHOLD:.0%} used; "
            + (
                f"run `searchfuse diagnose --probe` to refresh them from {probe}."
                if (probe := _named(after)[1])
                else "`searchfuse test-keys --spend` checks them with a one-result search."
            ),
            None,
        )
    exhausted = [c for c in after if c.state.exhausted or _spent_until(c, now)]
    if exhausted and len(exhausted) + sum(c.state.disabled for c in after) == len(after):
        return _exhausted(after, exhausted, now)
    if all(c.state.disabled for c in after):
        in_config = sum(c.entry.disabled for c in after)
        where = (
            "in the keys file (keys[].disabled)"
            if in_config == len(after)
            else "in the keys file or by a leftover in the state (`searchfuse test-keys` "
            "clears a leftover)"
        )
        return (
            Verdict.CONFIG,
            f"every key is disabled {where}: nothing is sent. Enable a key or add one; "
            "waiting will not help.",
            None,
        )
    return (
        Verdict.UPSTREAM,
        "no key can serve and no cooldown explains it; check the configuration.",
        None,
    )
