"""Which provider each configured key belongs to, and the chain's order, checked.

A keys file (or the environment, or `Router({...})`) may name providers: each
entry's `provider` (default `"tavily"`), a SearXNG entry's `url` (its "key"),
and a top-level `providers` list, the chain's order. Mistakes are refused
here, naming the file, the field and the fix: an unknown provider, a SearXNG
entry without an address, a key that plainly belongs to another provider.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from searchfuse._secrets import mask
from searchfuse._wire import validate_base_url
from searchfuse.errors import ConfigError
from searchfuse.providers._registry import PROVIDERS, looks_like, lookup

__all__ = [
    "DEFAULT",
    "check_no_url",
    "check_order",
    "check_owner",
    "check_provider",
    "check_url",
    "items_of",
    "misplaced",
]

#: The provider of an entry that names none (every keys file before the chain).
DEFAULT = "tavily"
_KNOWN = ", ".join(f'"{name}"' for name in PROVIDERS)


def check_provider(value: Any, source: str, where: str) -> str:
    """A provider's name as configuration writes it; ConfigError naming `where` otherwise."""
    if value is None:
        return DEFAULT
    if not isinstance(value, str) or value.strip().lower() not in PROVIDERS:
        shown = repr(value) if isinstance(value, str) else type(value).__name__
        raise ConfigError(
            source,
            where,
            f"{shown[:40]} is not a provider searchfuse knows",
            f"use one of {_KNOWN}",
        )
    return value.strip().lower()


def check_url(value: Any, provider: str, source: str, where: str) -> str:
    """A url-keyed provider's instance address (SearXNG): present and an http(s) URL."""
    title = PROVIDERS[provider].title
    fix = f'add "url": "http://127.0.0.1:8888" (the {title} instance\'s address) to this entry'
    if value is None:
        raise ConfigError(source, where, f"a {title} entry needs its instance's address", fix)
    try:
        return validate_base_url(value, where, title, "http://127.0.0.1:8888")
    except ConfigError as exc:
        raise ConfigError(source, where, exc.problem, fix) from None


def check_no_url(item: Mapping[str, Any], provider: str, source: str, where: str) -> None:
    """Refuse a `url` on the entry of a provider whose key is not an address: it would
    be ignored, and the requests would go where the writer did not mean."""
    if "url" not in item:
        return
    spec = PROVIDERS[provider]
    variable = lookup(provider).base_url_env
    option = "base_url=..." if provider == DEFAULT else f'base_urls={{"{provider}": ...}}'
    raise ConfigError(
        source,
        f"{where}.url",
        f"only a SearXNG entry has a url (its instance's address); {spec.title}'s keys "
        f"are sent to {spec.title}'s API",
        f'remove "url"; to send {spec.title} requests elsewhere, set {variable} or '
        f"Router({option})",
    )


def misplaced(key: str, provider: str) -> str | None:
    """The provider `key` plainly belongs to when that is not `provider` (else `None`)."""
    own = PROVIDERS[provider].key_shape
    if own is not None and own.match(key):
        return None
    other = looks_like(key)
    return None if other is None or other == provider else other


def check_owner(key: str, provider: str, source: str, where: str) -> None:
    """Refuse a key that plainly belongs to another provider than the one it is under."""
    other = misplaced(key, provider)
    if other is None:
        return
    title, theirs = PROVIDERS[provider].title, PROVIDERS[other].title
    raise ConfigError(
        source,
        where,
        f"{mask(key)} looks like {_a(theirs)} key, not {_a(title)} key",
        f'put it under "{other}" (in a keys file: "provider": "{other}" on its entry)',
    )


def _a(title: str) -> str:
    return f"an {title}" if title[0] in "AEIOU" else f"a {title}"


def check_order(value: Any, used: Sequence[str], source: str) -> tuple[str, ...]:
    """The chain's order: `value` (a keys file's `providers`) checked against the
    providers the keys name (`used`, in order of first appearance), else `used`."""
    if value is None:
        return tuple(dict.fromkeys(used))
    if not isinstance(value, list) or not value:
        raise ConfigError(
            source,
            "providers",
            f"expected a list of provider names, got {type(value).__name__}",
            f'write the chain\'s order, e.g. "providers": ["tavily", "exa"] (known: {_KNOWN})',
        )
    order: list[str] = []
    for i, item in enumerate(value):
        name = check_provider(item, source, f"providers[{i}]")
        if name in order:
            raise ConfigError(
                source, f"providers[{i}]", f'"{name}" is named twice', "name each provider once"
            )
        if name not in used:
            raise ConfigError(
                source,
                f"providers[{i}]",
                f'"{name}" is in the chain but no key names it',
                f'add a key with "provider": "{name}", or remove "{name}" from providers',
            )
        order.append(name)
    missing = [name for name in dict.fromkeys(used) if name not in order]
    if missing:
        raise ConfigError(
            source,
            "providers",
            f'keys name "{missing[0]}", which the chain leaves out (its keys would never serve)',
            f'add "{missing[0]}" to providers, or remove its keys',
        )
    return tuple(order)


def items_of(keys: Mapping[str, Iterable[Any]]) -> tuple[list[Any], list[str]]:
    """`Router({"tavily": [...], "exa": [...]})` as keys-file items, and the order named."""
    items: list[Any] = []
    order: list[str] = []
    for raw_name, entries in keys.items():
        name = check_provider(raw_name, "Router(keys=...)", str(raw_name))
        if isinstance(entries, str):
            raise TypeError(
                f'Router({{"{name}": ...}}) takes a list of keys, not one string: [key]'
            )
        entries = list(entries)
        if entries:  # an empty list names no key of that provider: it is not in the chain
            order.append(name)
        for entry in entries:
            if isinstance(entry, Mapping):
                items.append({**entry, "provider": name})
            elif not isinstance(entry, str):  # a KeyEntry: the caller's own record
                items.append({"key": entry, "provider": name})
            elif PROVIDERS[name].url_keyed:
                items.append({"url": entry, "provider": name})
            else:
                items.append({"key": entry, "provider": name})
    return items, order
