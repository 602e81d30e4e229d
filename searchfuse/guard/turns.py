"""Turns: which assistant reply a search belongs to, and how many searches it spent.

A *turn* is one assistant reply. Agents that fire many searches in one reply
are what burns a search budget (a burst of ~30 parallel searches put four
healthy Tavily keys into cooldown within six seconds), so the guard counts
searches per turn, not per process or per minute.

A call belongs to

- the innermost [`turn`][searchfuse.turn] scope around it (a `contextvars` scope, so
  asyncio tasks and context-copying executors started inside inherit it), or
- outside any scope, an *implicit* turn: calls that overlap a search in
  flight, or start within `min_interval` seconds of the burst's first call,
  form one burst and count as one turn. A refused call never extends a
  burst, so an agent calling steadily gets a search every `min_interval`.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import threading
from collections import deque
from collections.abc import Hashable, Mapping
from types import TracebackType
from typing import NamedTuple, TypeAlias

from searchfuse.errors import TurnLimitReached

__all__ = ["Reservation", "Turn", "TurnBudget", "current_turn_id", "turn"]


#: One entered turn scope: `(turn id, the scope it shadows)`. A plain tuple: a frozen
#: dataclass's `__init__` cost a third of entering and leaving `with turn():`.
_Scope: TypeAlias = "tuple[str, _Scope | None]"


# The scope chain lives *inside* the context variable instead of in reset
# tokens kept on the Turn object: one Turn may be entered by many threads or
# tasks at once (`turn(id=...)` exists for exactly that), and each of them
# has its own context, so each keeps its own chain.
_current: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "searchfuse_turn", default=None
)


# Fresh turn ids: a per-process random prefix and a counter (uuid4 per turn
# cost more than the rest of a guarded call).
_PREFIX = f"turn-{os.urandom(4).hex()}-"
_TURN_NUMBERS = itertools.count(1)
_new = object.__new__


class Turn:
    """One assistant turn, usable as `with` and `async with`.

    Every call of a guarded tool inside the scope counts against the same
    per-turn budget, including calls made by asyncio tasks created inside it
    and by executors that copy the context (LangChain's do). A plain
    `threading.Thread` does not inherit a context: run its target in
    `contextvars.copy_context()` or enter `turn(id=...)` with the same id
    in the thread.

    Scopes nest; the innermost one wins. Leaving a scope does not reset the
    turn's count: entering `turn(id=same_id)` later joins the same turn
    again.
    """

    __slots__ = ("id",)

    def __init__(self, id: str | None = None) -> None:
        #: The turn's id: the one given, or a fresh one unique in this process.
        self.id: str = str(id) if id is not None else _PREFIX + str(next(_TURN_NUMBERS))

    def __repr__(self) -> str:
        return f"Turn(id={self.id!r})"

    def __enter__(self) -> Turn:
        _current.set((self.id, _current.get()))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        scope = _current.get()
        _current.set(scope[1] if scope is not None else None)

    async def __aenter__(self) -> Turn:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, traceback)


def turn(id: str | None = None) -> Turn:
    """Scope one assistant turn: `with turn(): ...` or `async with turn(): ...`.

    Without `id` every call starts a new turn with a fresh budget. With
    `id`, the scope joins the turn of that name, so an agent framework can
    pass its own id for one model reply (Hermes' `api_request_id`, a
    LangChain run id) from every thread that serves that reply:

    ```python
    with turn(id=api_request_id):
        web_search(query)
    ```
    """
    # Turn(id) without its __init__ frame: a reply's path enters a turn once per search.
    scope = _new(Turn)
    scope.id = str(id) if id is not None else _PREFIX + str(next(_TURN_NUMBERS))
    return scope


def current_turn_id() -> str | None:
    """The id of the innermost [`turn`][searchfuse.turn] scope around the caller, or `None`."""
    scope = _current.get()
    return scope[0] if scope is not None else None


class Reservation(NamedTuple):
    """One search reserved in a turn; hand it back with
    [`TurnBudget.release`][searchfuse.TurnBudget.release]."""

    turn: Hashable
    implicit: bool


class TurnBudget:
    """How many searches each turn has spent: the state behind `per_turn`.

    Every guard owns one unless it is given one with `guard(budget=...)`.
    Give several guarded tools the same `TurnBudget` and they share one
    budget: with `per_turn=1` a turn may call *one* of them once. Each guard
    keeps its own `per_turn` and `min_interval`; the budget only holds
    the counts, so sharing it never changes a tool's settings.

    Reservation is atomic across threads and asyncio tasks: a
    `threading.Lock` guards the counters and is never held across an
    `await`. `remember` bounds how many turns are kept; the oldest are
    forgotten first.
    """

    def __init__(self, *, remember: int = 4096) -> None:
        if remember < 1:
            raise ValueError(f"remember must be at least 1, got {remember!r}")
        self._lock = threading.Lock()
        self._remember = remember
        # Named turns stay counted after their scope exits: an integration may
        # enter `turn(id=...)` once per tool call of the same reply. Oldest
        # first (insertion order), so forgetting drops the oldest turn.
        # The order is kept beside them in a deque: forgetting the oldest is
        # popleft, O(1) (deleting a plain dict's first key degrades to O(n), and
        # an OrderedDict's upkeep costs more on every new turn).
        self._spent: dict[Hashable, int] = {}
        self._order: deque[Hashable] = deque()
        # Of those, the searches whose backend answered with an error: a turn
        # whose searches all failed is never told to "use the result".
        self._failed: dict[Hashable, int] = {}
        self._implicit_ids = itertools.count(1)
        self._implicit: Hashable = ("implicit", 0)
        self._implicit_in_flight = 0
        self._implicit_start: float | None = None

    def __repr__(self) -> str:
        return f"<TurnBudget turns={len(self._spent)}>"

    def reserve(self, per_turn: int | None, *, min_interval: float, now: float) -> Reservation:
        """Reserve one search in the caller's turn, or raise
        [`TurnLimitReached`][searchfuse.errors.TurnLimitReached].

        `per_turn=None` means unlimited (the search is still counted).
        """
        scope = _current.get()
        turn_id = scope[0] if scope is not None else None
        lock = self._lock
        lock.acquire()  # not `with`: this runs on every search, and `with` costs more
        try:
            key = turn_id if turn_id is not None else self._join_implicit(min_interval, now)
            known = self._spent.get(key)
            spent = known or 0
            allowed = per_turn is None or spent < per_turn
            if allowed:
                self._spent[key] = spent + 1
                if known is None:
                    order = self._order
                    order.append(key)
                    if len(order) > self._remember:
                        oldest = order.popleft()
                        del self._spent[oldest]
                        self._failed.pop(oldest, None)
            else:
                failed = spent > 0 and self._failed.get(key, 0) >= spent
                if turn_id is None:
                    # A refused call is still part of the burst: it ends now.
                    self._leave_implicit(now)
        finally:
            lock.release()
        if not allowed:
            raise TurnLimitReached(per_turn if per_turn is not None else 0, failed=failed)
        # tuple.__new__ is NamedTuple's constructor without its Python-level __new__.
        return tuple.__new__(Reservation, (key, turn_id is None))

    def release(
        self, reservation: Reservation, *, now: float, used: bool = True, failed: bool = False
    ) -> None:
        """Mark the reserved search finished.

        A search that was answered (with a result or an error) stays counted
        in its turn; `used=False` (nothing was sent: cancelled before any
        answer, or refused before sending) gives the search back to the
        turn. `failed=True`: the backend answered with an error, so the
        turn's refusal tells the model the search failed instead of pointing
        it at a result that does not exist.
        """
        if reservation.implicit or not used or failed:
            with self._lock:
                turn = reservation.turn
                if not used:
                    spent = self._spent.get(turn, 0)
                    if spent > 0:
                        self._spent[turn] = spent - 1
                elif failed and turn in self._spent:
                    self._failed[turn] = self._failed.get(turn, 0) + 1
                if reservation.implicit:
                    self._leave_implicit(now)

    def reset(self) -> None:
        """Forget every turn's count and the implicit burst (for tests, or a new session)."""
        with self._lock:
            self._spent.clear()
            self._order.clear()
            self._failed.clear()
            self._implicit = ("implicit", next(self._implicit_ids))
            self._implicit_in_flight = 0
            self._implicit_start = None

    def spent(self, *, min_interval: float, now: float) -> int:
        """Searches spent so far in the caller's turn (`0` if a new turn would start)."""
        return self._count(self._spent, min_interval, now)

    def failed(self, *, min_interval: float, now: float) -> int:
        """Of the searches spent in the caller's turn, those the backend answered with an error."""
        return self._count(self._failed, min_interval, now)

    def _count(self, counts: Mapping[Hashable, int], min_interval: float, now: float) -> int:
        turn_id = current_turn_id()
        with self._lock:
            if turn_id is not None:
                return counts.get(turn_id, 0)
            if self._implicit_live(min_interval, now):
                return counts.get(self._implicit, 0)
            return 0

    # -- the implicit burst ------------------------------------------------

    def _implicit_live(self, min_interval: float, now: float) -> bool:
        if self._implicit_in_flight > 0:
            return True  # overlapping a search in flight: one burst, however long it runs
        # The window runs from the burst's first call, never from later ones:
        # calls that keep coming (refused ones included) cannot hold it open.
        start = self._implicit_start
        return start is not None and now - start < min_interval

    def _join_implicit(self, min_interval: float, now: float) -> Hashable:
        if not self._implicit_live(min_interval, now):
            self._implicit = ("implicit", next(self._implicit_ids))
            self._implicit_start = now
        self._implicit_in_flight += 1
        return self._implicit

    def _leave_implicit(self, now: float) -> None:
        # A call that ends (answered, failed or refused) only stops overlapping.
        self._implicit_in_flight = max(0, self._implicit_in_flight - 1)
