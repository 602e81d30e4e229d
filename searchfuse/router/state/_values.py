"""Stored values, typed: the field kinds of each record, and reading them back safely.

Stores keep records as columns, hash fields or JSON; whatever a store hands
back is parsed against these kinds, and a bad value is reset with a warning,
never trusted and never a crash.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

from searchfuse._secrets import redact
from searchfuse.router.state._records import AccountUsage, KeyState, KeyUsage

__all__ = [
    "ACCOUNT_FIELDS",
    "KEY_FIELDS",
    "BadValue",
    "account_from_fields",
    "account_to_fields",
    "key_from_fields",
    "key_to_fields",
    "optional_number",
    "optional_text",
]

log = logging.getLogger("searchfuse.state")

#: Field kinds of each record, for stores that keep them as columns or strings.
KEY_FIELDS: dict[str, str] = {
    "account": "str?",
    "disabled": "bool",
    "cooldown_until": "float?",
    "cooldown_reason": "str?",
    "cooldown_started": "float?",
    "exhausted": "bool",
    "last_error": "str?",
    "last_error_at": "float?",
    "last_status": "int?",
    "key_usage": "float?",
    "key_limit": "float?",
    "search_usage": "float?",
    "last_sync_at": "float?",
    "local_credits": "float",
    "searches": "int",
    "last_used_at": "float?",
    "usage_blocked_until": "float?",
}
ACCOUNT_FIELDS: dict[str, str] = {
    "current_plan": "str?",
    "plan_usage": "float?",
    "plan_limit": "float?",
    "paygo_usage": "float?",
    "paygo_limit": "float?",
    "synced_at": "float?",
    "local_credits": "float",
}
_DEFAULTS = {"bool": False, "float": 0.0, "int": 0}
_MAX_TEXT = 2000


class BadValue(ValueError):
    """A stored value of the wrong type or out of range."""


def _parse(kind: str, value: Any) -> Any:
    """`value` as `kind` (accepting the text form Redis stores), or `BadValue`."""
    # The common case first: a typed column already holds the right type.
    cls = type(value)
    if cls is float and kind[0] == "f" and math.isfinite(value) and abs(value) <= 1e15:
        return value
    if cls is int and kind[0] == "i" and abs(value) <= 2**62:
        return value
    if cls is str and kind[0] == "s" and value and len(value) <= _MAX_TEXT:
        # Text read from a store or an imported file may hold a key (a legacy
        # last_error "401: invalid key tvly-..."): it is kept only redacted.
        return redact(value, ())
    if value is None or value == "":
        if kind.endswith("?"):
            return None
        raise BadValue("missing")
    base = kind.rstrip("?")
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if base == "str":
        if not isinstance(value, str):
            raise BadValue(f"expected text, got {type(value).__name__}")
        return redact(value[:_MAX_TEXT], ())
    if base == "bool":
        if isinstance(value, bool):
            return value
        if value in (0, 1, "0", "1"):
            return bool(int(value))
        raise BadValue(f"expected 0 or 1, got {_shown(value)}")
    if isinstance(value, bool):
        raise BadValue(f"expected a number, got {_shown(value)}")
    try:
        number = float(value) if isinstance(value, str) else value
    except ValueError:
        raise BadValue(f"expected a number, got {_shown(value)}") from None
    if not isinstance(number, int | float) or not math.isfinite(number):
        raise BadValue(f"expected a finite number, got {_shown(value)}")
    if base == "int":
        if number != int(number) or abs(number) > 2**62:
            raise BadValue(f"expected an integer, got {_shown(value)}")
        return int(number)
    if abs(number) > 1e15:
        raise BadValue(f"out of range: {_shown(value)}")
    return float(number)


def _shown(value: Any) -> str:
    """A stored value as a warning may quote it: short, and any key in it masked
    (a hand-edited record may hold a raw key where a flag belongs)."""
    return redact(repr(value)[:60], ())


def _typed(
    spec: Mapping[str, str], raw: Mapping[str, Any], where: str, warn: Callable[[str], None]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind in spec.items():
        if name not in raw:
            continue
        try:
            out[name] = _parse(kind, raw[name])
        except BadValue as exc:
            warn(f"{where}: {name} {exc}; reset")
            if not kind.endswith("?"):
                out[name] = _DEFAULTS[kind]
    return out


_WARNED: set[str] = set()


def _warn(message: str) -> None:
    # Once per message: a bad stored value is read on every search until it is rewritten.
    if message in _WARNED:
        return
    if len(_WARNED) < 1000:
        _WARNED.add(message)
    log.warning("router state: %s", message)


def key_from_fields(
    raw: Mapping[str, Any], where: str = "key", warn: Callable[[str], None] = _warn
) -> KeyState:
    """A `KeyState` from flat stored fields; a bad value is reset with a warning."""
    values = _typed(KEY_FIELDS, raw, where, warn)
    figures = {n: values.pop(n, None) for n in ("key_usage", "key_limit", "search_usage")}
    usage = KeyUsage(**figures) if any(v is not None for v in figures.values()) else None
    return KeyState(last_usage=usage, **values)


def key_to_fields(ks: KeyState) -> dict[str, Any]:
    """The flat fields a store keeps for a `KeyState`."""
    out: dict[str, Any] = {}
    usage = ks.last_usage or KeyUsage()
    for name in KEY_FIELDS:
        if name in ("key_usage", "key_limit", "search_usage"):
            out[name] = getattr(usage, name)
        else:
            out[name] = getattr(ks, name)
    return out


def account_from_fields(
    raw: Mapping[str, Any], where: str = "account", warn: Callable[[str], None] = _warn
) -> AccountUsage:
    """An `AccountUsage` from stored fields; a bad value is reset with a warning."""
    return AccountUsage(**_typed(ACCOUNT_FIELDS, raw, where, warn))


def account_to_fields(acc: AccountUsage) -> dict[str, Any]:
    """The fields a store keeps for an `AccountUsage`."""
    return {name: getattr(acc, name) for name in ACCOUNT_FIELDS}


def optional_number(value: Any, where: str, warn: Callable[[str], None] = _warn) -> float | None:
    """A stored optional number, `None` (with a warning) when it is not one."""
    try:
        result: float | None = _parse("float?", value)
    except BadValue as exc:
        warn(f"{where} {exc}; reset")
        return None
    return result


def optional_text(value: Any, where: str, warn: Callable[[str], None] = _warn) -> str | None:
    """A stored optional text, `None` (with a warning) when it is not one."""
    try:
        result: str | None = _parse("str?", value)
    except BadValue as exc:
        warn(f"{where} {exc}; reset")
        return None
    return result
