"""The diagnosis: why keys can or cannot serve, in a fixed verification order.

Agents and people jump to "quota exhausted" or "Tavily is down" when the local
state was merely stale (incident 2). The diagnosis walks the evidence in
order and only then names a verdict:

1. `state`: what the state store says per key;
2. `cooldown`: now vs `cooldown_until` (expired means stale, not dead);
3. `quota`: usage vs limit (below 80% is never "exhausted");
4. `probe`: `/usage` asked per key, one at a time (only with `probe=True`);
5. `verdict`: healthy, stale, cooling, burst, auth, exhausted or upstream.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from searchfuse._format import duration as _secs
from searchfuse._secrets import redact, redact_tree
from searchfuse.router.policy import Outcome
from searchfuse.router.selection import Candidate, blocked_reason
from searchfuse.router.state import KeyUsage

__all__ = [
    "BURST_WINDOW",
    "EXHAUSTED_THRESHOLD",
    "VERDICTS",
    "Diagnosis",
    "Step",
    "diagnose_candidates",
]

#: Rate-limit cooldowns that began within this many seconds of each other
#: mean searches were fired in parallel (incident 1: four keys in six seconds).
BURST_WINDOW = 6.0
#: Usage below this share of the limit is never called "exhausted".
EXHAUSTED_THRESHOLD = 0.8
VERDICTS = ("healthy", "stale", "cooling", "burst", "auth", "exhausted", "upstream")


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _figure(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def _month_end(now: float) -> float:
    """The first instant of the next month (UTC): when Tavily's monthly quota rolls."""
    t = time.gmtime(now)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


@dataclass(frozen=True)
class Step:
    """One step of the verification order: a name, what it found, the evidence per key."""

    name: str
    finding: str
    evidence: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"name": self.name, "finding": self.finding, "evidence": self.evidence}


@dataclass(frozen=True)
class Diagnosis:
    """The result of [`searchfuse.Router.diagnose`][searchfuse.Router.diagnose].

    `steps` are in verification order (state, cooldown, quota, probe,
    verdict); `verdict` is one of `VERDICTS`; `burst` is True when
    several keys were rate-limited within seconds of each other. `str()`
    renders it for people and models; [`to_dict`][searchfuse.Diagnosis.to_dict] for machines.
    """

    steps: tuple[Step, ...]
    verdict: str
    burst: bool
    advice: str
    retry_after: float | None = None

    def step(self, name: str) -> Step:
        """The step called `name`."""
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """`{"steps": [...], "verdict": ..., "burst": ..., "advice": ..., "retry_after": ...}`."""
        return {
            "steps": [s.to_dict() for s in self.steps],
            "verdict": self.verdict,
            "burst": self.burst,
            "advice": self.advice,
            "retry_after": self.retry_after,
        }

    def brief(self) -> str:
        """The findings of each step and the advice, without per-key evidence (for models)."""
        lines = [f"{i}. {s.name}: {s.finding}" for i, s in enumerate(self.steps[:-1], 1)]
        lines.append(self.advice)
        return "\n".join(lines)

    def __str__(self) -> str:
        lines = []
        for i, s in enumerate(self.steps, 1):
            lines.append(f"{i}. {s.name}: {s.finding}")
            for ev in s.evidence:
                note = ev.get("note")
                if note:
                    lines.append(f"   - {ev.get('key', '?')}: {note}")
        return "\n".join(lines)


def _pct(used: float | None, limit: float | None) -> float | None:
    if used is None or limit is None or limit <= 0:
        return None
    return 100.0 * used / limit


def _usage_figures(c: Candidate) -> dict[str, Any]:
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


def _used_share(c: Candidate) -> float | None:
    """The highest share of a limit this key has used, 0..1+, or None if unknown."""
    figures = _usage_figures(c)
    shares = [p / 100.0 for p in (figures["key_percent"], figures["plan_percent"]) if p is not None]
    return max(shares) if shares else None


def _bursts(cands: Sequence[Candidate], now: float) -> list[Candidate]:
    """The largest group of keys whose rate-limit cooldowns began within BURST_WINDOW."""
    started = sorted(
        (
            c
            for c in cands
            if c.state.cooling(now) and c.state.cooldown_reason == Outcome.RATE_LIMITED
        ),
        key=lambda c: c.state.cooldown_started or c.state.cooldown_until or 0.0,
    )
    best: list[Candidate] = []
    for i, first in enumerate(started):
        t0 = first.state.cooldown_started or 0.0
        group = [c for c in started[i:] if (c.state.cooldown_started or 0.0) - t0 <= BURST_WINDOW]
        if len(group) > len(best):
            best = group
    return best if len(best) >= 2 else []


def _state_step(cands: Sequence[Candidate], now: float) -> Step:
    evidence = []
    counts: dict[str, int] = {}
    for c in cands:
        ks = c.state
        blocked = blocked_reason(c, now)
        kind = (
            "disabled"
            if ks.disabled
            else "cooling"
            if ks.cooling(now)
            else "exhausted"
            if ks.exhausted
            else "available"
        )
        counts[kind] = counts.get(kind, 0) + 1
        figures = _usage_figures(c)
        age = None if ks.last_sync_at is None else now - ks.last_sync_at
        parts = [kind]
        if ks.cooldown_until is not None:
            parts.append(f"cooldown_until {_iso(ks.cooldown_until)} ({ks.cooldown_reason})")
        if figures["plan_limit"] is not None:
            parts.append(f"plan {_figure(figures['plan_usage'])}/{_figure(figures['plan_limit'])}")
        if ks.last_error:
            parts.append(f"last error {ks.last_error!r}")
        parts.append("never synced" if age is None else f"synced {_secs(age)} ago")
        evidence.append(
            {
                "key": c.entry.masked,
                "fingerprint": c.entry.fingerprint,
                "account": c.entry.account,
                "state": kind,
                "blocked_reason": blocked,
                "disabled": ks.disabled,
                "exhausted": ks.exhausted,
                "cooldown_until": ks.cooldown_until,
                "cooldown_reason": ks.cooldown_reason,
                "last_error": ks.last_error,
                "last_sync_age": age,
                **figures,
                "note": "; ".join(parts),
            }
        )
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "no keys"
    return Step("state", f"{len(cands)} key(s) in the state store: {summary}", evidence)


def _cooldown_step(cands: Sequence[Candidate], now: float, burst: list[Candidate]) -> Step:
    evidence = []
    active = expired = 0
    for c in cands:
        ks = c.state
        if ks.cooldown_until is None:
            continue
        if ks.cooldown_until > now:
            active += 1
            note = f"active, {_secs(ks.cooldown_until - now)} left ({ks.cooldown_reason})"
        else:
            expired += 1
            note = (
                f"expired {_secs(now - ks.cooldown_until)} ago: stale entry, the key is available"
            )
        evidence.append(
            {
                "key": c.entry.masked,
                "cooldown_until": ks.cooldown_until,
                "cooldown_started": ks.cooldown_started,
                "reason": ks.cooldown_reason,
                "seconds_left": max(0.0, ks.cooldown_until - now),
                "expired": ks.cooldown_until <= now,
                "note": note,
            }
        )
    if not evidence:
        finding = "no cooldowns recorded"
    else:
        finding = (
            f"{active} active, {expired} expired (an expired cooldown is over, not a dead key)"
        )
    if burst:
        starts = [c.state.cooldown_started or 0.0 for c in burst]
        finding += (
            f"; burst cascade: {len(burst)} keys were rate-limited within "
            f"{max(starts) - min(starts):.1f} s of each other"
        )
    return Step("cooldown", finding, evidence)


def _quota_step(cands: Sequence[Candidate]) -> Step:
    evidence = []
    notes = []
    for c in cands:
        figures = _usage_figures(c)
        share = _used_share(c)
        if share is None:
            note = "no usage figures yet"
            verdict = "unknown"
        elif share >= 1.0:
            note = f"{share * 100:.0f}% used: exhausted"
            verdict = "exhausted"
        elif share >= EXHAUSTED_THRESHOLD:
            note = f"{share * 100:.0f}% used: running low, not exhausted"
            verdict = "low"
        else:
            note = f"{share * 100:.0f}% used: not exhausted"
            verdict = "ok"
        if c.state.exhausted and verdict in ("ok", "low"):
            note += " (the exhausted flag contradicts the figures: stale)"
        evidence.append({"key": c.entry.masked, "quota": verdict, **figures, "note": note})
        notes.append(verdict)
    exhausted = notes.count("exhausted")
    unknown = notes.count("unknown")
    finding = f"{exhausted} of {len(cands)} key(s) exhausted by their figures"
    if unknown:
        finding += f", {unknown} without figures"
    return Step("quota", finding, evidence)


def diagnose_candidates(
    before: Sequence[Candidate],
    after: Sequence[Candidate],
    now: float,
    probe: Step | None,
    hold: tuple[float, str | None] = (0.0, None),
    outage: tuple[str, str, float | None] | None = None,
    *,
    secrets: Iterable[str] = (),
) -> Diagnosis:
    """Build the diagnosis from state snapshots taken before and after the probe.

    Without a probe, `before` and `after` are the same snapshot. `hold`
    is the router-wide rate-limit hold: seconds left and the key that set it.
    `outage` is what the router saw in the call that failed: ``(verdict,
    advice, retry_after)``. The state may call keys available that this call
    just saw fail; then the verdict is the outage's, never "healthy".
    Every text in it is redacted with `secrets` (the configured keys) and the
    generic key patterns: a key in a stored last error or account never shows raw.
    """
    known = tuple(secrets)
    burst = _bursts(before, now)
    cooldown = _cooldown_step(before, now, burst)
    if hold[0] > 0:
        cooldown = Step(
            cooldown.name,
            cooldown.finding + f"; the router holds every search for {_secs(hold[0])} "
            f"after a 429 on {hold[1] or 'a key'} (on_429='stop')",
            cooldown.evidence,
        )
    steps = [_state_step(before, now), cooldown, _quota_step(before)]
    steps.append(
        probe
        or Step(
            "probe",
            "skipped: run `searchfuse diagnose --probe` (or diagnose(probe=True)) "
            "to ask /usage for each key, one at a time; it spends no search credits",
        )
    )
    verdict, advice, retry_after = _verdict(before, after, now, burst, probe is not None)
    if hold[0] > 0 and verdict in ("healthy", "stale"):
        verdict = "burst" if burst else "cooling"
        advice = (
            f"a 429 on {hold[1] or 'a key'} stopped all searches for {_secs(hold[0])} more: "
            "searches came too fast. Wait, then make one search per reply; do not retry earlier."
        )
        retry_after = hold[0]
    if outage is not None and verdict in ("healthy", "stale"):
        verdict, advice, retry_after = outage
    steps.append(Step("verdict", f"{verdict}: {advice}"))
    shown = tuple(
        Step(s.name, redact(s.finding, known), redact_tree(s.evidence, known)) for s in steps
    )
    return Diagnosis(
        shown, verdict, bool(burst), redact(f"Verdict: {verdict}. {advice}", known), retry_after
    )


def _verdict(
    before: Sequence[Candidate],
    after: Sequence[Candidate],
    now: float,
    burst: list[Candidate],
    probed: bool,
) -> tuple[str, str, float | None]:
    available = [c for c in after if blocked_reason(c, now) is None]
    blocked_before = [c for c in before if blocked_reason(c, now) is not None]
    expired = [
        c for c in before if c.state.cooldown_until is not None and c.state.cooldown_until <= now
    ]
    if not after:
        return "upstream", "no keys are configured; set TAVILY_API_KEYS or config/keys.json.", None
    if available:
        refreshed = [
            c
            for c in blocked_before
            if any(a.entry == c.entry and blocked_reason(a, now) is None for a in available)
        ]
        if refreshed and probed:
            return (
                "stale",
                f"the state said {len(refreshed)} key(s) could not serve, but /usage answered 200; "
                f"the state was refreshed and {len(available)} of {len(after)} key(s) can serve "
                "now. No reset needed.",
                None,
            )
        if expired:
            return (
                "stale",
                f"{len(expired)} cooldown(s) in the state have expired; expired means available. "
                f"{len(available)} of {len(after)} key(s) can serve now. No reset needed.",
                None,
            )
        return "healthy", f"{len(available)} of {len(after)} key(s) can serve now.", None

    cooling = [c for c in after if c.state.cooling(now)]
    wait = min((c.state.cooldown_left(now) for c in cooling), default=None)
    contradicted = [
        c
        for c in after
        if c.state.exhausted
        and not c.state.cooling(now)
        and (share := _used_share(c)) is not None
        and share < EXHAUSTED_THRESHOLD
    ]
    if burst:
        return (
            "burst",
            f"{len(burst)} keys were rate-limited (429) within seconds of each other: the caller "
            "fired searches in parallel. Make one search per reply, or serialise searches with "
            f"a pause. The first key is available again in {_secs(wait or 0.0)}.",
            wait,
        )
    reasons = {c.state.cooldown_reason for c in cooling}
    if cooling and reasons <= {Outcome.AUTH}:
        return (
            "auth",
            "every key was rejected (401/403). Check the keys in config/keys.json or the "
            "environment; keys are retried automatically after the 1 h cooldown, and "
            "`searchfuse diagnose --probe` re-checks them now.",
            wait,
        )
    if cooling and reasons <= {Outcome.UPSTREAM}:
        return (
            "upstream",
            "Tavily failed for every key it was asked with (5xx, timeout or no connection). "
            f"This is not a quota problem; try again in {_secs(wait or 0.0)}.",
            wait,
        )
    if cooling:
        why = ", ".join(sorted(r or "error" for r in reasons))
        return (
            "cooling",
            f"no key can serve for {_secs(wait or 0.0)} more ({why}). Wait, or tell the user "
            "and ask whether to wait; do not retry earlier.",
            wait,
        )
    if contradicted:
        return (
            "stale",
            f"{len(contradicted)} key(s) are flagged exhausted although their last figures show "
            f"less than {EXHAUSTED_THRESHOLD:.0%} used; run `searchfuse diagnose --probe` to "
            "refresh them from /usage.",
            None,
        )
    exhausted = [c for c in after if c.state.exhausted]
    if exhausted and len(exhausted) + sum(c.state.disabled for c in after) == len(after):
        until = _iso(_month_end(now))
        return (
            "exhausted",
            f"every key is out of credits until the month rolls ({until}) or /usage shows "
            "headroom. Add a key or wait; searching again will not help.",
            None,
        )
    return (
        "upstream",
        "no key can serve and no cooldown explains it; check the configuration.",
        None,
    )
