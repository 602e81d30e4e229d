"""Key records and their validation: what one entry of a keys file (or the environment,
or `Router(keys=...)`) may hold, and the v2 text a migrated file is written as."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchfuse._secrets import fingerprint, mask, redact
from searchfuse.errors import ConfigError
from searchfuse.providers._prices import key_price
from searchfuse.providers._registry import PROVIDERS
from searchfuse.router import _providers
from searchfuse.router._keytext import check_key
from searchfuse.router._rates import check_rate, check_rpm, key_rate
from searchfuse.router.policy import DEFAULT_COOLDOWN_MINUTES

FORMAT_VERSION = 2

_KNOWN_TOP = {"format_version", "cooldown_minutes", "keys", "providers"}
_KNOWN_ITEM = {
    "key",
    "account",
    "source",
    "notes",
    "disabled",
    "rpm",
    "provider",
    "url",
    "rate",
    "price",
}


def _shown(value: Any) -> str:
    """A value from the user's file, quoted in an error: short, and with anything key-like masked
    (a key pasted into the wrong field must not end up in logs)."""
    try:
        text = json.dumps(value, ensure_ascii=True, default=repr)
    except (ValueError, RecursionError):
        text = type(value).__name__
    text = redact(text, ())
    return text if len(text) <= 60 else text[:59] + "…"


@dataclass(frozen=True)
class KeyEntry:
    """One API key with the account it belongs to. `repr` never shows the key."""

    key: str = field(repr=False)
    account: str | None = None
    notes: str = ""
    #: Set in the config to keep a key out of rotation without deleting it.
    disabled: bool = False
    #: Fields searchfuse does not know (kept when a legacy file is migrated).
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: Requests per minute this key may send (`None`: `SEARCHFUSE_RPM`, else
    #: Tavily's published limit for the kind of key, see `key_rpm`).
    rpm: int | None = None
    #: The provider the key belongs to (`"tavily"` unless the configuration says).
    provider: str = _providers.DEFAULT
    #: Its request rate as written (`"10/s"`, `"100/min"`; `None`: `rpm`, else the
    #: provider's published rate, see `key_rate`).
    rate: str | None = None
    #: USD per credit (or per request) for budgets in `usd` (`None`: the list price).
    price: float | None = None

    # Computed once: selection reads them for every key on every search.
    @functools.cached_property
    def fingerprint(self) -> str:
        """A short hash identifying the key in state files and logs."""
        return fingerprint(self.key)

    @functools.cached_property
    def masked(self) -> str:
        """The key as people see it: `tvly-dev-…a1b2`."""
        return mask(self.key)

    @functools.cached_property
    def account_id(self) -> str:
        """The account whose plan this key draws on (the key itself when unknown)."""
        return self.account or f"key:{self.fingerprint}"

    def __repr__(self) -> str:
        flag = ", disabled" if self.disabled else ""
        named = f", provider={self.provider!r}" if self.provider != _providers.DEFAULT else ""
        return (
            f"KeyEntry({self.masked}{named}, account={self.account!r}, notes={self.notes!r}{flag})"
        )


@dataclass(frozen=True)
class Config:
    """The router's configuration: its keys, the fallback cooldown, and where it came from."""

    keys: tuple[KeyEntry, ...]
    cooldown_minutes: float = DEFAULT_COOLDOWN_MINUTES
    source: str = "<memory>"
    path: Path | None = None
    legacy: bool = False
    #: Top-level fields searchfuse does not know (kept when a legacy file is migrated).
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: The chain's order as configured (`()`: the order in which `keys` names providers).
    order: tuple[str, ...] = ()

    @property
    def providers(self) -> tuple[str, ...]:
        """The chain: the providers that serve, in the order they are tried."""
        return self.order or tuple(dict.fromkeys(entry.provider for entry in self.keys))

    def __repr__(self) -> str:
        return (
            f"Config(keys=[{', '.join(k.masked for k in self.keys)}], "
            f"cooldown_minutes={self.cooldown_minutes}, source={self.source!r})"
        )


def _check_text(value: Any, source: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(
            source,
            where,
            f"expected text, got {type(value).__name__}",
            "write a string or remove it",
        )
    return value


def _cooldown(value: Any, source: str) -> float:
    if value is None:
        return DEFAULT_COOLDOWN_MINUTES
    # bool is an int in Python; "true" minutes is a mistake, not 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            source,
            "cooldown_minutes",
            f"expected a number of minutes, got {_shown(value)}",
            "write a number such as 0.5 or 1",
        )
    try:
        minutes = float(value)
    except OverflowError:
        minutes = math.inf
    if not math.isfinite(minutes * 60.0) or minutes < 0:
        raise ConfigError(
            source,
            "cooldown_minutes",
            f"{value} is not a usable number of minutes",
            "write a finite number >= 0, such as 0.5",
        )
    return minutes


def key_rpm(entry: KeyEntry, environ: Mapping[str, str] | None = None) -> int:
    """The requests per minute the router allows a Tavily `entry`: its `rpm` in the keys
    file, else `SEARCHFUSE_RPM`, else Tavily's limit (100 for `tvly-dev-` keys,
    1000 for the others). A malformed `SEARCHFUSE_RPM` is a
    [`ConfigError`][searchfuse.errors.ConfigError]. (`key_rate` gives any key's rate.)"""
    return key_rate(entry, environ).requests


def parse_config(data: Any, source: str = "<memory>", path: Path | None = None) -> Config:
    """Validate decoded JSON and return a [`Config`][searchfuse.router.Config] (`legacy` tells if
    it needs migrating).

    Raises [`ConfigError`][searchfuse.errors.ConfigError] naming `source`, the field and the fix.
    """
    data, raw_keys, legacy = _top(data, source)
    entries: list[KeyEntry] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(raw_keys):
        where = f"keys[{i}]"
        entry, old_style = _entry(item, source, where)
        legacy = legacy or old_style
        if entry.key in seen:
            raise ConfigError(
                source,
                where,
                f"duplicate of keys[{seen[entry.key]}] ({entry.masked})",
                "remove one of the two entries",
            )
        seen[entry.key] = i
        entries.append(entry)
    cooldown = _cooldown(data.get("cooldown_minutes"), source)
    extra = {k: v for k, v in data.items() if k not in _KNOWN_TOP}
    used = [entry.provider for entry in entries]
    order = _providers.check_order(data.get("providers"), used, source)
    return Config(
        tuple(entries),
        cooldown,
        source=source,
        path=path,
        legacy=legacy,
        extra=extra,
        order=order if "providers" in data else (),
    )


def _top(data: Any, source: str) -> tuple[dict[str, Any], list[Any], bool]:
    """The file's top level checked: the object, its list of keys, and whether it is legacy."""
    legacy = False
    if isinstance(data, list):
        data = {"keys": data}
        legacy = True
    if not isinstance(data, dict):
        raise ConfigError(
            source,
            None,
            f"expected a JSON object, got {type(data).__name__}",
            'start from config/keys.example.json: {"format_version": 2, "keys": [...]}',
        )
    version = data.get("format_version")
    if version is None:
        legacy = True
    elif version != FORMAT_VERSION:
        raise ConfigError(
            source,
            "format_version",
            f"unknown format version {_shown(version)}",
            f"use {FORMAT_VERSION}, or remove the field to have the file migrated",
        )
    if "keys" not in data:
        raise ConfigError(
            source, "keys", "missing", 'add "keys": [{"key": "tvly-...", "account": "..."}]'
        )
    raw_keys = data["keys"]
    if not isinstance(raw_keys, list):
        raise ConfigError(
            source,
            "keys",
            f"expected a list, got {type(raw_keys).__name__}",
            'write "keys": [{"key": "tvly-..."}]',
        )
    if not raw_keys:
        raise ConfigError(
            source, "keys", "the list is empty", "add at least one key from your Tavily dashboard"
        )
    _refuse_repeated(data, source, None)
    return data, raw_keys, legacy


def _entry(item: Any, source: str, where: str) -> tuple[KeyEntry, bool]:
    """One item of `keys` checked: the entry, and whether it is written the legacy way."""
    old_style = False
    _refuse_repeated(item, source, where)
    if isinstance(item, str):
        old_style = True
        entry = KeyEntry(check_key(item, source, where))
    elif isinstance(item, dict):
        provider = _providers.check_provider(item.get("provider"), source, f"{where}.provider")
        key = _item_key(item, provider, source, where)
        if "source" in item and "account" not in item:
            old_style = True
        named = "account" if "account" in item else "source"
        account = _check_text(item.get(named), source, f"{where}.{named}")
        notes = _check_text(item.get("notes"), source, f"{where}.notes") or ""
        disabled = item.get("disabled", False)
        if not isinstance(disabled, bool):
            raise ConfigError(
                source,
                f"{where}.disabled",
                f"expected true or false, got {_shown(disabled)}",
                "write true to keep the key out of rotation, or remove the field",
            )
        extra = {k: v for k, v in item.items() if k not in _KNOWN_ITEM}
        rpm = check_rpm(item.get("rpm"), source, f"{where}.rpm")
        rate = check_rate(item.get("rate"), source, f"{where}.rate")
        price = key_price(item.get("price"), source, f"{where}.price")
        entry = KeyEntry(
            key, account or None, notes, disabled, extra, rpm, provider, rate, price=price
        )
    else:
        raise ConfigError(
            source,
            where,
            f"expected an object or a key string, got {type(item).__name__}",
            'write {"key": "tvly-...", "account": "..."}',
        )
    return entry, old_style


def _item_key(item: Mapping[str, Any], provider: str, source: str, where: str) -> str:
    """The entry's key: `key`, or a url-keyed provider's `url` (its instance's address)."""
    spec = PROVIDERS[provider]
    if spec.url_keyed:
        return _providers.check_url(
            item.get("url", item.get("key")), provider, source, f"{where}.url"
        )
    _providers.check_no_url(item, provider, source, where)
    if "key" not in item:
        raise ConfigError(source, f"{where}.key", "missing", f'add "key": "{spec.key_example}"')
    key = check_key(item["key"], source, f"{where}.key")
    _providers.check_owner(key, provider, source, f"{where}.key")
    return key


class _Object(dict[str, Any]):
    """A JSON object that remembers the names it held more than once."""

    repeated: tuple[str, ...] = ()


def _pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        names = [name for name, _ in pairs]
        obj.repeated = tuple(sorted({n for n in names if names.count(n) > 1}))
    return obj


def _refuse_repeated(obj: Any, source: str, where: str | None) -> None:
    """A field written twice in one object: JSON parsers keep the last one silently."""
    repeated = getattr(obj, "repeated", ())
    if repeated:
        name = repeated[0]
        raise ConfigError(
            source,
            f"{where}.{name}" if where else name,
            f'"{name}" appears more than once in the same object (only the last would count)',
            f'keep one "{name}" (a second key goes in its own entry)',
        )


def keys_from(value: Sequence[str | KeyEntry] | Mapping[str, Sequence[Any]] | Config) -> Config:
    """A [`Config`][searchfuse.router.Config] from what a caller handed the `Router`
    constructor: a list of keys (Tavily's), or providers' names mapped to their keys
    in chain order (`{"tavily": [...], "exa": [...], "searxng": ["http://..."]}`)."""
    if isinstance(value, Config):
        return value
    if isinstance(value, str):
        raise TypeError("Router() takes a list of keys, not one string: Router([key])")
    order: list[str] | None = None
    raw: Sequence[Any]
    if isinstance(value, Mapping):
        raw, order = _providers.items_of(value)
    else:
        raw = value
    items = [_as_item(item) for item in raw]
    data: dict[str, Any] = {"format_version": FORMAT_VERSION, "keys": items}
    if order is not None:
        data["providers"] = order
    return parse_config(data, "Router(keys=...)")


def _as_item(item: Any) -> Any:
    """A `KeyEntry` as the keys-file item it came from (anything else as it is)."""
    named = None
    if isinstance(item, Mapping) and isinstance(item.get("key"), KeyEntry):
        named, item = item.get("provider"), item["key"]  # Router({"exa": [KeyEntry(...)]})
    if not isinstance(item, KeyEntry):
        return item
    provider = named or item.provider
    made = {
        "key": item.key,
        "account": item.account,
        "notes": item.notes,
        "disabled": item.disabled,
        "rpm": item.rpm,
        "provider": provider,
        "rate": item.rate,
        "price": item.price,
    }
    if PROVIDERS[provider].url_keyed:
        made["url"] = made.pop("key")
    return made
