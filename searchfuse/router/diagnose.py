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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from searchfuse._format import duration as _secs
from searchfuse._secrets import known_keys, redact, redact_tree
from searchfuse.router._verdict import (
    BURST_WINDOW,
    EXHAUSTED_THRESHOLD,
    Verdict,
    bursts,
    figure_text,
    iso,
    usage_figures,
    used_share,
    verdict,
)
from searchfuse.router.selection import Candidate, blocked_reason
from searchfuse.router.state._records import Availability

__all__ = [
    "BURST_WINDOW",
    "EXHAUSTED_THRESHOLD",
    "VERDICTS",
    "Diagnosis",
    "Step",
    "Verdict",
    "diagnose_candidates",
]

#: Every verdict, in the order of the verification (`Verdict`'s values).
VERDICTS: tuple[str, ...] = tuple(str(v) for v in Verdict)


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
    verdict: Verdict
    burst: bool
    advice: str
    retry_after: float | None = None
    #: Each provider's own verdict, in chain order (`{"tavily": "exhausted", "exa": "healthy"}`).
    by_provider: Mapping[str, str] = field(default_factory=dict)

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
            "by_provider": dict(self.by_provider),
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


def _state_step(cands: Sequence[Candidate], now: float) -> Step:
    evidence = []
    counts: dict[str, int] = {}
    for c in cands:
        ks = c.state
        blocked = blocked_reason(c, now)
        kind = str(ks.availability(now))  # a key parked out of quota is "exhausted"
        counts[kind] = counts.get(kind, 0) + 1
        figures = usage_figures(c)
        age = None if ks.last_sync_at is None else now - ks.last_sync_at
        parts = [kind]
        if ks.cooldown_until is not None:
            parts.append(f"cooldown_until {iso(ks.cooldown_until)} ({ks.cooldown_reason})")
        if figures["plan_limit"] is not None:
            parts.append(
                f"plan {figure_text(figures['plan_usage'])}/{figure_text(figures['plan_limit'])}"
            )
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
            # Over, but the key may still not serve for another reason (see the state step).
            blocked = ks.availability(now)
            after = (
                "the key is available"
                if blocked is Availability.AVAILABLE
                else f"the key is {blocked} for another reason"
            )
            note = f"expired {_secs(now - ks.cooldown_until)} ago: stale entry, {after}"
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


def _flag_against_figures(c: Candidate) -> str:
    """Why a key flagged exhausted has figures that say otherwise: the flag is stale,
    or the figures are (a refusal for quota came after they were synced)."""
    ks = c.state
    refused, synced = ks.last_error_at, ks.last_sync_at
    if refused is not None and (synced is None or refused > synced):
        return (
            " (but the provider refused it for quota after these figures were synced: "
            "the figures are the stale ones; a probe reads them afresh)"
        )
    return " (the exhausted flag contradicts the figures: stale)"


def _quota_step(cands: Sequence[Candidate]) -> Step:
    evidence = []
    notes = []
    for c in cands:
        figures = usage_figures(c)
        share = used_share(c)
        if share is None:
            note = "no usage figures yet"
            verdict = "unknown"
        elif figures["key_limit"] == 0 or figures["plan_limit"] == 0:
            note = "a limit of 0: the key serves nothing until the limit is raised"
            verdict = "exhausted"
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
            note += _flag_against_figures(c)
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
    known = known_keys(secrets)
    burst = bursts(before, now)
    cooldown = _cooldown_step(before, now, burst)
    if hold[0] > 0:
        cooldown = Step(
            cooldown.name,
            cooldown.finding + f"; the router holds every search for {_secs(hold[0])} "
            f"after a 429 on {hold[1] or 'a key'} (on_429='stop')",
            cooldown.evidence,
        )
    # The quota is judged on the freshest figures: those a probe just read.
    steps = [_state_step(before, now), cooldown, _quota_step(after)]
    steps.append(
        probe
        or Step(
            "probe",
            "skipped: run `searchfuse diagnose --probe` (or diagnose(probe=True)) "
            "to ask /usage for each key, one at a time; it spends no search credits",
        )
    )
    found, advice, retry_after = verdict(before, after, now, burst, probe is not None)
    if hold[0] > 0 and found in (Verdict.HEALTHY, Verdict.STALE):
        found = Verdict.BURST if burst else Verdict.COOLING
        advice = (
            f"a 429 on {hold[1] or 'a key'} stopped all searches for {_secs(hold[0])} more: "
            "searches came too fast. Wait, then make one search per reply; do not retry earlier."
        )
        retry_after = hold[0]
    if outage is not None and found in (Verdict.HEALTHY, Verdict.STALE):
        found, advice, retry_after = Verdict(outage[0]), outage[1], outage[2]
    steps.append(Step("verdict", f"{found}: {advice}"))
    memo: dict[str, str] = {}
    shown = tuple(
        Step(s.name, redact(s.finding, known), redact_tree(s.evidence, known, memo)) for s in steps
    )
    return Diagnosis(
        shown, found, bool(burst), redact(f"Verdict: {found}. {advice}", known), retry_after
    )
