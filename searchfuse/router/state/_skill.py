"""The original skill's `state/quota.json`: records listed by position, not named by key.

The skill kept one record per key of its keys file, in the file's order
(`{"month": ..., "keys": [{...}, {...}]}`). Position is all that ties a record
to its key, so its records (and the cooldowns in them) are taken over only when
the configured keys match them: as many keys as records, and every record that
names its key (`key`, `fingerprint` or `masked`) naming the key at its position.
Otherwise they are not used, and the reason says exactly why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from searchfuse._secrets import fingerprint

__all__ = ["SKILL_FORMAT", "KeySlot", "by_position", "is_positional"]

#: How the warnings name the format.
SKILL_FORMAT = "its keys are listed by position (the original skill's format)"
#: Fields by which a record may name its key; none of them is kept.
_NAMES = ("key", "fingerprint", "masked")


class KeySlot(NamedTuple):
    """A configured key as a positional record is matched against it (never the raw key)."""

    fingerprint: str
    masked: str


class _Entry(Protocol):
    @property
    def fingerprint(self) -> str: ...
    @property
    def masked(self) -> str: ...


def key_slots(entries: Iterable[_Entry]) -> list[KeySlot]:
    """The configured keys (`KeyEntry`s, in the keys file's order) as positions."""
    return [KeySlot(entry.fingerprint, entry.masked) for entry in entries]


def is_positional(data: Any) -> bool:
    """Whether `data` is state in the skill's format: a `month` and a list of records."""
    return isinstance(data, dict) and "month" in data and isinstance(data.get("keys"), list)


def _tail(masked: str) -> str:
    return masked[-4:]


def _names_another(record: dict[str, Any], slot: KeySlot) -> str | None:
    """How `record` names a key other than `slot`'s, if it does."""
    key, fp, masked = (record.get(name) for name in _NAMES)
    if isinstance(key, str) and fingerprint(key) != slot.fingerprint:
        return f"key {fingerprint(key)}"
    if isinstance(fp, str) and fp != slot.fingerprint:
        return f"key {fp[:12]}"
    if isinstance(masked, str) and _tail(masked) != _tail(slot.masked):
        return f"a key ending {_tail(masked)!r}"
    return None


def by_position(data: dict[str, Any], order: Sequence[KeySlot] | None) -> tuple[Any, str]:
    """`data` with its records named by the fingerprints of the configured keys
    `order` (in the keys file's order), and how they were matched; or `None` and
    exactly why they cannot be."""
    records: list[Any] = data["keys"]
    if order is None:
        return None, f"{SKILL_FORMAT}, and no configured keys were given to match them to"
    if len(records) != len(order):
        return None, (
            f"{SKILL_FORMAT}: it has {len(records)} record(s) and the configuration "
            f"{len(order)} key(s), so which record belongs to which key cannot be known"
        )
    named = 0
    keys: dict[str, Any] = {}
    for i, (record, slot) in enumerate(zip(records, order, strict=True), 1):
        if record is None:
            continue
        if not isinstance(record, dict):
            return None, f"{SKILL_FORMAT}, and its record {i} is not an object"
        other = _names_another(record, slot)
        if other is not None:
            return None, (
                f"{SKILL_FORMAT}, and its record {i} is for {other} while the configuration's "
                f"key {i} is {slot.masked}: the keys are in another order, or other keys"
            )
        named += any(isinstance(record.get(name), str) for name in _NAMES)
        keys[slot.fingerprint] = {k: v for k, v in record.items() if k not in _NAMES}
    how = f"{len(records)} record(s) for as many configured keys, in order" + (
        f"; the {named} that name their key agree" if named else ""
    )
    return {**data, "keys": keys}, how
