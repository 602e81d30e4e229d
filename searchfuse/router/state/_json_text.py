"""The JSON store's text: one line per record, made again only for records that changed."""

from __future__ import annotations

import binascii
import json
import math
import operator
import os
import struct
import sys
from collections.abc import Callable
from typing import Any

from searchfuse.router.state._codec import pack_slots, state_to_json
from searchfuse.router.state._records import State, copied
from searchfuse.router.state._ring import Ring

__all__ = ["StateText", "copy_state", "encode", "read_all"]


#: One encoder for every entry (`json.dumps(..., sort_keys=True)` makes a new one per call).
encode = json.JSONEncoder(sort_keys=True).encode
#: A string as JSON (what `json.dumps` uses for one).
_quote = json.encoder.encode_basestring_ascii


class _Encoded(str):
    """A value already written as JSON."""


def _encode_value(value: Any) -> str:
    """`value` as JSON, as `json.dumps(value, sort_keys=True)` writes it; a
    string, a number or null without a trip through the encoder."""
    kind = type(value)
    if kind is _Encoded:
        return str(value)
    if kind is str:
        return _quote(value)
    if value is None:
        return "null"
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    if kind is dict and not value:
        return "{}"
    return encode(value)


def _encode_entry(value: Any) -> str:
    """One entry of a section as JSON; a pacing log's times (base64, which needs
    no escaping) are put in as they are, not scanned by the encoder."""
    if type(value) is dict and len(value) == 3:
        size, seq, times = value.get("size"), value.get("seq"), value.get("times")
        if (
            type(size) is int
            and type(seq) is int
            and type(times) is str
            and times.isascii()
            and '"' not in times
            and "\\" not in times
        ):
            return f'{{"seq": {seq}, "size": {size}, "times": "{times}"}}'
    return encode(value)


def _line(name: str, value: Any) -> bytes:
    """One entry of a section, as a line of the file."""
    return f"  {_quote(str(name))}: {_encode_entry(value)}".encode()


def _ring_line(name: str, size: int, seq: int, times: bytes | bytearray) -> bytes:
    """A pacing log's line, its times (base64) put in as they are."""
    head = f'  {_quote(name)}: {{"seq": {seq}, "size": {size}, "times": "'.encode()
    return b"".join((head, times, b'"}'))


def _dumps(data: dict[str, Any], lines_of: dict[str, dict[str, bytes]] | None = None) -> bytes:
    """`data` as text with one line per key, account, pacing log and cache entry.

    As readable as an indented dump, but every line is written by the C
    encoder (`indent=` makes `json` fall back to pure Python, which costs
    milliseconds per search once pacing logs hold a few thousand times).
    `lines_of` holds the lines of some sections, already made. The pieces are
    joined once: pacing logs make the text tens of kilobytes.
    """
    parts = [b"{\n"]
    for name, value in sorted(data.items()):
        if len(parts) > 1:
            parts.append(b",\n")
        lines = lines_of.get(name) if lines_of else None
        if lines is None and isinstance(value, dict) and value:
            lines = {str(k): _line(k, v) for k, v in value.items()}
        if lines:
            parts.append(f" {_quote(name)}: {{\n".encode())
            for i, k in enumerate(sorted(lines)):
                if i:
                    parts.append(b",\n")
                parts.append(lines[k])
            parts.append(b"\n }")
        else:
            parts.append(f" {_quote(name)}: {_encode_value(value)}".encode())
    parts.append(b"\n}\n")
    return b"".join(parts)


def _same_record(a: Any, b: Any) -> bool:
    """`a == b` for two key or account records (plain dataclasses: their fields
    are their `__dict__`), compared in C rather than field by field."""
    return type(a) is type(b) and a.__dict__ == b.__dict__


def _same_ring(a: Ring, b: Ring) -> bool:
    return a.size == b.size and a.seq == b.seq and (a.slots is b.slots or a.slots == b.slots)


#: The sections whose entries `JsonFileStore` remembers as lines, and how it
#: tells that a record is unchanged.
_SECTIONS: tuple[tuple[str, Callable[[Any, Any], bool]], ...] = (
    ("keys", _same_record),
    ("accounts", _same_record),
    ("rings", _same_ring),
    ("tallies", operator.eq),
)


#: The most slots a save patches in a pacing log's packed times (more: packed anew).
_PATCH_MAX = 16
_SLOT = struct.Struct("<d")


def _added_slots(old: Ring, ring: Ring) -> set[int] | None:
    """The slots in which `ring` differs from `old` when it is `old` plus a few
    events; `None` when it is anything else (more events, a resize, a repair)."""
    added = ring.seq - old.seq
    grown = len(ring.slots) - len(old.slots)
    if ring.size != old.size or not 0 < added <= _PATCH_MAX or not 0 <= grown <= _PATCH_MAX:
        return None
    changed = {(old.seq + i) % ring.size for i in range(added)}
    if any(i >= len(ring.slots) for i in changed):
        return None
    expected = old.slots + [None] * grown
    for i in changed:
        expected[i] = ring.slots[i]
    return changed if expected == ring.slots else None


class _PackedLog:
    """A pacing log as last saved: the log, its times packed as `pack_slots`
    packs them, and those bytes in base64 (what the file holds).

    A log of a high rate holds thousands of times and a search adds one:
    packing and encoding it whole was most of the cost of a save. `patch`
    changes only the bytes and base64 groups of the slots that changed.
    """

    __slots__ = ("b64", "buf", "ring")

    def __init__(self, ring: Ring) -> None:
        self.ring = ring
        self.buf = bytearray(pack_slots(ring.slots))
        self.b64 = bytearray(binascii.b2a_base64(self.buf, newline=False))

    def patch(self, ring: Ring) -> bool:
        """Make this `ring`'s, patching; False (nothing changed) when it cannot."""
        changed = None if sys.byteorder != "little" else _added_slots(self.ring, ring)
        if changed is None:
            return False
        buf, b64 = self.buf, self.b64
        tail = len(buf) // 3 * 3  # the old last whole group: what follows is made again
        buf.extend(bytes(8 * (len(ring.slots) - len(self.ring.slots))))
        for i in changed:
            t = ring.slots[i]
            _SLOT.pack_into(buf, 8 * i, 0.0 if t is None else t)
        del b64[tail // 3 * 4 :]
        b64 += binascii.b2a_base64(buf[tail:], newline=False)
        for i in changed:
            # The whole groups of three bytes that hold slot i (those in the tail: done).
            lo, hi = 8 * i // 3 * 3, min((8 * i + 10) // 3 * 3, tail)
            if lo < hi:
                b64[lo // 3 * 4 : hi // 3 * 4] = binascii.b2a_base64(buf[lo:hi], newline=False)
        self.ring = ring
        return True


class StateText:
    """Makes a JSON store's file text, remembering each record's line (per section,
    per name: the record last saved and its line), each pacing log's packed
    times and the event log's text."""

    def __init__(self) -> None:
        self._lines: dict[str, dict[str, tuple[Any, bytes]]] = {}
        self._events_text: tuple[list[dict[str, Any]] | None, str] = (None, "")
        #: Per pacing log: the log at the last save, packed (see `_PackedLog`).
        self._packed: dict[str, _PackedLog] = {}

    def text(self, state: State, cache: dict[str, Any]) -> bytes:
        """The file's text for `state` (never changed after), made again only
        for the keys, accounts and pacing logs that changed since the last save:
        a search changes one key of many, and packing a pacing log is most of
        the cost of the text."""
        changed = State(month=state.month, hold_until=state.hold_until, hold_key=state.hold_key)
        for section, same in _SECTIONS:
            before = self._lines.get(section, {})
            target = getattr(changed, section)
            for name, record in getattr(state, section).items():
                hit = before.get(name)
                if hit is None or not same(hit[0], record):
                    target[name] = record
        rings, changed.rings = changed.rings, {}  # packed here, patched where they can be
        data = state_to_json(changed)
        ring_lines, changed.rings = self._pack_rings(rings, state.rings), rings
        if cache:
            data["cache"] = cache
        if state.events:
            # Written again only when an event came (the log is a new list then).
            if self._events_text[0] is not state.events:
                self._events_text = (state.events, _Encoded(encode(state.events)))
            data["events"] = self._events_text[1]
        lines_of: dict[str, dict[str, bytes]] = {}
        remembered: dict[str, dict[str, tuple[Any, bytes]]] = {}
        for section, _ in _SECTIONS:
            before = self._lines.get(section, {})
            made, fresh = data[section], getattr(changed, section)
            lines, kept = {}, {}
            for name, record in getattr(state, section).items():
                if name not in fresh:
                    line = before[name][1]
                elif section == "rings":
                    line = ring_lines[name]
                else:
                    line = _line(name, made[name])
                lines[str(name)] = line
                kept[name] = (record, line)
            lines_of[section], remembered[section] = lines, kept
        self._lines = remembered
        return _dumps(data, lines_of)

    def _pack_rings(self, changed: dict[str, Ring], names: Any) -> dict[str, bytes]:
        """The lines of the changed pacing logs, as `state_to_json` writes them,
        each packed by patching its last save's bytes where it can; `names`:
        every log in the state."""
        out: dict[str, bytes] = {}
        packed = {name: kept for name, kept in self._packed.items() if name in names}
        for name, ring in changed.items():
            log = packed.get(name)
            if log is None or not log.patch(ring):
                log = packed[name] = _PackedLog(ring)
            out[name] = _ring_line(name, ring.size, ring.seq, log.b64)
        self._packed = packed
        return out


# -- what the JSON store reads ----------------------------------------------------------


def copy_state(state: State) -> State:
    """A copy of `state` whose records a transaction may change freely."""
    return State(
        month=state.month,
        keys={fp: copied(ks) for fp, ks in state.keys.items()},
        accounts={name: copied(acc) for name, acc in state.accounts.items()},
        hold_until=state.hold_until,
        hold_key=state.hold_key,
        rings={name: r.copy() for name, r in state.rings.items()},
        tallies=dict(state.tallies),
        # Never changed in place (a new event makes a new list): shared.
        events=state.events,
    )


def read_all(fd: int, size: int = 0) -> bytes:
    """Everything in regular file `fd`, just opened (`size`: its expected size)."""
    want = size + 4096
    chunk = os.read(fd, want)
    if len(chunk) < want:  # a regular file reads short only at its end
        return chunk
    chunks = [chunk]
    while chunk:
        chunk = os.read(fd, 1 << 16)
        chunks.append(chunk)
    return b"".join(chunks)
