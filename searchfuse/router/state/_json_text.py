"""The JSON store's text: one line per record, made again only for records that changed."""

from __future__ import annotations

import json
import math
import operator
import os
from collections.abc import Callable
from typing import Any

from searchfuse.router.state._codec import state_to_json
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


def _line(name: str, value: Any) -> str:
    """One entry of a section, as a line of the file."""
    return f"  {_quote(str(name))}: {_encode_entry(value)}"


def _dumps(data: dict[str, Any], lines_of: dict[str, dict[str, str]] | None = None) -> str:
    """`data` as text with one line per key, account, pacing log and cache entry.

    As readable as an indented dump, but every line is written by the C
    encoder (`indent=` makes `json` fall back to pure Python, which costs
    milliseconds per search once pacing logs hold a few thousand times).
    `lines_of` holds the lines of some sections, already made.
    """
    out = []
    for name, value in sorted(data.items()):
        lines = lines_of.get(name) if lines_of else None
        if lines is None and isinstance(value, dict) and value:
            lines = {str(k): _line(k, v) for k, v in value.items()}
        if lines:
            inner = ",\n".join(lines[k] for k in sorted(lines))
            out.append(f" {_quote(name)}: {{\n{inner}\n }}")
        else:
            out.append(f" {_quote(name)}: {_encode_value(value)}")
    return "{\n" + ",\n".join(out) + "\n}\n"


def _same_ring(a: Ring, b: Ring) -> bool:
    return a.size == b.size and a.seq == b.seq and a.slots == b.slots


#: The sections whose entries `JsonFileStore` remembers as lines, and how it
#: tells that a record is unchanged.
_SECTIONS: tuple[tuple[str, Callable[[Any, Any], bool]], ...] = (
    ("keys", operator.eq),
    ("accounts", operator.eq),
    ("rings", _same_ring),
    ("tallies", operator.eq),
)


class StateText:
    """Makes a JSON store's file text, remembering each record's line (per section,
    per name: the record last saved and its line) and the event log's text."""

    def __init__(self) -> None:
        self._lines: dict[str, dict[str, tuple[Any, str]]] = {}
        self._events_text: tuple[list[dict[str, Any]] | None, str] = (None, "")

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
        data = state_to_json(changed)
        if cache:
            data["cache"] = cache
        if state.events:
            # Written again only when an event came (the log is a new list then).
            if self._events_text[0] is not state.events:
                self._events_text = (state.events, _Encoded(encode(state.events)))
            data["events"] = self._events_text[1]
        lines_of: dict[str, dict[str, str]] = {}
        remembered: dict[str, dict[str, tuple[Any, str]]] = {}
        for section, _ in _SECTIONS:
            before = self._lines.get(section, {})
            made, fresh = data[section], getattr(changed, section)
            lines, kept = {}, {}
            for name, record in getattr(state, section).items():
                line = _line(name, made[name]) if name in fresh else before[name][1]
                lines[str(name)] = line
                kept[name] = (record, line)
            lines_of[section], remembered[section] = lines, kept
        self._lines = remembered
        return _dumps(data, lines_of).encode("utf-8")


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
