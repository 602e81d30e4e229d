"""A router's chain built from its configuration: one core per provider, in chain order.

Every core shares the router's store, options and wiring; each gets its own
ledger over its provider's keys, its own HTTP client at its provider's address,
and its own breaker. The fallback function goes to the last core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from searchfuse._wire import validate_base_url
from searchfuse.errors import ConfigError
from searchfuse.providers import _registry as registry
from searchfuse.providers._base import Provider
from searchfuse.providers.tavily import resolve_base_url
from searchfuse.router._breaker import Breaker
from searchfuse.router._chain import Chain
from searchfuse.router._core import Core
from searchfuse.router._http import HTTP
from searchfuse.router._keys import Config, KeyEntry
from searchfuse.router._ledger import Ledger
from searchfuse.router._options import RouterOptions
from searchfuse.router._providers import DEFAULT as DEFAULT_PROVIDER
from searchfuse.router._rates import key_rate
from searchfuse.router.state import Store

__all__ = ["Wiring", "build"]


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
