"""What a call that cannot be served raises, and why: no key, a stop, an open breaker."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import httpx

from searchfuse._format import duration
from searchfuse.errors import BadRequest, ConfigError, NoKeyAvailable
from searchfuse.providers._base import Classified, Provider
from searchfuse.router._breaker import Breaker
from searchfuse.router._ledger import Ledger
from searchfuse.router.diagnose import Verdict, diagnose_candidates
from searchfuse.router.policy import Outcome
from searchfuse.router.selection import blocked_reason

__all__ = ["Outage", "broken", "misconfigured", "no_key", "stopped"]


class Outage(NamedTuple):
    """What a call saw go wrong: the verdict it supports, the advice, and when to retry."""

    verdict: Verdict
    advice: str
    retry_after: float | None


def _verdict_of(failed: Iterable[Outcome]) -> Verdict:
    kinds = set(failed)
    if kinds <= {Outcome.AUTH}:
        return Verdict.AUTH
    if kinds <= {Outcome.EXHAUSTED}:
        return Verdict.EXHAUSTED
    if kinds <= {Outcome.MISCONFIGURED}:
        return Verdict.CONFIG
    return Verdict.UPSTREAM


def no_key(
    ledger: Ledger,
    secrets: Sequence[str],
    failures: Mapping[str, str],
    failed: Sequence[Outcome] = (),
    cut: str | None = None,
    outage: Outage | None = None,
    *,
    timed_out: bool = False,
) -> NoKeyAvailable:
    """The refusal when this call cannot be served, with its diagnosis.

    `failed` are the outcomes of the keys this call tried; `cut` says
    why it stopped trying (deadline, key bound). Keys the state still
    calls available are then not "healthy": this call just saw them fail.
    `timed_out`: every key tried went unanswered in time, or the deadline passed.
    """
    now, cands = ledger.snapshot()
    reasons = {
        c.entry.masked: failures.get(c.entry.masked) or blocked_reason(c, now) or "available"
        for c in cands
    }
    if outage is None and failed:
        summary = "; ".join(f"{key}: {why}" for key, why in failures.items())
        advice = f"this call tried {len(failures)} key(s) and each failed ({summary})"
        advice += f"; {cut}." if cut else "."
        outage = Outage(_verdict_of(failed), advice, None)
    elif outage is None and cut:
        outage = Outage(Verdict.UPSTREAM, f"this call stopped: {cut}.", None)
    diagnosis = diagnose_candidates(cands, cands, now, None, ledger.hold(), outage, secrets=secrets)
    return NoKeyAvailable(
        reasons, retry_after=diagnosis.retry_after, diagnosis=diagnosis, timed_out=timed_out
    )


def misconfigured(refusal: NoKeyAvailable, provider: Provider) -> NoKeyAvailable | ConfigError:
    """`refusal`, or the configuration error it is when every key of `provider` is an
    instance parked as misconfigured (a SearXNG without JSON output): the caller's fix
    to make, as the first call that met it was told, while nothing more is sent to it."""
    diagnosis = refusal.diagnosis
    if diagnosis is None or diagnosis.verdict is not Verdict.CONFIG or not provider.key_is_url:
        return refusal
    keys = diagnosis.step("state").evidence
    if not keys or any(ev.get("cooldown_reason") != Outcome.MISCONFIGURED for ev in keys):
        return refusal
    found = "; ".join(f"{ev['key']}: {ev['last_error']}" for ev in keys)
    return ConfigError(
        "keys",
        "url",
        f"{provider.title} answered as misconfigured ({found})",
        "fix the instance's settings (for a 403: add json to search.formats in its "
        "settings.yml), or name the address of a working instance",
    )


def broken(
    ledger: Ledger, breaker: Breaker, secrets: Sequence[str], provider: Provider
) -> NoKeyAvailable | None:
    """The refusal while the router-wide breaker is open (nothing is sent), else `None`."""
    left = breaker.left(ledger.now())
    if left <= 0:
        return None
    advice = (
        f"{provider.title} failed {breaker.threshold} times in a row (5xx, timeouts or no "
        f"connection); the router pauses every request for {duration(left)}."
    )
    return no_key(ledger, secrets, {}, outage=Outage(Verdict.UPSTREAM, advice, left))


def stopped(
    answer: Classified,
    result: Any,
    provider: Provider,
    base_url: str,
    environ: Mapping[str, str],
) -> BaseException:
    """The error for an answer after which no other key is tried (the table says so)."""
    if isinstance(result, BaseException) and (
        answer.outcome is Outcome.MISCONFIGURED or not isinstance(result, httpx.HTTPError)
    ):
        # The caller's own function failed (our client never raises for a status):
        # its exception, unchanged.
        return result
    if answer.outcome is Outcome.MISCONFIGURED:
        env = provider.base_url_env
        source = env if environ.get(env) else "base_url"
        return ConfigError(
            "environment" if source.isupper() else "Router",
            source,
            f"{base_url} answered {answer.status} to a search: it is not "
            f"{provider.title}'s API ({provider.title} never redirects and always has "
            f"{provider.endpoints[0]})",
            f"set {source} to {provider.default_base_url}, or to the address of your proxy",
        )
    return BadRequest(answer.detail, status=answer.status or 400, provider=provider.title)
