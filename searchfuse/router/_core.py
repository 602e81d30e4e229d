"""What a router's flows work with, and how they read an answer.

`Core` bundles one router's options, ledger, provider, HTTP pools and
breaker; `classify` turns an answer (or the exception instead of one) into a
row of the reaction table, its texts scrubbed of every configured key;
`record_probe` stores what a key's free probe answered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from searchfuse._wire import short_text
from searchfuse.providers._base import Classified, Provider
from searchfuse.router import policy
from searchfuse.router._breaker import Breaker
from searchfuse.router._http import HTTP
from searchfuse.router._ledger import Ledger
from searchfuse.router._options import RouterOptions
from searchfuse.router.config import KeyEntry
from searchfuse.router.policy import Outcome

__all__ = ["Core", "classify", "record_probe"]

log = logging.getLogger("searchfuse.router")


@dataclass
class Core:
    """What a router's flows work with: its options, ledger, provider and pools."""

    options: RouterOptions
    ledger: Ledger
    provider: Provider
    http: HTTP
    breaker: Breaker
    secrets: tuple[str, ...]
    environ: Mapping[str, str]
    fallback: Callable[..., Any] | None = None
    scrub: Callable[[str], str] = str
    #: Every core of the router's chain by provider name (this one included), so a
    #: driver sends each step with the provider and pools of the key it names.
    links: Mapping[str, Core] = field(default_factory=dict)

    def link(self, provider: str) -> Core:
        """The core of `provider` in this core's chain (this core when it is alone)."""
        return self.links.get(provider, self)

    def fallback_name(self) -> str:
        """The fallback's name, for logs and `result["searchfuse"]`."""
        fb = self.fallback
        return str(getattr(fb, "__qualname__", None) or getattr(fb, "__name__", None) or repr(fb))


def classify(core: Core, result: Any) -> Classified:
    """What an answer (or the exception instead of one) means, its texts scrubbed."""
    now = core.ledger.now()
    if isinstance(result, BaseException):
        outcome = policy.classify_exception(result)
        if outcome is None:
            raise result
        detail = core.scrub(short_text(str(result) or type(result).__name__))
        return Classified(
            outcome, policy.status_of(result), detail, policy.retry_after_of(result, now)
        )
    return _scrubbed(core, core.provider.classify(result, now))


def _scrubbed(core: Core, answer: Classified) -> Classified:
    return replace(answer, detail=core.scrub(answer.detail)) if answer.detail else answer


def record_probe(core: Core, entry: KeyEntry, result: Any) -> tuple[int | None, Outcome | None]:
    """Store what a probe answered. Returns its HTTP status (`None`: no usable
    answer) and what it means for the key."""
    ledger, provider = core.ledger, core.provider
    now = ledger.now()
    if isinstance(result, BaseException):
        log.info("usage sync for %s failed: %s", entry.masked, type(result).__name__)
        return None, None
    status = int(result.status_code)
    if status == 200:
        figures = provider.figures(result)
        if figures is None:
            return None, None
        ledger.record_figures(entry, figures)
        return status, Outcome.OK
    answer = _scrubbed(core, provider.classify(result, now))
    if answer.outcome is Outcome.RATE_LIMITED:
        # The probe has its own limit; its 429 says nothing about searches (incident 3).
        rate = provider.probe_rate
        fallback = rate.window if rate is not None else core.options.cooldown_seconds
        wait = answer.retry_after if answer.retry_after is not None else fallback
        ledger.block_probe(entry, now + policy.clamp_park(wait))
    elif answer.outcome in (Outcome.AUTH, Outcome.EXHAUSTED):
        ledger.react(entry, replace(answer, retry_after=None), probe=True)
    else:
        # 5xx, 404, a redirect: the probe failing says nothing about the key; its claim
        # stays, so the rest of a burst does not ask a failing probe again.
        log.info("usage sync for %s answered %s; searching without it", entry.masked, status)
    return status, answer.outcome
