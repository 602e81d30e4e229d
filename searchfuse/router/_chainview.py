"""The admin calls over a whole chain: status, events, key checks and the diagnosis.

Each provider's core answers for its own keys (`_admin`); this puts the answers
together in chain order. The diagnosis keeps the verification order, each
step's evidence names every key's provider, `by_provider` gives each
provider's verdict, and the overall verdict is `"healthy"` while some provider
can serve.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence
from typing import Any

from searchfuse._sansio import Step
from searchfuse.errors import CooldownActive, NoKeyAvailable
from searchfuse.router import _admin
from searchfuse.router._core import Core
from searchfuse.router.diagnose import Diagnosis, Verdict
from searchfuse.router.diagnose import Step as DiagnosisStep
from searchfuse.router.state import Event
from searchfuse.router.status import Hold, KeyStatus, ProbeResult

__all__ = ["diagnose_flow", "ensure_available", "events", "hold", "probe_flow", "status"]


def status(cores: Sequence[Core]) -> list[KeyStatus]:
    """Every key of every provider, in chain order."""
    return [record for core in cores for record in _admin.status(core)]


def hold(cores: Sequence[Core]) -> Hold | None:
    """The hold that runs, named by the provider whose key set it (every core sees a
    hold under `on_429="stop"`; under `"retry"` only the provider whose key 429'd)."""
    found = [h for core in cores if (h := _admin.hold(core)) is not None]
    named = [h for h in found if h.key is not None]
    return (named or found)[0] if found else None


def events(cores: Sequence[Core], limit: int) -> list[Event]:
    """The store's newest events (every provider shares one store), every key masked."""
    keys = [entry for core in cores for entry in core.ledger.keys]
    return cores[0].ledger.events(limit, keys)


def probe_flow(cores: Sequence[Core], spend: bool) -> Generator[Step, Any, list[ProbeResult]]:
    """Every provider's keys checked, one at a time, each as its provider allows."""
    results: list[ProbeResult] = []
    for core in cores:
        results.extend((yield from _admin.probe_flow(core, spend)))
    return results


def ensure_available(cores: Sequence[Core]) -> None:
    """Return when some provider, or the fallback function, can serve now; else raise
    the first provider's refusal.

    A hold raises at once when the chain would not move past it (`on_429="stop"`).
    The fallback serves after every provider was passed over for a lasting failure,
    unless a rate limit holds the last provider (as `Chain.flow` decides).
    """
    first: NoKeyAvailable | None = None
    held: Exception | None = None
    failed: Core | None = None
    by_provider: dict[str, str] = {}
    for core in cores:
        try:
            _admin.ensure_available(core)
            return
        except CooldownActive as exc:
            if core.options.on_429 != "retry" or core is cores[-1]:
                raise
            held, by_provider[core.provider.name] = exc, "cooling"
        except NoKeyAvailable as exc:
            first, failed = first or exc, core
            by_provider[core.provider.name] = str(getattr(exc.diagnosis, "verdict", "config"))
    last = cores[-1]
    if failed is last and last.fallback is not None and not last.ledger.rate_limited():
        return
    if first is not None and first.diagnosis is not None:  # as `Chain.flow` tells it
        first.diagnosis = dataclasses.replace(first.diagnosis, by_provider=by_provider)
    failure = first or held
    assert failure is not None
    raise failure


def diagnose_flow(cores: Sequence[Core], probe: bool) -> Generator[Step, Any, Diagnosis]:
    """The diagnosis of every provider, put together (see the module docstring)."""
    each: list[tuple[str, Diagnosis]] = []
    for core in cores:
        each.append((core.provider.name, (yield from _admin.diagnose_flow(core, probe))))
    by_provider = {name: str(d.verdict) for name, d in each}
    if len(each) == 1:
        return dataclasses.replace(each[0][1], by_provider=by_provider)
    titles = {core.provider.name: core.provider.title for core in cores}
    # "stale" can serve too: the state said otherwise, and was wrong (incident 2).
    serving = next((d for _, d in each if d.verdict == "healthy"), None) or next(
        (d for _, d in each if d.verdict == "stale"), None
    )
    head = serving or each[0][1]
    steps = []
    for i, step in enumerate(each[0][1].steps):
        findings = []
        evidence: list[dict[str, Any]] = []
        for name, diagnosis in each:
            if i < len(diagnosis.steps):
                own = diagnosis.steps[i]
                findings.append(f"{titles[name]}: {own.finding}")
                evidence.extend({"provider": name, **ev} for ev in own.evidence)
        steps.append(DiagnosisStep(step.name, "; ".join(findings), evidence))
    return dataclasses.replace(
        head,
        steps=tuple(steps),
        verdict=Verdict.HEALTHY if serving is not None else head.verdict,
        burst=any(d.burst for _, d in each),
        by_provider=by_provider,
    )
