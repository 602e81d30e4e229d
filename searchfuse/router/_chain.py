"""The chain: one `Core` per provider over one store, and when a call moves down it.

DESIGN's rules, in the order a call meets them:

1. A rate limit never moves a call down the chain. With `on_429="stop"` the
   provider's `RateLimited` and the hold's `CooldownActive` reach the caller
   (one transient 429 once pushed a whole agent session to its weakest
   provider, unannounced). With `"retry"` the bounded retries are spent first;
   then the limit is real and the next provider serves, and while the hold
   runs the held provider is passed over. With `"failover"` every key of the
   provider is tried first; then it is out of keys (rule 2).
2. A lasting failure passes a provider over: no key can serve
   (`NoKeyAvailable`: disabled, auth-cooled, exhausted, failing, breaker open).
3. Every move down is named: one WARNING when a provider starts being passed
   over (which, why, who serves instead), one INFO when it serves again, and
   `result["searchfuse"]["degraded"]` on every result meanwhile. Once per
   fleet: a move the store's event log already shows as the provider's latest
   (another process sharing the store named it) is not logged again.
4. Busy is not broken: a provider whose keys are all at their rate makes the
   call wait (`max_wait`), unless `overflow=True`, when the next provider
   with room serves at once (`degraded.reason == "overflow"`).
5. A parameter a provider cannot honour (its `check` refuses it) passes that
   provider over for this call only; it is not a degradation of the provider.
6. The fallback function, if any, is the last link, under the same rules.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from searchfuse._format import duration
from searchfuse._sansio import Step
from searchfuse._wire import short_text, validate_base_url
from searchfuse.errors import (
    ConfigError,
    CooldownActive,
    NoKeyAvailable,
    RateLimited,
    Throttled,
    Unsupported,
)
from searchfuse.providers import _registry as registry
from searchfuse.providers._base import Provider
from searchfuse.providers.tavily import resolve_base_url
from searchfuse.router._breaker import Breaker
from searchfuse.router._call import request_flow
from searchfuse.router._core import Core
from searchfuse.router._http import HTTP
from searchfuse.router._keys import Config, KeyEntry
from searchfuse.router._ledger import Ledger
from searchfuse.router._options import RouterOptions
from searchfuse.router._providers import DEFAULT as DEFAULT_PROVIDER
from searchfuse.router._rates import key_rate
from searchfuse.router.state import MAX_EVENTS, EventKind, Store

__all__ = ["Chain", "Passed", "Wiring", "build"]

log = logging.getLogger("searchfuse.router")


@dataclass(frozen=True)
class Passed:
    """A provider a call went past, and why (a verdict, `"overflow"` or `"unsupported"`)."""

    name: str
    reason: str
    detail: str


#: Why a provider whose keys cannot serve is passed over, by the diagnosis's verdict.
_WHY = {
    "auth": "every key was rejected (401/403)",
    "exhausted": "every key is out of quota",
    "upstream": "the service is failing",
    "config": "no key is configured or enabled",
    "cooling": "every key is cooling down",
    "burst": "every key is cooling down",
}

#: A provider's core and the body it would send (or its refusal of the parameters).
Checked = tuple[Core, Mapping[str, Any] | Unsupported]


@dataclass
class Chain:
    """The providers of one router, in the order they are tried."""

    cores: tuple[Core, ...]
    overflow: bool = False
    #: The providers being passed over now, and why: each move is logged once.
    _down: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def first(self) -> Core:
        """The head of the chain (the only link of a single-provider router)."""
        return self.cores[0]

    def by_provider(self) -> Mapping[str, Core]:
        """Each provider's core, by name."""
        return {core.provider.name: core for core in self.cores}

    def check(self, endpoint: str, body: Mapping[str, Any]) -> list[Checked]:
        """`body` as each provider with `endpoint` would send it, or its refusal;
        raises the first refusal when no provider can send it (before anything runs)."""
        links = [core for core in self.cores if endpoint in core.provider.endpoints]
        if not links:
            self.first.provider.check(endpoint, body)  # the provider's own error
            raise ValueError(f"no configured provider has the endpoint {endpoint!r}")
        checked: list[Checked] = []
        for core in links:
            try:
                checked.append((core, core.provider.check(endpoint, body)))
            except Unsupported as exc:
                checked.append((core, exc))
        if all(isinstance(sent, Unsupported) for _, sent in checked):
            raise next(sent for _, sent in checked if isinstance(sent, Unsupported))
        return checked

    def flow(
        self,
        endpoint: str,
        checked: list[Checked],
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> Generator[Step, Any, dict[str, Any]]:
        """One request down the chain (as `check` gave it): the first provider that can
        serve it does."""
        passed: list[Passed] = []
        failure: Exception | None = None
        for i, (core, sent) in enumerate(checked):
            last = i == len(checked) - 1
            if isinstance(sent, Unsupported):
                if last:
                    assert failure is not None  # `check` refused a body no link can send
                    raise failure
                passed.append(Passed(core.provider.name, "unsupported", short_text(str(sent))))
                continue
            try:
                result = yield from request_flow(core, endpoint, sent, timeout, deadline)
            except (RateLimited, CooldownActive) as exc:
                if last or core.options.on_429 != "retry":
                    raise  # rule 1: a rate limit is the caller's to wait out
                failure = exc
                why = f"rate-limited, held for {duration(exc.retry_after or 0.0)}"
                passed.append(Passed(core.provider.name, "cooling", why))
                continue
            except Throttled as exc:
                if last or not self.overflow:
                    raise  # rule 4: busy is not broken
                failure = exc
                why = "every key is at its rate"
                passed.append(Passed(core.provider.name, "overflow", why))
                continue
            except NoKeyAvailable as exc:
                if last:
                    raise
                failure = exc
                verdict = str(exc.diagnosis.verdict if exc.diagnosis is not None else "config")
                why = _WHY.get(verdict, "no key can serve")
                passed.append(Passed(core.provider.name, verdict, why))
                continue
            self._note(passed, result)
            return result
        raise AssertionError("unreachable: the last link raises or serves")

    def _note(self, passed: list[Passed], result: dict[str, Any]) -> None:
        """Name the moves down: in the result always, in the log when they start and end."""
        meta = result.setdefault("searchfuse", {})
        serving = str(meta.get("served_by") or "fallback")
        lasting = [p for p in passed if p.reason != "unsupported"]
        head = lasting[0] if lasting else (passed[0] if passed else None)
        meta["degraded"] = (
            None if head is None else {"from": head.name, "reason": head.reason, "serving": serving}
        )
        started: list[Passed] = []
        ended: list[str] = []
        with self._lock:
            for p in lasting:
                if p.name not in self._down:  # a new reason while down is no new move
                    started.append(p)
                self._down[p.name] = p.reason
            if serving in self._down:
                del self._down[serving]
                ended.append(serving)
        titles = self.titles()
        for p in started:
            if self._said(p.name, EventKind.PASSED_OVER):
                continue  # another router sharing the store named this move already
            log.warning(
                "%s is passed over (%s: %s); %s serves instead",
                titles.get(p.name, p.name),
                p.reason,
                p.detail,
                titles.get(serving, serving),
            )
            why = f"{p.reason}: {p.detail}; {titles.get(serving, serving)} serves instead"
            self._log_event(EventKind.PASSED_OVER, p.name, why)
        for name in ended:
            if self._said(name, EventKind.SERVES_AGAIN):
                continue
            log.info("%s serves again", titles.get(name, name))
            self._log_event(EventKind.SERVES_AGAIN, name, "serves again")

    def _said(self, provider: str, kind: str) -> bool:
        """Whether the store's event log already says `kind` is the latest move of
        `provider`: another process sharing the store named it, so the fleet logs each
        move once. (Read, not claimed in a transaction: two processes meeting the same
        move in the same instant may both name it; a move pushed out of the bounded log
        by newer events is named again.)"""
        try:
            events = self.first.ledger.events(MAX_EVENTS)
        except Exception:
            return False
        moves = (EventKind.PASSED_OVER, EventKind.SERVES_AGAIN)
        latest = next((e for e in events if e.provider == provider and e.kind in moves), None)
        return latest is not None and latest.kind == kind

    def _log_event(self, kind: str, provider: str, detail: str) -> None:
        """Keep a move down the chain (or back) in the store's event log, as the log
        line. The result is served whatever the store says."""
        core = self.by_provider().get(provider, self.first)
        try:
            core.ledger.note(kind, provider, detail)
        except Exception as exc:
            log.warning("could not log %s of %s in the state store (%s)", kind, provider, exc)

    def titles(self) -> dict[str, str]:
        """Each provider's name in messages."""
        return {core.provider.name: core.provider.title for core in self.cores}


@dataclass(frozen=True)
class Wiring:
    """What every core of a router shares: where to send, how, and what to hide."""

    environ: Mapping[str, str]
    base_url: str | None
    base_urls: Mapping[str, str]
    timeout: httpx.Timeout | float | None
    transport: httpx.BaseTransport | None
    async_transport: httpx.AsyncBaseTransport | None
    secrets: tuple[str, ...]
    scrub: Callable[[str], str]
    breaker_threshold: int


def build(
    config: Config,
    options: RouterOptions,
    store: Store,
    wiring: Wiring,
    fallback: Callable[..., Any] | None,
    overflow: bool,
) -> Chain:
    """One core per provider of `config`, in chain order, over one `store`."""
    names = config.providers or (DEFAULT_PROVIDER,)
    _check_base_urls(wiring.base_urls, names)
    retry = options.on_429 == "retry" and len(names) > 1
    cores: list[Core] = []
    for i, name in enumerate(names):
        try:
            provider = registry.lookup(name)
        except LookupError as exc:
            raise ConfigError(
                config.source, "providers", str(exc), f'remove "{name}" and its keys'
            ) from None
        entries = tuple(e for e in config.keys if e.provider == name)
        last = i == len(names) - 1
        # overflow: a busy provider that is not the last waits for nothing (rule 4).
        opts = options if last or not overflow else dataclasses.replace(options, max_wait=0.0)
        rates = {e.fingerprint: key_rate(e, wiring.environ) for e in entries}
        ledger = Ledger(store, entries, rates, opts, wiring.scrub, own_holds_only=retry)
        http = HTTP(
            _address(provider, entries, wiring),
            provider.headers,
            timeout=wiring.timeout,
            transport=wiring.transport,
            async_transport=wiring.async_transport,
            url_keyed=provider.key_is_url,
        )
        breaker = Breaker(wiring.breaker_threshold)
        fb = fallback if last else None
        core = Core(opts, ledger, provider, http, breaker, wiring.secrets, wiring.environ, fb)
        core.scrub = wiring.scrub
        cores.append(core)
    links = {core.provider.name: core for core in cores}
    for core in cores:
        core.links = links
    return Chain(tuple(cores), overflow)


def _check_base_urls(base_urls: Mapping[str, str], names: tuple[str, ...]) -> None:
    for name in base_urls:
        if name not in registry.PROVIDERS:
            known = ", ".join(registry.PROVIDERS)
            raise ConfigError(
                "base_urls", name, "not a provider searchfuse knows", f"use one of {known}"
            )
        if registry.PROVIDERS[name].url_keyed:
            raise ConfigError(
                "base_urls",
                name,
                "a SearXNG instance's address is its key",
                'name the instance in the keys: Router({"searxng": ["http://..."]})',
            )


def _address(provider: Provider, entries: tuple[KeyEntry, ...], wiring: Wiring) -> str:
    """The provider's address: `base_urls=` (Tavily: `base_url=`), else its
    `*_BASE_URL` variable, else its public address (SearXNG: its first instance)."""
    name = provider.name
    if registry.PROVIDERS[name].url_keyed:
        return entries[0].key if entries else provider.default_base_url
    given = wiring.base_urls.get(name)
    if name == DEFAULT_PROVIDER and (wiring.base_url or not given):
        return resolve_base_url(wiring.base_url, wiring.environ)
    if given:
        return validate_base_url(
            given, f"base_urls[{name!r}]", provider.title, provider.default_base_url
        )
    env = wiring.environ.get(provider.base_url_env)
    if env:
        return validate_base_url(
            env, provider.base_url_env, provider.title, provider.default_base_url
        )
    return provider.default_base_url
