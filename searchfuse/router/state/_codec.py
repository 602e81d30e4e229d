"""The JSON form of the state: the JSON file store, and quota.json imported into a database."""

from __future__ import annotations

import array
import base64
import binascii
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from searchfuse._secrets import fingerprint
from searchfuse.router.state._budgets import Tally, is_label
from searchfuse.router.state._records import AccountUsage, KeyState, State
from searchfuse.router.state._ring import Ring
from searchfuse.router.state._values import (
    BadValue,
    _parse,
    _warn,
    account_from_fields,
    account_to_fields,
    key_from_fields,
    key_to_fields,
    optional_number,
    optional_text,
)

__all__ = ["STATE_VERSION", "looks_like_state", "state_from_json", "state_to_json"]

STATE_VERSION = 2


def state_to_json(state: State) -> dict[str, Any]:
    """The state as the JSON file store writes it."""
    keys = {}
    for fp, ks in sorted(state.keys.items()):
        flat = key_to_fields(ks)
        usage = {n: flat.pop(n) for n in ("key_usage", "key_limit", "search_usage")}
        flat["last_usage"] = usage if ks.last_usage is not None else None
        keys[fp] = flat
    out = {
        "format_version": STATE_VERSION,
        "month": state.month,
        "keys": keys,
        "accounts": {n: account_to_fields(a) for n, a in sorted(state.accounts.items())},
        "hold_until": state.hold_until,
        "hold_key": state.hold_key,
        "rings": {
            n: {"size": r.size, "seq": r.seq, "times": pack_times(r.slots)}
            for n, r in sorted(state.rings.items())
        },
        "tallies": {
            n: {"period": t.period, "used": t.used, "expires": t.expires}
            for n, t in sorted(state.tallies.items())
        },
    }
    if state.events:
        out["events"] = state.events
    return out


def looks_like_state(data: Any) -> bool:
    """True for a JSON object searchfuse wrote as state (`month` text, `keys` object)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("month"), str)
        and isinstance(data.get("keys", {}), dict)
        and isinstance(data.get("accounts", {}), dict)
    )


#: What searchfuse names a key by in state: 12 hex digits of its SHA-256.
_FINGERPRINT = re.compile(r"[0-9a-f]{12}")


def record_id(stored: object) -> str:
    """The id a stored key record goes by: its fingerprint.

    Older state (the skill's `quota.json`, hand-made files) names records by
    the raw key: such a record is kept under the key's fingerprint, so it still
    applies to its key and the raw key is never written back or logged.
    """
    text = str(stored)
    if len(text) > 12 and not _FINGERPRINT.fullmatch(text):
        return fingerprint(text)
    return text


def names_raw_keys(data: dict[str, Any]) -> bool:
    """Whether state `data` names a key record by its raw key (see `record_id`)."""
    return any(record_id(stored) != str(stored) for stored in data.get("keys", {}))


def _hold_key(stored: str | None) -> str | None:
    return None if stored is None else record_id(stored)


def state_from_json(data: Any, warn: Callable[[str], None] = _warn) -> State:
    """Parse what `state_to_json` wrote (format 1 or 2).

    Raises `ValueError` when `data` is not a state object at all; a bad
    value inside one is reset with a warning.
    """
    if not looks_like_state(data):
        raise ValueError("not a searchfuse state object")
    keys: dict[str, KeyState] = {}
    for stored, raw in data.get("keys", {}).items():
        fp = record_id(stored)
        if not isinstance(raw, dict):
            warn(f"key {fp}: not an object; reset")
            continue
        flat = dict(raw)
        usage = flat.pop("last_usage", None)
        if isinstance(usage, dict):
            flat.update({n: usage.get(n) for n in ("key_usage", "key_limit", "search_usage")})
        elif usage is not None:
            warn(f"key {fp}: last_usage is not an object; reset")
        keys[str(fp)] = key_from_fields(flat, f"key {fp}", warn)
    accounts: dict[str, AccountUsage] = {}
    for name, raw in data.get("accounts", {}).items():
        if not isinstance(raw, dict):
            warn(f"account {name}: not an object; reset")
            continue
        accounts[str(name)] = account_from_fields(raw, f"account {name}", warn)
    rings: dict[str, Ring] = {}
    rings_raw = data.get("rings")
    for name, raw in rings_raw.items() if isinstance(rings_raw, dict) else ():
        ring = _ring_from_json(raw)
        if ring is None:
            warn(f"pacing log {name}: malformed; reset")
        else:
            rings[str(name)] = ring
    return State(
        month=data["month"],
        keys=keys,
        accounts=accounts,
        hold_until=optional_number(data.get("hold_until"), "hold_until", warn),
        hold_key=_hold_key(optional_text(data.get("hold_key"), "hold_key", warn)),
        rings=rings,
        tallies=_tallies_from_json(data.get("tallies"), warn),
        # Each event is checked when read (`Store.events`); a damaged one is skipped.
        events=events if isinstance(events := data.get("events"), list) else [],
    )


def tally_from_fields(
    period: Any, used: Any, where: str, warn: Callable[[str], None], expires: Any = None
) -> Tally:
    """A stored budget tally; a bad one (its use, or a period that is no period's
    label) is reset to nothing used, with a warning. A bad expiry reads as none
    (the tally's next charge or refusal sets it again)."""
    number = optional_number(used, f"{where} used", warn)
    until = optional_number(expires, f"{where} expires", warn)
    if until is not None and not math.isfinite(until):
        until = None
    if not is_label(period) or number is None or number < 0 or not math.isfinite(number):
        warn(f"{where}: malformed; reset")
        return Tally(period if is_label(period) else "", 0.0, until)
    return Tally(period, number, until)


def _tallies_from_json(raw: Any, warn: Callable[[str], None]) -> dict[str, Tally]:
    out: dict[str, Tally] = {}
    for name, item in raw.items() if isinstance(raw, dict) else ():
        fields_ = item if isinstance(item, dict) else {}
        period, used, expires = (fields_.get(f) for f in ("period", "used", "expires"))
        out[str(name)] = tally_from_fields(period, used, f"budget {name}", warn, expires)
    return out


def pack_slots(slots: list[float | None]) -> bytes:
    """A pacing log's times as little-endian doubles (0.0: never used)."""
    packed: array.array[float]
    try:
        packed = array.array("d", slots)  # type: ignore[arg-type]  # None is checked by C
    except TypeError:
        packed = array.array("d", (0.0 if t is None else t for t in slots))
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def pack_times(slots: list[float | None]) -> str:
    """A pacing log's times as base64 of little-endian doubles (0.0: never used).

    A log holds up to `rpm` times; written as JSON numbers, each costs a float
    repr on every save (most of a search's cost at a thousand times), packed
    it costs one copy.
    """
    return base64.b64encode(pack_slots(slots)).decode("ascii")


def _unpack_times(text: Any) -> list[float | None] | None:
    """The times `pack_times` wrote, or `None` when `text` is not such a log."""
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    if len(raw) % 8:
        return None
    packed = array.array("d")
    packed.frombytes(raw)
    if sys.byteorder != "little":
        packed.byteswap()
    times: list[float | None] = []
    for t in packed.tolist():
        if not math.isfinite(t) or t < 0:
            return None
        times.append(t if t > 0 else None)
    return times


def _ring_from_json(raw: Any) -> Ring | None:
    if not isinstance(raw, dict):
        return None
    if "times" in raw:
        times = _unpack_times(raw.get("times"))
        if times is None:
            return None
        raw = {**raw, "slots": times}
    seq, slots = raw.get("seq"), raw.get("slots")
    size = raw.get("size", len(slots) if isinstance(slots, list) else None)
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        return None
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1_000_000:
        return None
    if not isinstance(slots, list) or len(slots) > size:
        return None
    try:
        parsed = [_parse("float?", t) for t in slots]
    except BadValue:
        return None
    return Ring(size, seq, parsed)
