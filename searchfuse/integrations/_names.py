"""Names for the framework objects an integration counts turns and conversations by.

Some frameworks hand a tool no id for its run, step or session, only an
object that lives as long as it does (a run's `Usage`, a task's first memory
step, an MCP session). Such an object is named by identity, checked through
a weak reference (an id may be reused once its object is gone). The names are
random, not counted: budgets live in a store several processes share, and two
processes must never give their first runs the same name.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from typing import Any

__all__ = ["ObjectNames"]


class ObjectNames:
    """A name for each live object, the same for as long as the object lives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[int, tuple[weakref.ref[Any], str]] = {}

    def name(self, thing: object) -> str:
        """The name of `thing`: 16 hex digits, new for each object."""
        with self._lock:
            known = self._known.get(id(thing))
            if known is None or known[0]() is not thing:
                self._known = {k: v for k, v in self._known.items() if v[0]() is not None}
                known = (weakref.ref(thing), uuid.uuid4().hex[:16])
                self._known[id(thing)] = known
            return known[1]
