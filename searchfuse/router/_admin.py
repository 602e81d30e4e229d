"""The router's admin calls: status, the key probe, the diagnosis, the start-up warning."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Generator
from typing import Any

from searchfuse._format import duration
from searchfuse._sansio import Step
from searchfuse.errors import ConfigError, CooldownActive
from searchfuse.router._core import Core, classify, record_probe
from searchfuse.router._keys import KeyEntry
from searchfuse.router._observe import observe
from searchfuse.router._refusals import no_key
from searchfuse.router._steps import Probe, Send, Sleep
from searchfuse.router.diagnose import Diagnosis, diagnose_candidates
from searchfuse.router.diagnose import Step as DiagnosisStep
from searchfuse.router.policy import Outcome
from searchfuse.router.selection import Candidate, blocked_reason, candidates, rank, remaining
from searchfuse.router.status import Hold, KeyStatus, ProbeResult, key_status

__all__ = [
    "NOT_PROBED",
    "diagnose_flow",
    "ensure_available",
    "hold",
    "probe_flow",
    "status",
    "warn_if_degraded",
]

#: What `test_keys` says of a key whose provider has no free probe (unless told to spend).
NOT_PROBED = "not probed: a probe costs a search"

log = logging.getLogger("searchfuse.router")


def status(core: Core) -> list[KeyStatus]:
    """One record per key, from one look at the state. While the router-wide hold
    runs, a key that could otherwise serve is `"held"`: no search is sent with it."""
    ledger = core.ledger
    now = ledger.now()
    state = ledger.view(now)
    left, masked = ledger.hold(state, now)
    held = f"held for {duration(left)}: every search waits after a 429 on {masked or 'a key'}"
    out = []
    memo: dict[str, str] = {}
    for c in candidates(ledger.keys, state):
        window = _window(core, c.entry.fingerprint, now)
        record = key_status(
            c, now, remaining(c), blocked_reason(c, now), core.secrets, memo, **window
        )
        if left > 0 and record.state == "available":
            record = dataclasses.replace(
                record, state="held", blocked_reason=held, cooldown_left=left
            )
        out.append(record)
    return out


def _window(core: Core, fp: str, now: float) -> dict[str, Any]:
    """Key `fp`'s rate, and how many searches its pacing log holds in the current window."""
    rate = core.ledger.rates[fp]
    try:
        times = core.ledger.pacing_log(fp) if core.options.pace else None
    except ConfigError:
        times = None  # a damaged pacing table refuses searches; status still shows the keys
    sent = None if times is None else sum(1 for t in times if t > now - rate.window)
    return {"window_requests": sent, "window_limit": rate.requests, "window_seconds": rate.window}


def hold(core: Core) -> Hold | None:
    """The hold this provider's searches wait for, if one runs."""
    left, masked = core.ledger.hold()
    if left <= 0:
        return None
    provider = core.provider.name if masked is not None else None
    return Hold(left, core.ledger.now() + left, masked, provider)


def ensure_available(core: Core) -> None:
    """Raise when no key can serve right now; nothing is sent."""
    ledger = core.ledger
    now = ledger.now()
    state = ledger.view(now)
    left, masked = ledger.hold(state, now)
    if left > 0:
        raise CooldownActive(left, cause=f"rate limit (429 on {masked or 'a key'})")
    if not rank(candidates(ledger.keys, state), now):
        raise no_key(ledger, core.secrets, {})


def _skipped(core: Core, why: tuple[str, float] | None) -> str:
    """Why a key's probe was not made, truthfully."""
    rate, probe = core.provider.probe_rate, core.provider.probe()
    if rate is None or probe is None or why is None:
        return NOT_PROBED
    kind, seconds = why
    again = f"the next is possible in {duration(seconds)}"
    if kind == "limit":
        return (
            f"skipped: {rate.requests} {probe.path} requests in the last "
            f"{rate.window / 60:g} minutes ({core.provider.title}'s limit per key); {again}"
        )
    return (
        f"skipped: {probe.path} for this key is paused (a request still out, or "
        f"{core.provider.title} answered 429 to it); {again}"
    )


def probe_flow(core: Core, spend: bool = False) -> Generator[Step, Any, list[ProbeResult]]:
    """Probe every key, one at a time, within the probe's own limit; a provider
    without a free probe is asked a one-result search per key only with `spend`."""
    results = []
    rate = core.provider.probe_rate
    name = core.provider.name
    for entry in core.ledger.keys:
        if rate is None and spend:
            results.append((yield from _spend_probe(core, entry)))
            continue
        why = None if rate is None else core.ledger.claim_probe(entry, rate.requests, rate.window)
        if rate is None or why is not None:
            note = _skipped(core, why)
            results.append(ProbeResult(entry.masked, entry.fingerprint, None, note, name))
            continue
        response = yield Probe(entry)
        code, _ = record_probe(core, entry, response)
        if code == 200:
            note = "ok"
        elif code is None:
            note = f"no answer ({type(response).__name__})"
        else:
            answer = core.provider.classify(response, core.ledger.now())
            note = f"{code}: {core.scrub(answer.detail)}"
        results.append(ProbeResult(entry.masked, entry.fingerprint, code, note, name))
    return results


def _paced(core: Core, entry: KeyEntry) -> Generator[Step, Any, float | None]:
    """Take a slot in `entry`'s pacing window, waiting for one within `max_wait` as a
    search does; `None` when taken, else the seconds it would still have to wait."""
    waited = 0.0
    while core.options.pace and (wait := core.ledger.take_slot(entry)) > 0:
        if waited + wait > core.options.max_wait:
            return wait
        waited += wait
        yield Sleep(wait)
    return None


def _spend_probe(core: Core, entry: KeyEntry) -> Generator[Step, Any, ProbeResult]:
    """Check a key with a one-result search (it costs what a search costs, and keeps
    to the key's rate as a search does)."""
    provider = core.provider
    body = provider.check(
        provider.endpoints[0], {"query": "searchfuse key check", "max_results": 1}
    )
    wait = yield from _paced(core, entry)
    if wait is not None:
        note = f"skipped: the key is at its rate; the next request is possible in {duration(wait)}"
        return ProbeResult(entry.masked, entry.fingerprint, None, note, provider.name)
    result = yield Send(
        entry, provider.build(provider.endpoints[0], body), granted_at=core.options.now()
    )
    answer = classify(core, result)
    name = provider.name
    if answer.outcome is Outcome.OK:
        # The key served: that ends a cooldown or an exhausted flag as any served
        # search does (the check would be worthless if the router kept refusing it),
        # the search is counted, and what its headers say of the key is applied.
        try:
            data = result.json()
        except ValueError:
            data = None
        data = data if isinstance(data, dict) else None
        core.ledger.settle(entry, None, provider.cost(provider.endpoints[0], body, data), data)
        observe(core, entry, result)
        note = "ok (a search was spent)"
        return ProbeResult(entry.masked, entry.fingerprint, answer.status, note, name)
    core.ledger.react(entry, answer)
    note = f"{answer.status or 'no answer'}: {answer.detail or answer.outcome}"
    return ProbeResult(entry.masked, entry.fingerprint, answer.status, note, name)


def _probe_step(
    core: Core, now: float, before: list[Candidate]
) -> Generator[Step, Any, DiagnosisStep]:
    """The diagnosis's probe step: what each key's probe said against what the state said."""
    said = {c.entry.fingerprint: blocked_reason(c, now) for c in before}
    # One key at a time, the free probe only: a probe must never spend search credits.
    results = yield from probe_flow(core)
    request = core.provider.probe()
    if request is None or core.provider.probe_rate is None:
        shown = [result.to_dict() for result in results]
        return DiagnosisStep("probe", f"{NOT_PROBED} ({core.provider.title})", shown)
    path = request.path
    now, probed = core.ledger.snapshot()
    still = {c.entry.fingerprint: blocked_reason(c, now) for c in probed}
    evidence: list[dict[str, Any]] = []
    for result in results:
        ev: dict[str, Any] = result.to_dict()
        was, left = said.get(result.fingerprint), still.get(result.fingerprint)
        if not result.ok:
            ev["note"] = result.note
        elif was and not left:
            ev["note"] = f"{path} 200; the state said {was!r}: stale, refreshed"
        elif left:
            # The probe proves the key valid and shows its quota; it says nothing
            # about the search rate limit or the provider's health, so such a
            # cooldown is not stale.
            ev["note"] = f"{path} 200: the key is valid, and still {left}"
        else:
            ev["note"] = f"{path} 200: the key is valid"
        evidence.append(ev)
    ok = sum(1 for ev in evidence if ev.get("ok"))
    return DiagnosisStep(
        "probe", f"{path} answered 200 for {ok} of {len(evidence)} key(s)", evidence
    )


def diagnose_flow(core: Core, probe: bool) -> Generator[Step, Any, Diagnosis]:
    """The diagnosis in verification order (with `probe`, each key probed first)."""
    now, before = core.ledger.snapshot()
    probe_step = (yield from _probe_step(core, now, before)) if probe else None
    now, after = core.ledger.snapshot()
    found = diagnose_candidates(
        before, after, now, probe_step, core.ledger.hold(), secrets=core.secrets
    )
    if probe_step is not None:
        return found
    steps = tuple(_unprobed(core) if s.name == "probe" else s for s in found.steps)
    return dataclasses.replace(found, steps=steps)


def _unprobed(core: Core) -> DiagnosisStep:
    """The probe step of a diagnosis made without probing, as the provider allows it."""
    request = core.provider.probe()
    if request is None or core.provider.probe_rate is None:
        return DiagnosisStep(
            "probe",
            f"{NOT_PROBED}: {core.provider.title} has no free request that checks a key "
            "(`searchfuse test-keys --spend` checks each with a one-result search)",
        )
    return DiagnosisStep(
        "probe",
        "skipped: run `searchfuse diagnose --probe` (or diagnose(probe=True)) to ask "
        f"{request.path} for each key, one at a time; it spends no search credits",
    )


def warn_if_degraded(core: Core, source: str, missing: str | None) -> None:
    """Say once, at construction, when this router will not serve as configured."""
    names = list(core.links)
    after = names[names.index(core.provider.name) + 1 :] if core.provider.name in names else []
    serving = (
        f"searches go down the chain to {core.links[after[0]].provider.title}"
        if after
        else f"searches will be served by the fallback {core.fallback_name()}"
        if core.fallback is not None
        else "searches will fail with NoKeyAvailable"
    )
    title = core.provider.title
    if not core.ledger.keys:
        log.warning("no %s keys: %s is missing; %s", title, missing or "the key list", serving)
        return
    now, cands = core.ledger.snapshot()
    if any(blocked_reason(c, now) is None for c in cands):
        return
    lasting = [c for c in cands if c.state.disabled or c.state.exhausted]
    if len(lasting) == len(cands):
        log.warning(
            "all %d %s key(s) from %s are disabled or exhausted according to %r; %s",
            len(cands),
            title,
            source,
            core.ledger.store,
            serving,
        )
