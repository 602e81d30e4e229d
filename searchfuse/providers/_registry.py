"""Which providers exist, how a configuration names them, and how their keys look.

Configuration (keys files, the environment, `Router({...})`) names a provider
by its lowercase name; this table says which names there are, in the default
chain order, which environment variables hold each one's keys, and what a
key of each looks like, so that a key pasted under the wrong provider is
refused at load time instead of answering 401 at the first search. The
provider objects themselves live in their own modules and are loaded on
first use (`lookup`).

The key shapes are what each provider hands out today (Tavily: `tvly-`;
Exa: a UUID; Brave: `BSA` and letters; Serper: 40 hexadecimal digits). They
are used only to refuse a key that plainly belongs to another provider, never
to refuse a key of an unexpected shape.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass

from searchfuse.providers._base import Provider

__all__ = ["NAMES", "PROVIDERS", "ProviderSpec", "UnknownProvider", "looks_like", "lookup", "spec"]


@dataclass(frozen=True)
class ProviderSpec:
    """How configuration names one provider and its keys."""

    name: str
    title: str
    #: The variable holding a comma-separated list of keys, and the one holding a single key.
    list_env: str
    single_env: str
    #: What this provider's keys look like (`None`: it has no keys, see `url_keyed`).
    key_shape: re.Pattern[str] | None
    #: An example to show in a fix ("tvly-...").
    key_example: str
    #: The "key" is the instance's address (SearXNG): `keys[].url` in a keys file.
    url_keyed: bool = False


_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

#: Every provider, in the default chain order.
PROVIDERS: dict[str, ProviderSpec] = {
    spec.name: spec
    for spec in (
        ProviderSpec(
            "tavily",
            "Tavily",
            "TAVILY_API_KEYS",
            "TAVILY_API_KEY",
            re.compile(r"tvly-"),
            "tvly-...",
        ),
        ProviderSpec(
            "exa", "Exa", "EXA_API_KEYS", "EXA_API_KEY", re.compile(_UUID + "$", re.I), "a UUID"
        ),
        ProviderSpec(
            "brave",
            "Brave",
            "BRAVE_API_KEYS",
            "BRAVE_API_KEY",
            re.compile(r"BSA[A-Za-z0-9_-]{20,}$"),
            "BSA...",
        ),
        ProviderSpec(
            "serper",
            "Serper",
            "SERPER_API_KEYS",
            "SERPER_API_KEY",
            re.compile(r"[0-9a-f]{40}$"),
            "40 hex digits",
        ),
        ProviderSpec(
            "searxng", "SearXNG", "SEARXNG_URL", "SEARXNG_URL", None, "http://...", url_keyed=True
        ),
    )
}

#: The providers' names, in the default chain order.
NAMES: tuple[str, ...] = tuple(PROVIDERS)

#: The provider objects loaded so far, by name.
_loaded: dict[str, Provider] = {}


class UnknownProvider(KeyError):
    """A name that is no provider's (a `KeyError` whose text is the whole sentence)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown provider"


def spec(name: str) -> ProviderSpec | None:
    """The table row for `name` (`None`: no such provider)."""
    return PROVIDERS.get(name)


def looks_like(key: str) -> str | None:
    """The provider `key` plainly belongs to, by its shape (`None`: no provider's)."""
    for row in PROVIDERS.values():
        if row.key_shape is not None and row.key_shape.match(key):
            return row.name
    return None


def lookup(name: str) -> Provider:
    """The provider object called `name`, loaded from `searchfuse.providers.<name>`
    on first use: the one way to find a provider by its name.

    Raises [`UnknownProvider`][searchfuse.providers.UnknownProvider] (a
    `KeyError`) when `name` is not a provider, and `LookupError` when its
    module is not part of this version of searchfuse.
    """
    found = _loaded.get(name) if isinstance(name, str) else None
    if found is not None:
        return found
    if not isinstance(name, str) or name not in PROVIDERS:
        raise UnknownProvider(f"unknown provider {name!r}: use one of {', '.join(NAMES)}")
    try:
        module = importlib.import_module(f"searchfuse.providers.{name}")
    except ModuleNotFoundError:
        raise LookupError(f"the {PROVIDERS[name].title} provider is not in this version") from None
    for value in vars(module).values():
        if isinstance(value, Provider) and not isinstance(value, type) and value.name == name:
            _loaded[name] = value
            return value
    raise LookupError(f"searchfuse.providers.{name} defines no provider named {name!r}")
